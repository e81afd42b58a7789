/**
 * The dashboard's HTTP contract, mounted under a base path in a server of
 * the test's own, against the real PostgreSQL: no token -> 401; the login
 * form sets an HttpOnly SameSite=Strict cookie; a POST from a browser
 * session needs the same origin AND the session's CSRF token (403
 * otherwise); Bearer callers act without one; every answer carries the
 * security headers; payloads only when enabled; actions are audited with the
 * token's name and the caller's address. And the no-auth mode: loopback
 * clients and Host names only.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createOutbox, defineEvent, payloadType } from 'txbox';
import { createDashboardHandler, type DashboardHandler } from 'txbox/dashboard';
import { PostgresAdmin, PostgresOutboxStore } from 'txbox/postgres';
import { openDb, type TestDb } from '../helpers/databases.ts';

const Placed = defineEvent({ type: 'OrderPlaced', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ secret: string }>() });
const ALICE = 'alice-token-0123456789abcdef';
const BOB = 'bob-token-0123456789abcdef';

interface Answer {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

function call(port: number, method: string, path: string, headers: Record<string, string> = {}, body?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, method, path, headers: { ...(body !== undefined ? { 'content-length': String(Buffer.byteLength(body)) } : {}), ...headers } }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function serve(handler: DashboardHandler, basePath: string): Promise<{ server: Server; port: number }> {
  const server = createServer((req, res) => {
    if (req.url?.startsWith(basePath)) return handler(req, res);
    res.writeHead(200).end('the app');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as AddressInfo).port };
}

function assertSecurityHeaders(a: Answer, what: string): void {
  const csp = String(a.headers['content-security-policy']);
  assert.match(csp, /script-src 'self'/, `${what}: CSP`);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/, `${what}: no inline script or style`);
  assert.match(csp, /frame-ancestors 'none'/, `${what}: CSP frame-ancestors`);
  assert.equal(a.headers['x-frame-options'], 'DENY', `${what}: X-Frame-Options`);
  assert.equal(a.headers['cache-control'], 'no-store', `${what}: Cache-Control`);
  assert.equal(a.headers['x-content-type-options'], 'nosniff', `${what}: nosniff`);
}

describe('dashboard over HTTP', { timeout: 60_000 }, () => {
  let db: TestDb;
  let ids: string[];
  const closers: (() => Promise<void>)[] = [];

  before(async () => {
    db = await openDb('postgres');
    const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Placed] });
    ids = await db.transaction((tx) => outbox.enqueue(tx, [1, 2, 3, 4].map((n) => Placed({ aggregateId: n, payload: { secret: `card-${n}` } }))));
    await db.query(`UPDATE "${db.schema}".outbox SET state = 'parked', attempts = 3, last_error = 'HTTP 400', parked_at = now() WHERE id = ANY($1::uuid[])`, [ids]);
  });
  after(async () => {
    for (const close of closers) await close();
    await db.close();
  });

  async function start(options: Omit<Parameters<typeof createDashboardHandler>[0], 'admin'>, basePath = '/ops/txbox') {
    const handler = createDashboardHandler({ admin: new PostgresAdmin(db.connection, { schema: db.schema }), basePath, sampleIntervalMs: 200, ...options } as Parameters<typeof createDashboardHandler>[0]);
    const { server, port } = await serve(handler, basePath);
    closers.push(async () => {
      await handler.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    });
    await handler.ready();
    return port;
  }

  it('token mode: 401 without a token, Bearer works, login sets a strict cookie, forged POSTs get 403, actions are audited', async () => {
    const port = await start({ token: { alice: ALICE, bob: BOB } });
    const origin = `http://127.0.0.1:${port}`;
    const base = '/ops/txbox';

    const anonymous = await call(port, 'GET', `${base}/api/state`);
    assert.equal(anonymous.status, 401);
    assert.match(String(anonymous.headers['www-authenticate']), /^Bearer/);
    assertSecurityHeaders(anonymous, '401');
    assert.equal((await call(port, 'GET', `${base}/api/state`, { authorization: `Bearer ${ALICE}x` })).status, 401, 'a wrong token');
    assert.equal((await call(port, 'GET', `${base}/api/events`)).status, 401, 'the live view needs a token too');
    const page = await call(port, 'GET', `${base}/`);
    assert.deepEqual([page.status, page.headers.location], [303, 'login']);
    assert.equal((await call(port, 'GET', '/elsewhere')).body, 'the app', 'the user server keeps the rest');

    const state = await call(port, 'GET', `${base}/api/state`, { authorization: `Bearer ${BOB}` });
    assert.equal(state.status, 200);
    assertSecurityHeaders(state, 'api/state');
    const parsed = JSON.parse(state.body) as { snapshot: { parked: Record<string, unknown>[] }; history: unknown[] };
    assert.equal(parsed.snapshot.parked.length, 4);
    assert.ok(parsed.history.length >= 1);
    assert.ok(parsed.snapshot.parked.every((p) => !('payload' in p)), 'no payloads unless enabled');
    assert.doesNotMatch(state.body, /card-1/);

    // The login form: a foreign Origin is refused, a wrong token is 401, the right one sets the cookie.
    const form = { 'content-type': 'application/x-www-form-urlencoded' };
    assert.equal((await call(port, 'POST', `${base}/login`, { ...form, origin: 'http://evil.example' }, `token=${ALICE}`)).status, 403);
    assert.equal((await call(port, 'POST', `${base}/login`, { ...form, origin }, 'token=wrong-token-0123456789')).status, 401);
    const login = await call(port, 'POST', `${base}/login`, { ...form, origin }, `token=${ALICE}`);
    assert.equal(login.status, 303);
    const setCookie = String(login.headers['set-cookie']);
    assert.match(setCookie, /^txbox_dashboard=[A-Za-z0-9_-]{43}; Path=\/ops\/txbox; HttpOnly; SameSite=Strict; Max-Age=\d+$/);
    const cookie = setCookie.split(';')[0]!;
    const html = await call(port, 'GET', `${base}/`, { cookie });
    assert.equal(html.status, 200);
    assertSecurityHeaders(html, 'page');
    const csrf = /<meta name="txbox-csrf" content="([^"]+)">/.exec(html.body)?.[1];
    assert.ok(csrf, 'the page carries its CSRF token');
    assert.deepEqual(html.body.match(/<script[^>]*>/g), ['<script type="module" src="assets/dashboard.js">'], 'no inline script');
    const js = await call(port, 'GET', `${base}/assets/dashboard.js`);
    assert.equal(js.status, 200);
    assert.match(String(js.headers['content-type']), /text\/javascript/);

    // Forged POSTs with the session cookie: each check on its own.
    const json = { 'content-type': 'application/json', cookie };
    const body = JSON.stringify({ ids: [ids[0]] });
    const forged = [
      await call(port, 'POST', `${base}/api/parked/retry`, { ...json, 'x-csrf-token': csrf }, body),
      await call(port, 'POST', `${base}/api/parked/retry`, { ...json, 'x-csrf-token': csrf, origin: 'http://evil.example' }, body),
      await call(port, 'POST', `${base}/api/parked/retry`, { ...json, 'x-csrf-token': csrf, origin, 'sec-fetch-site': 'cross-site' }, body),
      await call(port, 'POST', `${base}/api/parked/retry`, { ...json, origin }, body),
      await call(port, 'POST', `${base}/api/parked/retry`, { ...json, origin, 'x-csrf-token': `${csrf}x` }, body),
    ];
    assert.deepEqual(forged.map((f) => f.status), [403, 403, 403, 403, 403], forged.map((f) => f.body).join('\n'));
    assert.match(forged[0]!.body, /no Origin or Sec-Fetch-Site/);
    assert.match(forged[3]!.body, /CSRF token/);
    assertSecurityHeaders(forged[0]!, '403');
    assert.equal((await db.query(`SELECT 1 FROM "${db.schema}".outbox WHERE state = 'parked'`)).length, 4, 'nothing changed');

    const retried = await call(port, 'POST', `${base}/api/parked/retry`, { ...json, origin, 'x-csrf-token': csrf }, body);
    assert.equal(retried.status, 200, retried.body);
    const answer = JSON.parse(retried.body) as { changed: string[]; missing: string[]; snapshot: { parked: unknown[] } };
    assert.deepEqual([answer.changed, answer.missing, answer.snapshot.parked.length], [[ids[0]], [], 3], 'the answer carries a fresh snapshot');

    // Bearer callers (scripts) need no CSRF token: a browser never attaches the header on its own.
    const skipped = await call(port, 'POST', `${base}/api/parked/skip`, { 'content-type': 'application/json', authorization: `Bearer ${BOB}` }, JSON.stringify({ ids: [ids[1], ids[0]] }));
    assert.equal(skipped.status, 200, skipped.body);
    assert.deepEqual(JSON.parse(skipped.body).missing, [ids[0]], 'an event no longer parked is reported missing');
    const bad = [
      await call(port, 'POST', `${base}/api/parked/discard`, { 'content-type': 'application/json', authorization: `Bearer ${BOB}` }, JSON.stringify({ ids: ['nope'] })),
      await call(port, 'POST', `${base}/api/parked/discard`, { 'content-type': 'application/json', authorization: `Bearer ${BOB}` }, '{"ids": []}'),
      await call(port, 'POST', `${base}/api/parked/discard`, { 'content-type': 'text/plain', authorization: `Bearer ${BOB}` }, body),
      await call(port, 'GET', `${base}/api/parked/discard`, { authorization: `Bearer ${BOB}` }),
      await call(port, 'POST', `${base}/api/inbox/dead/retry`, { 'content-type': 'application/json', authorization: `Bearer ${BOB}` }, body),
    ];
    assert.deepEqual(bad.map((b) => b.status), [400, 400, 415, 405, 404]);
    assert.match(JSON.parse(bad[0]!.body).error, /ids: "nope" is not an event id/);

    const audit = await db.query<{ action: string; event_id: string; actor: string }>(`SELECT action, event_id, actor FROM "${db.schema}".outbox_audit ORDER BY at, action`);
    assert.deepEqual(audit, [
      { action: 'retry', event_id: ids[0], actor: 'dashboard:alice@127.0.0.1' },
      { action: 'skip', event_id: ids[1], actor: 'dashboard:bob@127.0.0.1' },
    ]);

    // Logging out ends the session.
    const logout = await call(port, 'POST', `${base}/logout`, { cookie, origin, 'x-csrf-token': csrf });
    assert.equal(logout.status, 200);
    assert.equal((await call(port, 'GET', `${base}/api/state`, { cookie })).status, 401);
  });

  it('shows payloads only with showPayloads', async () => {
    const port = await start({ token: ALICE, showPayloads: true }, '/p');
    const state = await call(port, 'GET', '/p/api/state', { authorization: `Bearer ${ALICE}` });
    const parked = (JSON.parse(state.body) as { snapshot: { parked: { payload?: { secret: string } }[] } }).snapshot.parked;
    assert.ok(parked.length > 0 && parked.every((p) => p.payload?.secret.startsWith('card-')));
  });

  it('after 10 wrong tokens from an address, even the right one gets 429 for a minute', async () => {
    const port = await start({ token: ALICE }, '/limited');
    const form = { 'content-type': 'application/x-www-form-urlencoded', origin: `http://127.0.0.1:${port}` };
    for (let i = 0; i < 5; i++) assert.equal((await call(port, 'POST', '/limited/login', form, 'token=wrong-token-0123456789')).status, 401);
    for (let i = 0; i < 5; i++) assert.equal((await call(port, 'GET', '/limited/api/state', { authorization: 'Bearer wrong-token-0123456789' })).status, 401);
    const login = await call(port, 'POST', '/limited/login', form, `token=${ALICE}`);
    assert.equal(login.status, 429);
    assert.equal(login.headers['retry-after'], '60');
    assert.equal((await call(port, 'GET', '/limited/api/state', { authorization: `Bearer ${ALICE}` })).status, 429);
  });

  it('a failing database: the last snapshot stays with the error shown, a failed action is a 500 without details, an oversized body a 413', async () => {
    const real = new PostgresAdmin(db.connection, { schema: db.schema });
    let down = false;
    // The real admin, with its database cut off on demand.
    const admin = new Proxy(real, {
      get(target, name, receiver) {
        const value = Reflect.get(target, name, receiver) as unknown;
        if (typeof value !== 'function') return value;
        return (...args: unknown[]) => (down ? Promise.reject(new Error('terminating connection due to administrator command')) : (value as (...a: unknown[]) => unknown).apply(target, args));
      },
    });
    const handler = createDashboardHandler({ admin, token: ALICE, sampleIntervalMs: 100 });
    const { server, port } = await serve(handler, '/');
    closers.push(async () => {
      await handler.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    });
    await handler.ready();
    const auth = { authorization: `Bearer ${ALICE}` };
    const before = JSON.parse((await call(port, 'GET', '/api/state', auth)).body) as { snapshot: { error: string | null; status: unknown } };
    assert.equal(before.snapshot.error, null);
    down = true;
    let after: { snapshot: { error: string | null; status: { destinations: unknown[] } | null } } | undefined;
    const deadline = Date.now() + 15_000;
    while (Date.now() < deadline) {
      after = JSON.parse((await call(port, 'GET', '/api/state', auth)).body) as typeof after;
      if (after!.snapshot.error !== null) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.match(String(after!.snapshot.error), /terminating connection/);
    assert.deepEqual(after!.snapshot.status, before.snapshot.status, 'the last good snapshot stays');
    const json = { ...auth, 'content-type': 'application/json' };
    const failed = await call(port, 'POST', '/api/parked/retry', json, JSON.stringify({ ids: [ids[3]] }));
    assert.equal(failed.status, 500);
    assert.deepEqual(JSON.parse(failed.body), { error: 'the dashboard could not do this; see its log' });
    const huge = await call(port, 'POST', '/api/parked/retry', json, JSON.stringify({ ids: [ids[3]], pad: 'x'.repeat(200_000) }));
    assert.equal(huge.status, 413);
    assert.match(huge.body, /over 65536 bytes/);
    down = false;
  });

  it('no-auth mode answers loopback Host names only, and still wants the CSRF token and the origin', async () => {
    const port = await start({ allowNoAuth: true }, '/local');
    const rebound = await call(port, 'GET', '/local/api/state', { host: `evil.example:${port}` });
    assert.equal(rebound.status, 403, 'a DNS-rebinding Host is refused');
    assert.match(rebound.body, /loopback clients only/);
    const page = await call(port, 'GET', '/local/');
    assert.equal(page.status, 200);
    const cookie = String(page.headers['set-cookie']).split(';')[0]!;
    const csrf = /<meta name="txbox-csrf" content="([^"]+)">/.exec(page.body)![1]!;
    assert.equal((await call(port, 'GET', '/local/api/state', { cookie })).status, 200);
    const origin = `http://127.0.0.1:${port}`;
    const body = JSON.stringify({ ids: [ids[2]] });
    const json = { 'content-type': 'application/json', cookie, origin };
    assert.equal((await call(port, 'POST', '/local/api/parked/discard', json, body)).status, 403, 'no CSRF token');
    assert.equal((await call(port, 'POST', '/local/api/parked/discard', { 'content-type': 'application/json', origin, 'x-csrf-token': csrf }, body)).status, 403, 'no session');
    const ok = await call(port, 'POST', '/local/api/parked/discard', { ...json, 'x-csrf-token': csrf }, body);
    assert.equal(ok.status, 200, ok.body);
    const [audit] = await db.query<{ actor: string }>(`SELECT actor FROM "${db.schema}".outbox_audit WHERE action = 'discard'`);
    assert.equal(audit!.actor, 'dashboard:no-auth@127.0.0.1');
  });
});
