/** ISO 8601 UTC with milliseconds: the form every timestamp leaves the service in. */
const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/** Every timestamp leaves the service as ISO 8601 UTC with milliseconds; a text already in that form is kept as it is. */
export function iso(value: Date | string | null | undefined): string | null {
  if (value === null || value === undefined) return null;
  if (typeof value === 'string' && ISO_MS.test(value)) return value;
  return (value instanceof Date ? value : new Date(value)).toISOString();
}
