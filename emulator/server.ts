import { randomBytes } from 'node:crypto';
import type { Server } from 'node:http';
import Koa from 'koa';
import { koaBody } from 'koa-body';

/**
 * A local stand-in for the WhatsApp Cloud API, speaking its wire format: the only thing the
 * project emulates, because the real provider cannot be reached from here. The sending path
 * does not know it talks to an emulator; it only has an instance `baseUrl`.
 *
 * Now: `POST /{version}/{phoneNumberId}/messages` answers like Graph API.
 * The messaging issue adds per-number error scripting, slowness and outages.
 */
export interface EmulatorCall {
  at: string;
  phoneNumberId: string;
  authorization: string | undefined;
  body: unknown;
}

export function createEmulator(): { app: Koa; calls: EmulatorCall[] } {
  const app = new Koa();
  const calls: EmulatorCall[] = [];
  app.use(koaBody({ json: true, multipart: false, urlencoded: false, text: false, jsonLimit: '2mb' }));
  app.use(async (ctx, next) => {
    if (ctx.method === 'GET' && ctx.path === '/health') {
      ctx.body = { status: 'ok' };
      return;
    }
    if (ctx.method === 'GET' && ctx.path === '/__emulator/calls') {
      ctx.body = { calls };
      return;
    }
    await next();
  });
  app.use(async (ctx) => {
    const match = /^\/(v\d+\.\d+)\/([^/]+)\/messages$/.exec(ctx.path);
    if (ctx.method !== 'POST' || !match) {
      ctx.status = 404;
      ctx.body = { error: { message: 'Unknown path', type: 'GraphMethodException', code: 100 } };
      return;
    }
    const auth = ctx.get('authorization');
    if (!/^Bearer \S+/.test(auth)) {
      ctx.status = 401;
      ctx.body = { error: { message: 'Invalid OAuth access token.', type: 'OAuthException', code: 190 } };
      return;
    }
    const body = (ctx.request as { body?: { to?: string } }).body ?? {};
    calls.push({ at: new Date().toISOString(), phoneNumberId: match[2], authorization: '[redacted]', body });
    const to = String(body.to ?? '');
    ctx.body = {
      messaging_product: 'whatsapp',
      contacts: [{ input: to, wa_id: to.replace(/\D/g, '') }],
      messages: [{ id: `wamid.${randomBytes(16).toString('hex')}` }],
    };
  });
  return { app, calls };
}

if (require.main === module) {
  const port = Number(process.env.EMULATOR_PORT ?? 3100);
  const server: Server = createEmulator().app.listen(port, '127.0.0.1', () => {
    console.log(JSON.stringify({ msg: 'emulator listening', port }));
  });
  const stop = (): void => {
    server.close();
    process.exit(0);
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}
