/**
 * A consumer killed with kill -9 between its inbox commit and its ack: the
 * sender retries, the restarted consumer skips the redelivery, the effect
 * happens once. Real processes, real HTTP, real PostgreSQL.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
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

/**
 * Starts the consumer process on a port of its own choosing (port 0): a port picked here and
 * handed over could be taken by another process in between. `ready` resolves with its base URL.
 */
function startConsumer(secret: string, crash: boolean) {
  const child = spawn(process.execPath, ['--conditions=txbox-source', '--import', 'tsx', FIXTURE], {
    env: { ...process.env, DATABASE_URL, SCHEMA: db.schema, PORT: '0', SECRET: secret, CRASH_AFTER_COMMIT: crash ? '1' : '' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const ready = new Promise<string>((resolve, reject) => {
    child.stdout.on('data', (d: Buffer) => {
      const m = /listening (\S+)/.exec(d.toString());
      if (m) resolve(m[1]!);
    });
    child.on('exit', (code) => reject(new Error(`consumer exited early (${code})`)));
  });
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_c, s) => resolve(s)));
  return { child, ready, exited };
}

it('a consumer killed between commit and ack applies the redelivered event once', { timeout: 60_000 }, async () => {
  const secret = generateWebhookSecret();
  const sender = (url: string) => new HttpTransport({ endpoints: { items: `${url}/items` }, secret, timeoutMs: 5000 });
  const event = { id: uuidv7(), type: 'Changed', aggregateType: 'Item', aggregateId: '1', key: 'Item:1', destination: 'items', payload: { n: 1 }, headers: {}, occurredAt: new Date(), version: 1 };

  const first = startConsumer(secret, true);
  const toFirst = sender(await first.ready);
  const [lost] = await toFirst.publish([event], AbortSignal.timeout(10_000));
  await toFirst.close();
  assert.equal(lost!.ok, false, 'the sender got no ack: the consumer died after committing');
  assert.equal(await first.exited, 'SIGKILL');
  assert.equal((await db.query(`SELECT 1 FROM "${db.schema}".effects`)).length, 1, 'the effect committed before the crash');

  const second = startConsumer(secret, false);
  const transport = sender(await second.ready);
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
