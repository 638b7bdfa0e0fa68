import pino, { Logger } from 'pino';

/**
 * Structured JSON logs. Secrets never reach a log line: the paths below (each secret-bearing field
 * at the root of a line and one level down, and a few deeper ones) are censored wherever they
 * appear, and request logs carry the route pattern rather than URLs that embed tokens.
 */
const SECRET_FIELDS = ['authorization', 'key', 'apiKey', 'secret', 'token', 'accessToken', 'appSecret', 'verifyToken', 'password'];
export const REDACT_PATHS = [
  ...SECRET_FIELDS,
  ...SECRET_FIELDS.map((field) => `*.${field}`),
  'headers.authorization',
  'req.headers.authorization',
  'config.accessToken',
  'config.appSecret',
  'config.verifyToken',
];

export function createLogger(name: string, level: string): Logger {
  return pino({ name, level, redact: { paths: REDACT_PATHS, censor: '[redacted]' } });
}

export type { Logger };
