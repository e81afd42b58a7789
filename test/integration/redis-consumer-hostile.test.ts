/**
 * Hostile input through the real Redis and PostgreSQL (issue 11 items 1, 2):
 * entries PostgreSQL refuses (a payload with \u0000, an id that is not a
 * UUID, a key with NUL) and a handler whose error holds NUL used to make
 * `inbox.process` reject, and the consumer retried them in place forever
 * (in worker mode the whole chunk); an upper-case id was acked as a duplicate
 * without running. Now each is dead-lettered with a reason naming the field,
 * the upper-case id runs once, and every other entry is applied and acked.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { InboxQueue } from 'txbox';
import { PostgresOutboxStore, migratePostgres, postgresNames } from 'txbox/postgres';
import { RedisConsumer, encodeStreamFields, type RedisConsumerOptions } from 'txbox/redis';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';
import { eventMaker, hostileEvents, hostileInbox, setUpHostileTables } from '../fixtures/hostile-inbox.ts';

const REDIS_URL = 'redis://127.0.0.1:6379';
const prefix = `txbox-test:rh-${randomBytes(4).toString('hex')}:`;
let db: TestDb;
let admin: Redis;
let n = 0;

before(async () => {
  db = await openDb('postgres');
  await setUpHostileTables(db);
  admin = new Redis(REDIS_URL, { lazyConnect: true });
  await admin.connect();
});
after(async () => {
  const keys = await admin.keys(`${prefix}*`);
  if (keys.length > 0) await admin.del(...keys);
  await admin.quit();
  await db.close();
});

const ev = eventMaker('Note');
const hostile = (): ReturnType<typeof hostileEvents> => hostileEvents(ev, 'Note');

async function pending(stream: string, group: string): Promise<number> {
  const [count] = (await admin.xpending(stream, group)) as [number];
  return count;
}

function consumerFor(stream: string, group: string, extra: Partial<RedisConsumerOptions>): RedisConsumer {
  return new RedisConsumer({ url: REDIS_URL, streams: { notes: stream }, group, blockMs: 200, ...extra } as RedisConsumerOptions);
}

function deadReasons(dead: [string, string[]][]): string[] {
  return dead.map(([, fields]) => fields[fields.indexOf('dead.reason') + 1]!).sort();
}

describe('RedisConsumer with input PostgreSQL refuses', { timeout: 120_000 }, () => {
  for (const concurrency of [1, 4]) {
    it(`dead-letters each refused entry naming the field, runs an upper-case id once, applies and acks everything else (concurrency ${concurrency})`, async () => {
      n++;
      const stream = `${prefix}notes-${n}`;
      const name = `rh-${n}`;
      const { inbox, applied } = hostileInbox(db, name, 'Noted');
      const { bad, upper, good } = hostile();
      for (const e of [...bad, upper, ...good]) await admin.xadd(stream, '*', ...encodeStreamFields(e));
      const consumer = consumerFor(stream, name, { inbox, concurrency });
      await consumer.start();
      try {
        await waitFor('every good entry applied and the refused ones dead-lettered', async () => (await applied()).length === good.length + 1 && (await admin.xlen(`${stream}:dead`)) === bad.length, 60_000);
        await waitFor('all acked', async () => (await pending(stream, name)) === 0);
      } finally {
        await consumer.stop();
      }
      const ran = await applied();
      assert.ok(ran.includes(upper.id.toLowerCase()), 'the upper-case id ran (as its canonical form)');
      assert.equal(new Set(ran).size, ran.length, 'nothing applied twice');
      const reasons = deadReasons((await admin.xrange(`${stream}:dead`, '-', '+')) as [string, string[]][]);
      assert.equal(reasons.length, 4);
      assert.ok(reasons.some((r) => /id: "order-17" is not a UUID/.test(r)), reasons.join('\n'));
      assert.ok(reasons.some((r) => /key: contains a NUL/.test(r)), reasons.join('\n'));
      assert.ok(reasons.some((r) => /payload\.note: contains "\\u0000"/.test(r)), reasons.join('\n'));
      assert.ok(reasons.some((r) => /refused \ufffd byte/.test(r)), reasons.join('\n'));
    });
  }

  it('worker mode: a refused entry no longer stops its chunk; it is dead-lettered and the others are queued', async () => {
    n++;
    const stream = `${prefix}notes-${n}`;
    const name = `rh-${n}`;
    const queue = new InboxQueue(new PostgresOutboxStore({ schema: db.schema, table: 'inbox_queue', onDuplicateId: 'ignore' }), (fn) => db.connection.transaction(fn));
    const { bad, good } = hostile();
    const refused = bad.filter((e) => e.type !== 'Boom');
    for (const e of [...refused, ...good]) await admin.xadd(stream, '*', ...encodeStreamFields(e));
    const consumer = consumerFor(stream, name, { queue, count: 50 });
    await consumer.start();
    try {
      await waitFor('the good entries queued and the refused ones dead-lettered', async () => consumer.stats.queued === good.length && (await admin.xlen(`${stream}:dead`)) === refused.length, 60_000);
      await waitFor('all acked', async () => (await pending(stream, name)) === 0);
    } finally {
      await consumer.stop();
    }
    const [queued] = await db.query<{ rows: number }>(`SELECT count(*)::int AS rows FROM "${db.schema}".inbox_queue`);
    assert.equal(queued!.rows, good.length);
  });

  it('worker mode: an entry the queue table refuses (a constraint: SQLSTATE 23514) is found in its chunk and dead-lettered; the others are queued', async () => {
    n++;
    const stream = `${prefix}notes-${n}`;
    const name = `rh-${n}`;
    await migratePostgres(db.connection, postgresNames({ schema: db.schema, table: 'refusing_queue' }));
    await db.query(`ALTER TABLE "${db.schema}".refusing_queue ADD CONSTRAINT no_refused CHECK (type <> 'Refused')`);
    const queue = new InboxQueue(new PostgresOutboxStore({ schema: db.schema, table: 'refusing_queue', onDuplicateId: 'ignore' }), (fn) => db.connection.transaction(fn));
    const refused = ev('refused', { type: 'Refused' });
    const good = Array.from({ length: 10 }, (_, i) => ev(`q${i}`));
    for (const e of [...good.slice(0, 5), refused, ...good.slice(5)]) await admin.xadd(stream, '*', ...encodeStreamFields(e));
    const consumer = consumerFor(stream, name, { queue, count: 50 });
    await consumer.start();
    try {
      await waitFor('the good entries queued and the refused one dead-lettered', async () => consumer.stats.queued === good.length && (await admin.xlen(`${stream}:dead`)) === 1, 60_000);
      await waitFor('all acked', async () => (await pending(stream, name)) === 0);
    } finally {
      await consumer.stop();
    }
    const [queued] = await db.query<{ rows: number }>(`SELECT count(*)::int AS rows FROM "${db.schema}".refusing_queue`);
    assert.equal(queued!.rows, good.length);
    const reasons = deadReasons((await admin.xrange(`${stream}:dead`, '-', '+')) as [string, string[]][]);
    assert.match(reasons[0]!, /the inbox queue refused it: SQLSTATE 23514/);
  });
});
