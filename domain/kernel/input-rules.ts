import { z } from 'zod';

/**
 * Input rules that zod checks in code and that the OpenAPI document must state as well, so that a
 * client (or a contract tester) following the document sends only what the server accepts. Each
 * helper builds the zod schema and its JSON Schema metadata (zod's `.meta()`, which
 * zod-to-openapi copies into the document) from the same numbers.
 */

/** What `\s` (ECMA-262) matches, and so what `trim()` removes, spelled out so every regex dialect reads the same class. */
export const ECMA_WHITESPACE = '\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff';

/**
 * Holds a character `trim()` keeps: ECMA-262 `\s` is exactly what `trim()` removes (U+FEFF
 * included). U+FEFF is named again for regex dialects whose `\s` lacks it (Python's).
 */
export const NON_BLANK = '[^\\s\\uFEFF]';

/**
 * An absolute http(s) URL, as the URL checks (domain/platform/url-safety) first require; whether its host
 * is acceptable (public, resolvable, https only outside development) is for them to say.
 */
export const HTTP_URL = '^https?://';
/** The same, or a template whose `{{...}}` variables make the URL when an automation runs. */
export const HTTP_URL_OR_TEMPLATE = '^https?://|\\{\\{';

/**
 * An e-mail address as zod's `z.email()` checks it, documented by the same regular expression (a
 * generic `format: email` admits addresses it refuses: quoted local parts, IP literals).
 */
export function emailAddress(max = 320) {
  return z.string().max(max).regex(z.regexes.email, 'Invalid email address');
}

/** Text that is trimmed before use and must keep `min` to `max` characters: a blank one is refused. */
export function trimmedText(max: number, min = 1) {
  return z.string().trim().min(min).max(max).meta({ pattern: NON_BLANK });
}

/**
 * An object of optional fields of which at least one must be sent (a PATCH body): refused in code
 * with `message`, and documented as `minProperties: 1` plus "one of these fields is present"
 * (unknown fields are ignored, so they do not count).
 */
export function atLeastOne<T extends z.ZodObject>(schema: T, message: string): T {
  const keys = Object.keys(schema.shape);
  return schema
    .refine((value) => Object.values(value).some((v) => v !== undefined), { message })
    .meta({ minProperties: 1, anyOf: keys.map((key) => ({ required: [key] })) }) as T;
}

/**
 * Fields allowed only with some values of a discriminating field (`pipelineId` only for a
 * `card_created` trigger): refused in code naming the field, documented as `if`/`then`.
 */
export function onlyWith<T extends z.ZodObject>(
  schema: T,
  discriminator: string,
  rules: Record<string, readonly string[]>,
  what = discriminator,
): T {
  return schema
    .superRefine((value: Record<string, unknown>, ctx) => {
      for (const [field, allowed] of Object.entries(rules)) {
        if (value[field] !== undefined && !allowed.includes(value[discriminator] as string)) {
          ctx.addIssue({ code: 'custom', path: [field], message: `only for ${what} ${allowed.join(', ')}` });
        }
      }
    })
    .meta({
      allOf: Object.entries(rules).map(([field, allowed]) => ({
        if: { properties: { [field]: {} }, required: [field] },
        then: { properties: { [discriminator]: { enum: [...allowed] } } },
      })),
    }) as T;
}
