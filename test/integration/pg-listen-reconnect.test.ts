/**
 * The LISTEN connection of `pgConnection` across a lost connection: it comes
 * back by itself, and a stop (the relay's `unlisten`, then the connection's
 * `close()`) that comes while it is reconnecting leaves no LISTEN session
 * behind, even when the server answers only after the stop. A proxy between
 * the client and PostgreSQL cuts the connection and holds the reconnect.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { pgConnection } from 'txbox/postgres';
import { DATABASE_URL } from '../helpers/databases.ts';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.ts';
import { waitFor } from '../helpers/wait.ts';

let proxy: TcpProxy;
let admin: pg.Client;

before(async () => {
  proxy = await startTcpProxy(Number(new URL(DATABASE_URL).port || 5432));
  admin = new pg.Client({ connectionString: DATABASE_URL });
  await admin.connect();
});
after(async () => {
  await admin.end();
  await proxy.close();
});

/** Sessions of this application name on the server. */
async function sessions(app: string): Promise<number> {
  const { rows } = await admin.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1', [app]);
  return rows[0]!.n;
}

function urlThroughProxy(app: string): string {
  const url = new URL(DATABASE_URL);
  url.port = String(proxy.port);
  url.searchParams.set('application_name', app);
  return url.toString();
}

it('comes back after the connection is cut, and hears notifications again', { timeout: 30_000 }, async () => {
  const app = `txbox-listen-${randomBytes(4).toString('hex')}`;
  const connection = pgConnection({ connectionString: urlThroughProxy(app) });
  let notified = 0;
  const unlisten = await connection.listen!('txbox_listen_test', () => notified++);
  try {
    proxy.cut();
    await waitFor('the LISTEN session back', async () => (await sessions(app)) === 1, 15_000, 100);
    const before = notified;
    await admin.query(`NOTIFY txbox_listen_test`);
    await waitFor('a notification after the reconnect', async () => notified > before, 5000, 20);
  } finally {
    await unlisten();
    await connection.close();
  }
  await waitFor('no session left', async () => (await sessions(app)) === 0, 5000, 50);
});

it('a stop while it reconnects leaves no LISTEN session, even when the server answers after the stop', { timeout: 30_000 }, async () => {
  const app = `txbox-listen-${randomBytes(4).toString('hex')}`;
  const connection = pgConnection({ connectionString: urlThroughProxy(app) });
  const unlisten = await connection.listen!('txbox_listen_test', () => {});
  proxy.hold();
  try {
    proxy.cut();
    // The reconnect (1 s after the loss) reaches the proxy, which holds it: the client waits for the server.
    await waitFor('the reconnect held by the proxy', () => Promise.resolve(proxy.held > 0), 10_000, 20);
    await unlisten();
    await connection.close();
  } finally {
    proxy.release();
  }
  // The server answers now: the reconnect must not leave a session that nobody will end.
  await new Promise((r) => setTimeout(r, 1500));
  assert.equal(await sessions(app), 0, 'a LISTEN session outlived the stop');
});

it('hears notifications again when its connection goes silent (no answer, never closed)', { timeout: 30_000 }, async () => {
  const app = `txbox-listen-${randomBytes(4).toString('hex')}`;
  const connection = pgConnection({ connectionString: urlThroughProxy(app), listenPingMs: 300 });
  let notified = 0;
  const unlisten = await connection.listen!('txbox_listen_test', () => notified++);
  try {
    proxy.silence();
    // The ping finds the silent connection, and a new one LISTENs (caught up with a wake-up of its own).
    const before = notified;
    await waitFor('the wake-up of the new LISTEN connection', () => Promise.resolve(notified > before), 10_000, 20);
    const after = notified;
    await admin.query(`NOTIFY txbox_listen_test`);
    await waitFor('a notification on the new connection', () => Promise.resolve(notified > after), 5000, 20);
  } finally {
    const closing = performance.now();
    await unlisten();
    await connection.close();
    assert.ok(performance.now() - closing < 5000, 'closing waited on the silent connection');
  }
});
