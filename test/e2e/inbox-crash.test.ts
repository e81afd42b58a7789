/**
 * A consumer killed with kill -9 between its inbox commit and its ack: the
 * sender retries, the restarted consumer skips the redelivery, the effect
 * happens once. Real processes, real HTTP, real PostgreSQL.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { uuidv7 } from 'txbox';
import { HttpTransport, generateWebhookSecret } from 'txbox/http';
import { inboxNames, migrateInbox } from 'txbox/postgres';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';

const FIXTURE = fileURLToPath(new URL('../fixtures/webhook-consumer.ts', import.meta.url));
let db: TestDb;

before(async () => {
  db = await openDb('postgres');
  await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
  await db.query(`CREATE TABLE "${db.schema}".effects (event_id uuid NOT NULL)`);
});
after(async () => {
  await db.close();
});

async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  await new Promise((r) => srv.close(r));
  return port;
}

function startConsumer(port: number, secret: string, crash: boolean) {
  const child = spawn(process.execPath, ['--conditions=development', '--import', 'tsx', FIXTURE], {
    env: { ...process.env, DATABASE_URL, SCHEMA: db.schema, PORT: String(port), SECRET: secret, CRASH_AFTER_COMMIT: crash ? '1' : '' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const ready = new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (d: Buffer) => d.toString().includes('listening') && resolve());
    child.on('exit', (code) => reject(new Error(`consumer exited early (${code})`)));
  });
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_c, s) => resolve(s)));
  return { child, ready, exited };
}

it('a consumer killed between commit and ack applies the redelivered event once', { timeout: 60_000 }, async () => {
  const port = await freePort();
  const secret = generateWebhookSecret();
  const transport = new HttpTransport({ endpoints: { items: `http://127.0.0.1:${port}/items` }, secret, timeoutMs: 5000 });
  const event = { id: uuidv7(), type: 'Changed', aggregateType: 'Item', aggregateId: '1', key: 'Item:1', destination: 'items', payload: { n: 1 }, headers: {}, occurredAt: new Date(), version: 1 };

  const first = startConsumer(port, secret, true);
  await first.ready;
  const [lost] = await transport.publish([event], AbortSignal.timeout(10_000));
  assert.equal(lost!.ok, false, 'the sender got no ack: the consumer died after committing');
  assert.equal(await first.exited, 'SIGKILL');
  assert.equal((await db.query(`SELECT 1 FROM "${db.schema}".effects`)).length, 1, 'the effect committed before the crash');

  const second = startConsumer(port, secret, false);
  await second.ready;
  try {
    const [acked] = await transport.publish([event], AbortSignal.timeout(10_000));
    assert.equal(acked!.ok, true, acked!.ok ? '' : acked!.error.message);
    assert.equal((await db.query(`SELECT 1 FROM "${db.schema}".effects`)).length, 1, 'the redelivery was skipped');
    const [row] = await db.query<{ status: string }>(`SELECT status FROM "${db.schema}".inbox WHERE event_id = $1`, [event.id]);
    assert.equal(row!.status, 'processed');
  } finally {
    second.child.kill('SIGTERM');
    await second.exited;
    await transport.close();
  }
});
