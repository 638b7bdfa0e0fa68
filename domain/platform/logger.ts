import pino, { Logger } from 'pino';

/**
 * Structured JSON logs. Secrets never reach a log line: the paths below are censored wherever
 * they appear, and request logs carry the route pattern rather than URLs that embed tokens.
 */
export const REDACT_PATHS = [
  'authorization',
  'headers.authorization',
  'req.headers.authorization',
  'key',
  'apiKey',
  'secret',
  'token',
  'accessToken',
  'appSecret',
  'verifyToken',
  'password',
  '*.authorization',
  '*.key',
  '*.apiKey',
  '*.secret',
  '*.token',
  '*.accessToken',
  '*.appSecret',
  '*.verifyToken',
  '*.password',
  'config.accessToken',
  'config.appSecret',
  'config.verifyToken',
];

export function createLogger(name: string, level: string): Logger {
  return pino({ name, level, redact: { paths: REDACT_PATHS, censor: '[redacted]' } });
}

export type { Logger };
