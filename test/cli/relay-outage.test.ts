/**
 * `txbox relay` started while its broker does not answer (docs/operations.md,
 * "Broker down at start"): it stays up (before: exit 2, and a supervisor
 * restarting it in a loop), warns naming the transport, and publishes once
 * the broker answers; a configuration error that waiting cannot heal still
 * exits 2 naming the field. Subprocess against the real PostgreSQL and
 * Redis and Kafka; the broker is "down" behind a closed local proxy, so the
 * shared services are never stopped.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import kafkajs from 'kafkajs';
import { createOutbox, defineEvent, payloadType } from 'txbox';
import { PostgresOutboxStore } from 'txbox/postgres';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';
import { runCli, startCli, type CliResult } from '../helpers/cli.ts';
import { startTcpProxy } from '../helpers/tcp-proxy.ts';
import { waitFor } from '../helpers/wait.ts';
import { holdBrokerLock } from '../helpers/broker-lock.ts';

const { Kafka, logLevel } = kafkajs;
const Placed = defineEvent({ type: 'OrderPlaced', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ n: number }>() });
const run = randomBytes(3).toString('hex');

async function createTopic(topic: string): Promise<void> {
  const admin = new Kafka({ brokers: ['127.0.0.1:9092'], logLevel: logLevel.NOTHING }).admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], waitForLeaders: true });
  await admin.disconnect();
}

async function deleteTopic(topic: string): Promise<void> {
  const admin = new Kafka({ brokers: ['127.0.0.1:9092'], logLevel: logLevel.NOTHING }).admin();
  await admin.connect();
  await admin.deleteTopics({ topics: [topic] }).catch(() => {});
  await admin.disconnect();
}

const dbs: TestDb[] = [];
async function freshDb(): Promise<TestDb> {
  const db = await openDb('postgres');
  dbs.push(db);
  return db;
}

function expectExit(r: CliResult, code: number, what: string): void {
  assert.equal(r.code, code, `${what}: exit ${r.code} (signal ${r.signal})\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`);
}

describe('txbox relay with its broker down at start', { concurrency: true, timeout: 180_000 }, () => {
  after(async () => {
    await Promise.all(dbs.map((db) => db.close()));
  });

  for (const transport of ['kafka', 'redis'] as const) {
    it(`--transport ${transport}: stays up while nothing answers, warns naming the transport, publishes once the broker answers`, async (t) => {
      // Other files kill the shared Kafka broker: take turns with them.
      const release = transport === 'kafka' ? await holdBrokerLock('kafka') : () => {};
      t.after(release);
      const db = await freshDb();
      const proxy = await startTcpProxy(transport === 'kafka' ? 9092 : 6379);
      await proxy.close();
      // The events go to this test's own topic or stream (Kafka: created first, auto-creation stays off).
      const prefix = transport === 'kafka' ? `txbox-relay-outage-${run}-` : `txbox-test:relay-outage-${run}:`;
      if (transport === 'kafka') await createTopic(`${prefix}orders`);
      const dir = mkdtempSync(join(tmpdir(), 'txbox-relay-outage-'));
      const config = join(dir, 'txbox.json');
      writeFileSync(
        config,
        JSON.stringify({
          transport:
            transport === 'kafka'
              ? { type: 'kafka', brokers: `127.0.0.1:${proxy.port}`, topicPrefix: prefix, connectionTimeoutMs: 1000 }
              : { type: 'redis', url: `redis://127.0.0.1:${proxy.port}`, streamPrefix: prefix },
        }),
      );
      const relay = startCli(['relay', '--relay-id', `outage-${transport}-${run}`], {
        TXBOX_DATABASE_URL: DATABASE_URL,
        TXBOX_SCHEMA: db.schema,
        TXBOX_CONFIG: config,
        TXBOX_LOG_LEVEL: 'warn',
      });
      const redis = new Redis('redis://127.0.0.1:6379');
      try {
        // Before: "transport.brokers: could not connect ... check brokers" and exit 2.
        await waitFor('the ready line', () => /^txbox relay ready: /m.test(relay.stdout()) || relay.child.exitCode !== null, 90_000, 100);
        assert.equal(relay.child.exitCode, null, `the relay is still running:\n${relay.stderr()}`);
        assert.match(relay.stderr(), new RegExp(`"msg":"${transport} transport: the broker does not answer at start; starting anyway, its events wait.*"transport":"${transport}"`));
        const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Placed] });
        const ids = await db.transaction((tx) => outbox.enqueue(tx, [1, 2, 3].map((n) => Placed({ aggregateId: `o${n}`, payload: { n } }))));
        await new Promise((r) => setTimeout(r, 1500));
        const waiting = await db.query<{ state: string }>(`SELECT state FROM "${db.schema}".outbox WHERE id = ANY($1::uuid[])`, [ids]);
        assert.ok(waiting.every((r) => r.state === 'pending'), `the events wait: ${JSON.stringify(waiting)}`);
        assert.equal(relay.child.exitCode, null);
        await proxy.open();
        // The breaker probes within its first pause (1 s, doubling): the events go out once the broker answers.
        await waitFor('the events published', async () => (await db.query(`SELECT 1 FROM "${db.schema}".outbox WHERE id = ANY($1::uuid[]) AND state = 'published'`, [ids])).length === ids.length, 60_000, 200);
      } finally {
        relay.child.kill('SIGTERM');
        expectExit(await relay.exited, 0, 'relay after SIGTERM');
        await proxy.close().catch(() => {});
        if (transport === 'redis') {
          const keys = await redis.keys(`${prefix}*`);
          if (keys.length > 0) await redis.del(...keys);
        } else await deleteTopic(`${prefix}orders`);
        redis.disconnect();
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }

  it('a configuration error waiting cannot fix still exits 2 naming the field: a password Redis does not want', async () => {
    const db = await freshDb();
    const r = await runCli(['relay', '--transport', 'redis', '--transport-url', 'redis://:not-needed@127.0.0.1:6379'], {
      TXBOX_DATABASE_URL: DATABASE_URL,
      TXBOX_SCHEMA: db.schema,
      TXBOX_LOG_LEVEL: 'warn',
    }, 60_000);
    expectExit(r, 2, 'relay with a password Redis does not want');
    assert.match(r.stderr, /transport\.url: a password is configured but Redis at redis:\/\/127\.0\.0\.1:6379\/0 has none/);
    assert.doesNotMatch(r.stderr, /not-needed/, 'the password is never printed');
  });
});
