/**
 * What `txbox relay` tells an operator: one "ready" line once it holds its
 * first leases and its transport is connected (scripts wait for it instead
 * of sleeping), its connections named in pg_stat_activity, and at
 * --log-level debug one line per batch (counts, lane, duration; no payloads,
 * no keys). Subprocess against the real PostgreSQL, one schema per test.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { createOutbox, defineEvent, payloadType } from 'txbox';
import { PostgresOutboxStore } from 'txbox/postgres';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';
import { runCli, startCli, type CliResult } from '../helpers/cli.ts';
import { startReceiver } from '../helpers/receiver.ts';
import { waitFor } from '../helpers/wait.ts';

const Placed = defineEvent({ type: 'OrderPlaced', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ secret: string }>() });

const dbs: TestDb[] = [];
async function freshDb(): Promise<TestDb> {
  const db = await openDb('postgres');
  dbs.push(db);
  return db;
}

function expectExit(r: CliResult, code: number, what: string): void {
  assert.equal(r.code, code, `${what}: exit ${r.code} (signal ${r.signal})\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`);
}

describe('txbox relay start-up and logs', { concurrency: true, timeout: 120_000 }, () => {
  after(async () => {
    await Promise.all(dbs.map((db) => db.close()));
  });

  it('prints one ready line and names its connections `txbox relay <id>` in pg_stat_activity', async () => {
    const db = await freshDb();
    const id = `ready-${db.schema}`.slice(0, 40);
    const relay = startCli(['relay', '--transport', 'http', '--endpoint', 'orders=http://127.0.0.1:9/x', '--unsigned', '--relay-id', id], {
      TXBOX_DATABASE_URL: DATABASE_URL,
      TXBOX_SCHEMA: db.schema,
      TXBOX_LOG_LEVEL: 'warn',
    });
    const admin = new pg.Client({ connectionString: DATABASE_URL });
    await admin.connect();
    try {
      await waitFor('the relay registered', async () => (await db.query(`SELECT 1 FROM "${db.schema}".outbox_relays`)).length === 1, 60_000);
      const { rows } = await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1`, [`txbox relay ${id}`]);
      assert.ok(rows[0]!.n >= 1, `the relay's connections carry application_name 'txbox relay ${id}'`);
      await waitFor('the ready line', () => /^txbox relay ready: /m.test(relay.stdout()), 60_000);
      assert.match(relay.stdout(), new RegExp(`^txbox relay ready: relay=${id} buckets=256 transport=http$`, 'm'));
      assert.equal(relay.stdout().match(/txbox relay ready/g)!.length, 1, 'one ready line');
    } finally {
      await admin.end();
      relay.child.kill('SIGTERM');
      expectExit(await relay.exited, 0, 'relay after SIGTERM');
    }
  });

  it('`--transport redis` builds the Redis transport and gets ready (docs/transports/redis.md)', async () => {
    const db = await freshDb();
    const relay = startCli(['relay', '--transport', 'redis', '--transport-url', 'redis://127.0.0.1:6379', '--relay-id', 'relay-redis'], {
      TXBOX_DATABASE_URL: DATABASE_URL,
      TXBOX_SCHEMA: db.schema,
      TXBOX_LOG_LEVEL: 'warn',
    });
    try {
      await waitFor('the ready line', () => /^txbox relay ready: /m.test(relay.stdout()), 60_000);
      assert.match(relay.stdout(), /^txbox relay ready: relay=relay-redis buckets=256 transport=redis$/m);
    } finally {
      relay.child.kill('SIGTERM');
      expectExit(await relay.exited, 0, 'relay after SIGTERM');
    }
  });

  it('a bad --log-summary-interval exits 2 naming the flag', async () => {
    const db = await freshDb();
    const env = { TXBOX_DATABASE_URL: DATABASE_URL, TXBOX_SCHEMA: db.schema, TXBOX_LOG_LEVEL: 'warn' };
    const base = ['relay', '--transport', 'http', '--endpoint', 'orders=http://127.0.0.1:9/x', '--unsigned'];
    const [unit, tooShort] = await Promise.all([runCli([...base, '--log-summary-interval', '5x'], env), runCli([...base, '--log-summary-interval', '10ms'], env)]);
    expectExit(unit, 2, '--log-summary-interval 5x');
    assert.match(unit.stderr, /--log-summary-interval 5x: not a duration/);
    expectExit(tooShort, 2, '--log-summary-interval 10ms');
    assert.match(tooShort.stderr, /--log-summary-interval: must be at least 1s, or off/);
  });

  it('an application_name in the database URL wins', async () => {
    const db = await freshDb();
    const name = `mine-${db.schema}`.slice(0, 40);
    const relay = startCli(['relay', '--transport', 'http', '--endpoint', 'orders=http://127.0.0.1:9/x', '--unsigned'], {
      TXBOX_DATABASE_URL: `${DATABASE_URL}?application_name=${name}`,
      TXBOX_SCHEMA: db.schema,
      TXBOX_LOG_LEVEL: 'warn',
    });
    const admin = new pg.Client({ connectionString: DATABASE_URL });
    await admin.connect();
    try {
      await waitFor('the relay registered', async () => (await db.query(`SELECT 1 FROM "${db.schema}".outbox_relays`)).length === 1, 60_000);
      const { rows } = await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1`, [name]);
      assert.ok(rows[0]!.n >= 1, `the URL's application_name '${name}' is kept`);
    } finally {
      await admin.end();
      relay.child.kill('SIGTERM');
      expectExit(await relay.exited, 0, 'relay after SIGTERM');
    }
  });

  it('at --log-level debug logs each batch with counts, lane and duration, without payloads or keys', async () => {
    const db = await freshDb();
    const receiver = await startReceiver();
    try {
      const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Placed] });
      await db.transaction((tx) => outbox.enqueue(tx, [Placed({ aggregateId: 'secret-aggregate', payload: { secret: 'hunter2-payload' } })]));
      const relay = startCli(['relay', '--transport', 'http', '--endpoint', `orders=${receiver.url}/orders`, '--log-level', 'debug', '--log-summary-interval', '1s'], {
        TXBOX_DATABASE_URL: DATABASE_URL,
        TXBOX_SCHEMA: db.schema,
        TXBOX_WEBHOOK_SECRET: receiver.secret,
      });
      try {
        await waitFor('a batch line', () => /"msg":"txbox relay batch"/.test(relay.stderr()), 60_000);
        await waitFor('a summary line after the batch', () => /"msg":"txbox relay summary"/.test(relay.stderr().slice(relay.stderr().indexOf('"msg":"txbox relay batch"'))), 60_000);
      } finally {
        relay.child.kill('SIGTERM');
      }
      const result = await relay.exited;
      expectExit(result, 0, 'relay after SIGTERM');
      const line = result.stderr.split('\n').find((l) => l.includes('"msg":"txbox relay batch"'))!;
      const entry = JSON.parse(line) as Record<string, unknown>;
      assert.equal(entry.level, 'debug');
      assert.equal(entry.claimed, 1);
      assert.equal(entry.published, 1);
      assert.equal(typeof entry.lane, 'number');
      assert.equal(typeof entry.durationMs, 'number');
      const lines = result.stderr.split('\n');
      const summaries = lines.filter((l) => l.includes('"msg":"txbox relay summary"')).map((l) => JSON.parse(l) as Record<string, unknown>);
      const after = lines.slice(lines.indexOf(line)).filter((l) => l.includes('"msg":"txbox relay summary"')).map((l) => JSON.parse(l) as Record<string, unknown>);
      assert.ok(after.length > 0 && after.every((s) => s.level === 'info' && s.leasesHeld === 256 && s.backlog === 0 && s.parkedTotal === 0), JSON.stringify(after));
      assert.equal(summaries.reduce((n, s) => n + (s.published as number), 0), 1, 'the summaries count the published event once');
      assert.doesNotMatch(result.stderr, /hunter2-payload|secret-aggregate/, 'no payloads or keys in the logs');
    } finally {
      await receiver.close();
    }
  });
});
