/**
 * The WAL wake mode across a PostgreSQL restart, on a private throwaway
 * cluster (the shared server is never restarted): the relay's stream ends with
 * the server, it falls back and retries, then streams from a new temporary
 * slot and is woken by the WAL alone again (polling every 10 minutes).
 * Skipped where initdb is not available. The restart runs pg_ctl without
 * blocking this process: a fast shutdown waits for the walsender to be told
 * (by the relay, in this process) that it received everything.
 */
import { after, before, it } from 'node:test';
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { chownSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { createOutbox, createRelay, defineEvent, payloadType } from 'txbox';
import { migratePostgres, pgConnection, postgresNames, PostgresOutboxStore, PostgresRelayStore, type PostgresConnection } from 'txbox/postgres';
import { RecordingTransport } from 'txbox/testing';
import { freePort } from '../helpers/ports.ts';
import { waitFor } from '../helpers/wait.ts';

const BIN = '/usr/lib/postgresql/15/bin';
const E = defineEvent({ type: 'E', aggregateType: 'A', destination: 'd', payload: payloadType<{ n: number }>() });
const available = existsSync(join(BIN, 'initdb'));
let dir = '';
let port = 0;
let connection: PostgresConnection | undefined;

/** Runs a PostgreSQL tool as the `postgres` OS user when we are root (initdb refuses root). */
function pgTool(tool: string, args: string[]): void {
  const asRoot = userInfo().uid === 0;
  execFileSync(asRoot ? 'runuser' : join(BIN, tool), asRoot ? ['-u', 'postgres', '--', join(BIN, tool), ...args] : args, { stdio: 'pipe' });
}

/** The same, without blocking the event loop (the relay in this process must answer the walsender during the shutdown). */
async function pgToolAsync(tool: string, args: string[]): Promise<void> {
  const asRoot = userInfo().uid === 0;
  await promisify(execFile)(asRoot ? 'runuser' : join(BIN, tool), asRoot ? ['-u', 'postgres', '--', join(BIN, tool), ...args] : args);
}

function serverOptions(): string[] {
  const opts = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c wal_level=logical -c max_replication_slots=4 -c max_wal_senders=4 -c fsync=off`;
  return ['-D', join(dir, 'data'), '-o', opts, '-l', join(dir, 'log'), '-w', 'start'];
}

function start(): void {
  pgTool('pg_ctl', serverOptions());
}

function stop(): void {
  pgTool('pg_ctl', ['-D', join(dir, 'data'), '-m', 'fast', '-w', 'stop']);
}

before(async () => {
  if (!available) return;
  dir = mkdtempSync(join(tmpdir(), 'txbox-wal-pg-'));
  if (userInfo().uid === 0) {
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString());
    chownSync(dir, uid, gid);
  }
  port = await freePort();
  pgTool('initdb', ['-D', join(dir, 'data'), '-U', 'postgres', '--auth=trust', '--no-sync']);
  start();
});

after(async () => {
  if (!available) return;
  await connection?.close().catch(() => {});
  try {
    stop();
  } catch {
    // already stopped
  }
  rmSync(dir, { recursive: true, force: true });
});

it('streams again from a new slot after the server restarts', { skip: !available && 'initdb not found', timeout: 90_000 }, async () => {
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  connection = pgConnection({ connectionString: url, maxConnections: 4 });
  await migratePostgres(connection, postgresNames({ schema: 'txbox' }));
  const outbox = createOutbox({ store: new PostgresOutboxStore({ notify: false }), events: [E] });
  const produce = (n: number) => connection!.transaction((tx) => outbox.enqueue(tx, E({ aggregateId: `k${n}`, payload: { n } })));
  const transport = new RecordingTransport();
  const store = new PostgresRelayStore({ connection, wake: 'wal' });
  const relay = createRelay({ store, transport, pollIntervalMs: 600_000, minPollIntervalMs: 600_000, leaseTtlMs: 4000 });
  relay.on('error', () => {}); // the claims and renewals that fail while the server is down
  await relay.start();
  try {
    await waitFor('streaming', async () => (await store.wakeStatus()).mode === 'wal', 30_000);
    const before = (await store.wakeStatus()).slot;
    const [first] = await produce(1);
    await waitFor('published before the restart', () => transport.acked.some((e) => e.id === first));

    await pgToolAsync('pg_ctl', ['-D', join(dir, 'data'), '-m', 'fast', '-w', 'stop']);
    await pgToolAsync('pg_ctl', serverOptions());

    await waitFor('streaming from a new slot', async () => {
      const s = await store.wakeStatus().catch(() => undefined);
      return s?.mode === 'wal' && s.slot !== before;
    }, 60_000, 200);
    const [second] = await produce(2);
    await waitFor('published after the restart, woken by the WAL', () => transport.acked.some((e) => e.id === second), 30_000);
  } finally {
    await relay.stop();
  }
});
