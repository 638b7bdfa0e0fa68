const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** References in bodies and filters may be an id or a name; only a uuid-shaped one is tried as an id. */
export function isUuid(value: string): boolean {
  return UUID.test(value);
}
