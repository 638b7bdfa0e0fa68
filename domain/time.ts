/** Every timestamp leaves the service as ISO 8601 UTC with milliseconds. */
export function iso(value: Date | string | null | undefined): string | null {
  if (value === null || value === undefined) return null;
  return (value instanceof Date ? value : new Date(value)).toISOString();
}

