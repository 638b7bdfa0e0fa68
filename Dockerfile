# One image for the API, the worker and the migration job (the command picks the role). It runs
# the compiled JavaScript of `npm run build` (dist/), never TypeScript: no tsx and no webpack at start.

# Build stage: every dependency (TypeScript, the workflow bundler), the sources, `npm run build`:
# tsc into dist/, and the workflow bundle prebuilt into dist/workflow-bundle.js.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json knexfile.ts ./
COPY api ./api
COPY domain ./domain
COPY types ./types
COPY activities ./activities
COPY workflows ./workflows
COPY workers ./workers
COPY migrations ./migrations
COPY scripts ./scripts
RUN npm run build

# Runtime stage: the production dependencies and dist/ only.
FROM node:20-bookworm-slim
WORKDIR /app
ENV NODE_ENV=production
# Two malloc arenas, as scripts/stack.ts NODE_PROCESS_ENV gives the API and the worker wherever the
# project starts them: the worker's highest RSS 318-324 -> 271-273 MB at the same CPU (docs/performance.md).
ENV MALLOC_ARENA_MAX=2
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
COPY --from=build /app/dist ./dist
USER node
EXPOSE 3000
# The API with its V8 flags (scripts/stack.ts API_NODE_FLAGS): a heap held to twice its live size.
CMD ["node", "--max-semi-space-size=8", "--heap-growing-percent=100", "dist/api/server.js"]
