# One image for the API, the worker and the migration job (the command picks the role).
FROM node:20-bookworm-slim
WORKDIR /app
ENV NODE_ENV=production
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund
COPY tsconfig.json knexfile.ts ./
COPY api ./api
COPY domain ./domain
COPY types ./types
COPY activities ./activities
COPY workflows ./workflows
COPY workers ./workers
COPY migrations ./migrations
COPY scripts ./scripts
COPY emulator ./emulator
USER node
EXPOSE 3000
CMD ["node", "--import", "tsx", "api/server.ts"]
