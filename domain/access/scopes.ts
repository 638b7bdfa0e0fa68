/** API key scopes: the contract's named scopes plus `<resource>:read|write` for the other resources. */
export const ALL_SCOPES = [
  'deals:read',
  'deals:write',
  'leads:read',
  'leads:write',
  'tags:read',
  'tags:write',
  'lists:read',
  'lists:write',
  'notes:read',
  'notes:write',
  'pipelines:read',
  'products:read',
  'products:write',
  'tasks:read',
  'tasks:write',
  'activities:read',
  'insights:read',
  'conversations:read',
  'conversations:write',
  'conversations:send',
  'instances:read',
  'webhooks:read',
  'webhooks:write',
  'events:read',
  'automations:read',
  'automations:write',
  'broadcasts:read',
  'broadcasts:write',
  'templates:read',
  'templates:write',
] as const;

export type Scope = (typeof ALL_SCOPES)[number];

/**
 * The only implied scope: `leads:write` also authorizes reading pipelines.
 * Nothing else implies anything: `conversations:send` is dedicated and grants no reads.
 */
const IMPLIED: Partial<Record<Scope, Scope[]>> = {
  'leads:write': ['pipelines:read'],
};

/** True when the key's scopes (directly or by implication) include one of `required`. */
export function grants(keyScopes: readonly string[], required: readonly Scope[]): boolean {
  if (required.length === 0) return true;
  const effective = new Set<string>(keyScopes);
  for (const scope of keyScopes) for (const implied of IMPLIED[scope as Scope] ?? []) effective.add(implied);
  return required.some((scope) => effective.has(scope));
}

/** Scopes that satisfy `scope`, for documentation: the scope itself and those implying it. */
export function satisfying(scope: Scope): Scope[] {
  return [scope, ...(Object.keys(IMPLIED) as Scope[]).filter((s) => IMPLIED[s]?.includes(scope))];
}
