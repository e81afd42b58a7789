/**
 * The dashboard as a `node:http` request handler: mount it in your own
 * server under a base path, or run `txbox dashboard`. Pages and assets are
 * strings in this package (no build step, no files to find at run time).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TLSSocket } from 'node:tls';
import { ConfigError } from '../core/errors.ts';
import { isUuid } from '../core/uuid.ts';
import { hostName } from '../core/loopback.ts';
import { bearerToken, crossSiteReason, FailureLimiter, isLoopback, matchToken, readCookie, sameSecret, SessionStore, sessionCookie, type DashboardSession } from './dashboard-auth.ts';
import { DASHBOARD_JS } from './dashboard-script.ts';
import { DASHBOARD_CSS } from './dashboard-styles.ts';
import { resolveDashboardOptions, type DashboardOptions, type ResolvedDashboardOptions } from './dashboard-options.ts';
import { dashboardPage, loginPage } from './dashboard-page.ts';
import { DashboardSampler, type DashboardSnapshot } from './dashboard-sampler.ts';
import { thrownText } from '../core/error-text.ts';

/** A request handler with a `close()` that stops sampling and ends the live views. */
export interface DashboardHandler {
  (req: IncomingMessage, res: ServerResponse): void;
  /** Resolves once the first sample was taken (or failed). */
  ready(): Promise<void>;
  close(): Promise<void>;
}

/** Who is asking: the token's name (or 'no-auth'), and the session for browser requests. */
interface Caller {
  readonly who: string;
  readonly session: DashboardSession | null;
}

const COOKIE = 'txbox_dashboard';
const MAX_BODY = 64 * 1024;

/** Sent with every answer: no inline script or style may run, no framing, nothing cached. */
const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  'content-security-policy': "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  'x-frame-options': 'DENY',
  'x-content-type-options': 'nosniff',
  'cache-control': 'no-store',
  // same-origin, not no-referrer: with no-referrer a form POST carries `Origin: null`, which the same-origin check refuses.
  'referrer-policy': 'same-origin',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
};

/** The actions, by path: what they do and on which admin. */
const ACTIONS: Readonly<Record<string, { readonly inbox: boolean; readonly verb: string; readonly run: (o: ResolvedDashboardOptions, ids: string[], actor: string) => Promise<string[]> }>> = {
  '/api/parked/retry': { inbox: false, verb: 'retried', run: (o, ids, actor) => o.admin.retryParked({ ids }, actor) },
  '/api/parked/skip': { inbox: false, verb: 'skipped', run: (o, ids, actor) => o.admin.skipParked({ ids }, actor) },
  '/api/parked/discard': { inbox: false, verb: 'discarded', run: (o, ids, actor) => o.admin.discardParked({ ids }, actor) },
  '/api/inbox/dead/retry': { inbox: true, verb: 'queued for retry', run: (o, ids, actor) => o.inboxAdmin!.retryDead({ ids }, actor) },
  '/api/inbox/dead/discard': { inbox: true, verb: 'discarded', run: (o, ids, actor) => o.inboxAdmin!.discardDead({ ids }, actor) },
  '/api/inbox/held/retry': { inbox: true, verb: 'queued for retry', run: (o, ids, actor) => o.inboxAdmin!.retryHeld({ ids }, actor) },
};

/**
 * Creates the dashboard's request handler. It samples the status every
 * `sampleIntervalMs` from the moment it is created; call `close()` when the
 * server stops.
 *
 * @example
 * const dashboard = createDashboardHandler({ admin: new PostgresAdmin(connection), token: process.env.TXBOX_DASHBOARD_TOKEN, basePath: '/ops/txbox' });
 * createServer((req, res) => (req.url?.startsWith('/ops/txbox') ? dashboard(req, res) : app(req, res))).listen(8080, '127.0.0.1');
 */
export function createDashboardHandler(options: DashboardOptions): DashboardHandler {
  const o = resolveDashboardOptions(options);
  const sessions = new SessionStore(o.sessionTtlMs);
  const failures = new FailureLimiter();
  const sampler = new DashboardSampler({
    admin: o.admin,
    inboxAdmin: o.inboxAdmin,
    intervalMs: o.sampleIntervalMs,
    historyMs: o.historyMs,
    listLimit: o.listLimit,
    showPayloads: o.showPayloads,
    logger: o.logger,
  });
  const first = sampler.start();
  const streams = new Set<ServerResponse>();
  const cookiePath = o.basePath === '' ? '/' : o.basePath;

  const send = (res: ServerResponse, status: number, type: string, body: string, extra: Record<string, string | string[]> = {}): void => {
    res.writeHead(status, { ...SECURITY_HEADERS, 'content-type': type, 'content-length': String(Buffer.byteLength(body)), ...extra });
    res.end(body);
  };
  const json = (res: ServerResponse, status: number, value: unknown, extra: Record<string, string | string[]> = {}): void =>
    send(res, status, 'application/json; charset=utf-8', JSON.stringify(value), extra);
  const redirect = (res: ServerResponse, location: string, extra: Record<string, string | string[]> = {}): void => send(res, 303, 'text/plain; charset=utf-8', '', { location, ...extra });

  /** Token or session, or null; in no-auth mode everyone on loopback (with a session made on first sight of the page). */
  const identify = (req: IncomingMessage): Caller | null => {
    const session = sessions.get(readCookie(req.headers.cookie, COOKIE));
    if (o.allowNoAuth) return { who: 'no-auth', session };
    const presented = bearerToken(req.headers.authorization);
    if (presented !== null) {
      const name = matchToken(presented, o.tokens);
      if (name === null) failures.fail(address(req));
      return name === null ? null : { who: name, session: null };
    }
    return session ? { who: session.who, session } : null;
  };

  const newSessionCookie = (req: IncomingMessage, who: string): { session: DashboardSession; cookie: string } => {
    const session = sessions.create(who);
    const secure = o.secureCookie ?? Boolean((req.socket as TLSSocket).encrypted);
    return { session, cookie: sessionCookie(COOKIE, session.id, cookiePath, secure, Math.floor(o.sessionTtlMs / 1000)) };
  };

  const address = (req: IncomingMessage): string => req.socket.remoteAddress ?? 'unknown';
  const actor = (req: IncomingMessage, caller: Caller): string => `dashboard:${caller.who}@${address(req)}`;

  /** A POST from a browser session must come from this page: same origin and the session's CSRF token. Bearer callers are not browsers. */
  const csrfProblem = (req: IncomingMessage, caller: Caller): string | null => {
    const cross = crossSiteReason(req.headers, o.allowedOrigins);
    if (cross !== null) return `cross-site request refused (${cross})`;
    if (caller.session === null) return 'no session: reload the page';
    const presented = req.headers['x-csrf-token'];
    if (typeof presented !== 'string' || !sameSecret(presented, caller.session.csrf)) return 'missing or wrong CSRF token: reload the page';
    return null;
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? '/', 'http://dashboard.invalid');
    if (url.pathname !== o.basePath && !url.pathname.startsWith(`${o.basePath}/`)) return json(res, 404, { error: 'not found' });
    const path = url.pathname.slice(o.basePath.length);
    if (o.allowNoAuth && (!isLoopback(req.socket.remoteAddress ?? '') || !isLoopback(hostName(req.headers.host)))) {
      return json(res, 403, { error: 'this dashboard runs without a token and answers loopback clients only (Host and address)' });
    }
    if (req.method === 'GET' && path === '') return redirect(res, `${o.basePath}/`);
    if (req.method === 'GET' && path === '/assets/dashboard.js') return send(res, 200, 'text/javascript; charset=utf-8', DASHBOARD_JS);
    if (req.method === 'GET' && path === '/assets/dashboard.css') return send(res, 200, 'text/css; charset=utf-8', DASHBOARD_CSS);
    if (path === '/login') return login(req, res);

    if (!o.allowNoAuth && req.headers.authorization !== undefined && !failures.allowed(address(req))) return json(res, 429, { error: 'too many wrong tokens from this address; wait a minute' }, { 'retry-after': '60' });
    const caller = identify(req);
    if (req.method === 'GET' && path === '/') {
      if (caller === null) return redirect(res, 'login');
      if (caller.session === null && o.allowNoAuth) {
        const { session, cookie } = newSessionCookie(req, 'no-auth');
        return send(res, 200, 'text/html; charset=utf-8', dashboardPage(session.csrf, 'no-auth', false), { 'set-cookie': cookie });
      }
      return send(res, 200, 'text/html; charset=utf-8', dashboardPage(caller.session?.csrf ?? '', caller.who, !o.allowNoAuth));
    }
    if (caller === null) return json(res, 401, { error: 'log in, or send Authorization: Bearer <token>' }, { 'www-authenticate': 'Bearer realm="txbox dashboard"' });
    if (req.method === 'GET' && path === '/api/state') {
      await first;
      return json(res, 200, state(sampler.snapshot, true));
    }
    if (req.method === 'GET' && path === '/api/events') return stream(req, res, caller);
    if (req.method === 'POST' && path === '/logout') {
      const problem = csrfProblem(req, caller);
      if (problem !== null) return json(res, 403, { error: problem });
      if (caller.session) sessions.delete(caller.session.id);
      return json(res, 200, { ok: true }, { 'set-cookie': sessionCookie(COOKIE, '', cookiePath, false, 0) });
    }
    const action = ACTIONS[path];
    if (action === undefined) return json(res, 404, { error: 'not found' });
    if (req.method !== 'POST') return json(res, 405, { error: 'use POST' }, { allow: 'POST' });
    if (caller.session !== null || o.allowNoAuth) {
      const problem = csrfProblem(req, caller);
      if (problem !== null) return json(res, 403, { error: problem });
    }
    if (action.inbox && o.inboxAdmin === null) return json(res, 404, { error: 'this dashboard shows no inbox' });
    if (!/^application\/json\b/i.test(req.headers['content-type'] ?? '')) return json(res, 415, { error: 'send the body as application/json: {"ids": ["<event id>", ...]}' });
    const ids = parseIds(await readBody(req, MAX_BODY));
    const changed = await action.run(o, ids, actor(req, caller));
    o.logger.info({ action: path.slice(5), requested: ids.length, changed: changed.length, actor: actor(req, caller) }, 'dashboard: action');
    const missing = ids.filter((id) => !changed.includes(id.toLowerCase()));
    return json(res, 200, { verb: action.verb, changed, missing, ...state(await sampler.refresh(), false) });
  };

  const login = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    if (o.allowNoAuth) return redirect(res, './');
    if (req.method === 'GET') return send(res, 200, 'text/html; charset=utf-8', loginPage(null));
    if (req.method !== 'POST') return json(res, 405, { error: 'use GET or POST' }, { allow: 'GET, POST' });
    const cross = crossSiteReason(req.headers, o.allowedOrigins);
    if (cross !== null) return send(res, 403, 'text/html; charset=utf-8', loginPage(`cross-site login refused (${cross})`));
    if (!failures.allowed(address(req))) return send(res, 429, 'text/html; charset=utf-8', loginPage('too many wrong tokens from this address; wait a minute'), { 'retry-after': '60' });
    const token = new URLSearchParams(await readBody(req, 4096)).get('token') ?? '';
    const name = matchToken(token, o.tokens);
    if (name === null) {
      failures.fail(address(req));
      return send(res, 401, 'text/html; charset=utf-8', loginPage('wrong token'));
    }
    o.logger.info({ who: name, from: req.socket.remoteAddress }, 'dashboard: login');
    return redirect(res, './', { 'set-cookie': newSessionCookie(req, name).cookie });
  };

  const stream = (req: IncomingMessage, res: ServerResponse, caller: Caller): void => {
    res.writeHead(200, { ...SECURITY_HEADERS, 'content-type': 'text/event-stream; charset=utf-8', connection: 'keep-alive', 'x-accel-buffering': 'no' });
    res.write(`retry: 3000\n\n`);
    const push = (snapshot: DashboardSnapshot): void => {
      // A session logged out (or expired) elsewhere ends its live view.
      if (caller.session !== null && sessions.get(caller.session.id) === null) return void res.end();
      res.write(`event: snapshot\ndata: ${JSON.stringify(state(snapshot, false))}\n\n`);
    };
    push(sampler.snapshot);
    const unsubscribe = sampler.subscribe(push);
    const keepAlive = setInterval(() => res.write(': keep-alive\n\n'), 15_000);
    keepAlive.unref();
    streams.add(res);
    res.on('close', () => {
      unsubscribe();
      clearInterval(keepAlive);
      streams.delete(res);
    });
  };

  /** The page's data: the snapshot, and with `withHistory` the chart history. */
  const state = (snapshot: DashboardSnapshot, withHistory: boolean) => ({
    snapshot,
    showPayloads: o.showPayloads,
    inbox: o.inboxAdmin !== null,
    historyLength: Math.ceil(o.historyMs / o.sampleIntervalMs),
    ...(withHistory ? { history: sampler.history } : {}),
  });

  const handler = ((req: IncomingMessage, res: ServerResponse): void => {
    handle(req, res).catch((err: unknown) => {
      if (res.headersSent) return void res.end();
      if (err instanceof BadRequest) return json(res, err.status, { error: err.message }, err.status === 413 ? { connection: 'close' } : {});
      if (err instanceof ConfigError) return json(res, 400, { error: err.message });
      o.logger.error({ err: thrownText(err) }, 'dashboard: request failed');
      json(res, 500, { error: 'the dashboard could not do this; see its log' });
    });
  }) as DashboardHandler;
  handler.ready = () => first;
  handler.close = async () => {
    for (const res of streams) res.end();
    await sampler.stop();
  };
  return handler;
}

class BadRequest extends Error {
  constructor(
    message: string,
    readonly status = 400,
  ) {
    super(message);
  }
}


function readBody(req: IncomingMessage, limit: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    // Over the limit: answer 413 at once (with Connection: close) and drop the rest of the upload unread.
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) reject(new BadRequest(`the body is over ${limit} bytes`, 413));
      else chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function parseIds(body: string): string[] {
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    throw new BadRequest('the body is not JSON; send {"ids": ["<event id>", ...]}');
  }
  const ids = (value as { ids?: unknown } | null)?.ids;
  if (!Array.isArray(ids) || ids.length === 0 || ids.length > 1000) throw new BadRequest('ids: give 1 to 1000 event ids, e.g. {"ids": ["0190f1e2-7c1a-7b3e-9f00-2a1b3c4d5e6f"]}');
  const bad = ids.find((id) => typeof id !== 'string' || !isUuid(id));
  if (bad !== undefined) throw new BadRequest(`ids: ${JSON.stringify(bad)} is not an event id (a UUID)`);
  return ids as string[];
}
