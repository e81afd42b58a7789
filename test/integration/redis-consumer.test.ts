/**
 * RedisConsumer against the real Redis on 127.0.0.1:6379 and the real
 * PostgreSQL: per-key order with keys in parallel, an entry added three times
 * applied once, unreadable entries and dead handlers moved to the dead-letter
 * stream while other keys flow, worker mode, a graceful stop that finishes
 * and acks, and start-up errors naming the setting. One stream and group per
 * test; streams are deleted afterwards.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { ConfigError, createInbox, uuidv7, type Inbox, type OutboxEvent } from 'txbox';
import { PostgresInboxStore, inboxNames, migrateInbox, migratePostgres, postgresNames } from 'txbox/postgres';
import { RedisConsumer, RedisTransport, encodeStreamFields, parseStreamEntry, type RedisConsumerOptions } from 'txbox/redis';
import { checkDeliveries } from 'txbox/testing';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';
import { startWhileUnreachable } from '../helpers/outage.ts';
import { runWorkerModeScenario } from '../fixtures/worker-mode.ts';

const REDIS_URL = 'redis://127.0.0.1:6379';
const prefix = `txbox-test:rc-${randomBytes(4).toString('hex')}:`;
let db: TestDb;
let admin: Redis;
let n = 0;

before(async () => {
  db = await openDb('postgres');
  await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
  await migratePostgres(db.connection, postgresNames({ schema: db.schema, table: 'inbox_queue' }));
  await db.query(`CREATE TABLE "${db.schema}".effects (event_id uuid NOT NULL, consumer text NOT NULL, key text NOT NULL, version int)`);
  admin = new Redis(REDIS_URL, { lazyConnect: true });
  await admin.connect();
});
after(async () => {
  const keys = await admin.keys(`${prefix}*`);
  if (keys.length > 0) await admin.del(...keys);
  await admin.quit();
  await db.close();
});

/** A fresh stream key and consumer (inbox) name for one test. */
function fresh(): { stream: string; name: string } {
  n++;
  return { stream: `${prefix}items-${n}`, name: `rc-${n}` };
}

const ev = (key: string, version: number, type = 'Changed'): OutboxEvent => ({
  id: uuidv7(),
  type,
  aggregateType: 'Item',
  aggregateId: key,
  key: `Item:${key}`,
  destination: 'items',
  payload: { version },
  headers: {},
  occurredAt: new Date(),
  version,
});

function inboxFor(name: string, options: { retry?: { baseDelayMs: number; maxDelayMs: number; maxAttempts: number } } = {}): Inbox {
  return createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: name, ...options });
}

/** An inbox whose Changed handler only counts its runs. */
function countingInbox(name: string): { inbox: Inbox; runs: () => number } {
  const inbox = inboxFor(name);
  let runs = 0;
  inbox.on('Changed', async () => {
    runs++;
  });
  return { inbox, runs: () => runs };
}

async function effects(name: string): Promise<{ event_id: string; key: string; version: number }[]> {
  return db.query(`SELECT event_id, key, version FROM "${db.schema}".effects WHERE consumer = $1`, [name]);
}

async function pending(stream: string, group: string): Promise<number> {
  const [count] = (await admin.xpending(stream, group)) as [number];
  return count;
}

function consumerFor(stream: string, group: string, extra: Partial<RedisConsumerOptions>): RedisConsumer {
  return new RedisConsumer({ url: REDIS_URL, streams: { items: stream }, group, blockMs: 200, ...extra } as RedisConsumerOptions);
}

describe('RedisConsumer on a real Redis and PostgreSQL', () => {
  it('applies events published by RedisTransport once, in per-key order, with keys in parallel', async () => {
    const { stream, name } = fresh();
    const inbox = inboxFor(name);
    const applied: { id: string; key: string }[] = [];
    let running = 0;
    let maxRunning = 0;
    inbox.on('Changed', async (event, tx) => {
      maxRunning = Math.max(maxRunning, ++running);
      try {
        await sleep(2);
        await tx.query(`INSERT INTO "${db.schema}".effects (event_id, consumer, key, version) VALUES ($1, $2, $3, $4)`, [event.id, name, event.key, event.version]);
        applied.push({ id: event.id, key: event.key });
      } finally {
        running--;
      }
    });
    const committed = new Map<string, string[]>();
    const transport = new RedisTransport({ url: REDIS_URL, streams: { items: stream } });
    const consumer = consumerFor(stream, name, { inbox, concurrency: 8, count: 50 });
    await consumer.start();
    try {
      // Like the relay: one event per key per publish call, a key's next event after the previous one's ack.
      for (let version = 1; version <= 20; version++) {
        const round = Array.from({ length: 25 }, (_, k) => ev(`k${k}`, version));
        for (const e of round) committed.set(e.key, [...(committed.get(e.key) ?? []), e.id]);
        const outcomes = await transport.publish(round, AbortSignal.timeout(5000));
        assert.ok(outcomes.every((o) => o.ok));
      }
      await waitFor('all 500 events applied', () => consumer.stats.processed === 500, 60_000);
      await waitFor('all acked', async () => (await pending(stream, name)) === 0);
    } finally {
      await consumer.stop();
      await transport.close();
    }
    const report = checkDeliveries(committed, applied);
    assert.deepEqual([report.lost, report.duplicates, report.orderViolations, report.phantom], [0, 0, 0, 0]);
    assert.ok(maxRunning > 1, `different keys ran in parallel (at most ${maxRunning} at once)`);
    assert.ok(maxRunning <= 8, 'concurrency bounds the handlers running at once');
    const rows = await effects(name);
    assert.equal(rows.length, 500);
    assert.equal(new Set(rows.map((r) => r.event_id)).size, 500);
    assert.equal(consumer.stats.acked, 500);
  });

  it('an entry added three times is applied once; the copies are acked as duplicates', async () => {
    const { stream, name } = fresh();
    const inbox = inboxFor(name);
    inbox.on('Changed', async (event, tx) => {
      await tx.query(`INSERT INTO "${db.schema}".effects (event_id, consumer, key) VALUES ($1, $2, $3)`, [event.id, name, event.key]);
    });
    const e = ev('dup', 1);
    for (let i = 0; i < 3; i++) await admin.xadd(stream, '*', ...encodeStreamFields(e));
    const consumer = consumerFor(stream, name, { inbox });
    await consumer.start();
    try {
      await waitFor('three deliveries settled', () => consumer.stats.processed + consumer.stats.duplicate === 3);
      await waitFor('all acked', async () => (await pending(stream, name)) === 0);
    } finally {
      await consumer.stop();
    }
    assert.deepEqual([consumer.stats.processed, consumer.stats.duplicate], [1, 2]);
    assert.equal((await effects(name)).length, 1);
  });

  it('an unreadable entry is moved to <stream>:dead and acked, and does not stop the group', async () => {
    const { stream, name } = fresh();
    const inbox = inboxFor(name);
    inbox.on('Changed', async (event, tx) => {
      await tx.query(`INSERT INTO "${db.schema}".effects (event_id, consumer, key) VALUES ($1, $2, $3)`, [event.id, name, event.key]);
    });
    const badId = await admin.xadd(stream, '*', 'hello', 'world');
    const good = ev('after-bad', 1);
    await admin.xadd(stream, '*', ...encodeStreamFields(good));
    const rejected: string[] = [];
    const consumer = consumerFor(stream, name, { inbox });
    consumer.events.on('rejected', (r) => rejected.push(r.entryId));
    await consumer.start();
    try {
      await waitFor('the good event applied', () => consumer.stats.processed === 1);
      await waitFor('all acked', async () => (await pending(stream, name)) === 0);
    } finally {
      await consumer.stop();
    }
    assert.deepEqual(rejected, [badId]);
    assert.equal(consumer.stats.rejected, 1);
    const dead = await admin.xrange(`${stream}:dead`, '-', '+');
    assert.equal(dead.length, 1);
    const fields = new Map<string, string>();
    for (let i = 0; i < dead[0]![1].length; i += 2) fields.set(dead[0]![1][i]!, dead[0]![1][i + 1]!);
    assert.equal(fields.get('hello'), 'world', 'the original fields are kept');
    assert.equal(fields.get('dead.entryId'), badId);
    assert.equal(fields.get('dead.group'), name);
    assert.match(fields.get('dead.reason')!, /unreadable entry: the entry has no "id" field/);
  });

  it('an entry whose dead-letter copy cannot be written (the dead-letter key holds a string) is left pending, never acked without its copy', async () => {
    const { stream, name } = fresh();
    const inbox = inboxFor(name);
    await admin.set(`${stream}:dead`, 'not a stream');
    const badId = await admin.xadd(stream, '*', 'hello', 'world');
    const errors: string[] = [];
    const consumer = consumerFor(stream, name, { inbox });
    consumer.events.on('error', (e) => errors.push(e.message));
    await consumer.start();
    try {
      await waitFor('the dead-letter attempts failed', () => errors.filter((m) => /WRONGTYPE/.test(m)).length >= 3);
      await sleep(300);
    } finally {
      await consumer.stop();
    }
    const entries = (await admin.xpending(stream, name, '-', '+', 10)) as [string, string, number, number][];
    assert.deepEqual(entries.map((e) => e[0]), [badId], 'still pending, for a later try once the key is fixed');
    assert.equal(await admin.type(`${stream}:dead`), 'string', 'nothing was written over the key');
  });

  it('a stable consumer name: its own pending entry delivered too often (a crash loop) is dead-lettered at restart without running the handler', async () => {
    const { stream, name } = fresh();
    const { inbox, runs } = countingInbox(name);
    const doomed = ev('crash-loop', 1);
    await admin.xgroup('CREATE', stream, name, '0', 'MKSTREAM');
    const entryId = await admin.xadd(stream, '*', ...encodeStreamFields(doomed));
    // What restarts of a process that died handling it leave: pending for the same name, delivered many times.
    await admin.call('XREADGROUP', 'GROUP', name, 'fixed', 'COUNT', '1', 'STREAMS', stream, '>');
    await admin.call('XCLAIM', stream, name, 'fixed', '0', entryId!, 'RETRYCOUNT', '10');
    const deadLettered: string[] = [];
    const consumer = consumerFor(stream, name, { inbox, consumer: 'fixed', maxDeliveries: 5 });
    consumer.events.on('deadLettered', (e) => deadLettered.push(e.entryId));
    await consumer.start();
    try {
      await waitFor('dead-lettered', () => deadLettered.length === 1);
      await waitFor('acked', async () => (await pending(stream, name)) === 0);
    } finally {
      await consumer.stop();
    }
    assert.deepEqual(deadLettered, [entryId]);
    assert.equal(runs(), 0, 'the handler did not run again');
  });

  it('a poison handler is dead-lettered after maxAttempts while other keys keep flowing; its key waits for it', async () => {
    const { stream, name } = fresh();
    const inbox = inboxFor(name, { retry: { baseDelayMs: 600, maxDelayMs: 600, maxAttempts: 3 } });
    const order: string[] = [];
    inbox.on('Changed', async (event, tx) => {
      if (event.aggregateId === 'poison' && event.version === 1) throw new Error('boom: cannot apply');
      await tx.query(`INSERT INTO "${db.schema}".effects (event_id, consumer, key, version) VALUES ($1, $2, $3, $4)`, [event.id, name, event.key, event.version]);
      order.push(`${event.aggregateId}@${event.version}`);
    });
    const poison = ev('poison', 1);
    const afterPoison = ev('poison', 2);
    const others = Array.from({ length: 40 }, (_, i) => ev(`ok${i % 10}`, Math.floor(i / 10) + 1));
    for (const e of [poison, afterPoison, ...others]) await admin.xadd(stream, '*', ...encodeStreamFields(e));
    // Distinct events whose handler ran, not runs: a group-commit batch with the failing handler in it is rolled
    // back and redone one event at a time, so an ok handler may run (and push to `order`) twice for one effect.
    let othersDoneAtDead = -1;
    const consumer = consumerFor(stream, name, { inbox, concurrency: 4 });
    consumer.events.on('settled', (s) => {
      if (s.status === 'dead') othersDoneAtDead = new Set(order.filter((o) => o.startsWith('ok'))).size;
    });
    await consumer.start();
    try {
      await waitFor('everything settled', () => consumer.stats.dead === 1 && consumer.stats.processed === 41, 30_000);
      await waitFor('all acked', async () => (await pending(stream, name)) === 0);
    } finally {
      await consumer.stop();
    }
    assert.equal(othersDoneAtDead, 40, 'the other keys were all handled while the poison event was retrying');
    const [effects] = await db.query<{ n: number; ids: number }>(`SELECT count(*)::int AS n, count(DISTINCT event_id)::int AS ids FROM "${db.schema}".effects WHERE consumer = $1`, [name]);
    assert.deepEqual([effects!.n, effects!.ids], [41, 41], 'each of the 40 others and poison@2 committed its effect once');
    assert.equal(order.at(-1), 'poison@2', "the poison key's next event waited until the poison was dead");
    const [row] = await db.query<{ status: string; attempts: number; last_error: string }>(
      `SELECT status, attempts, last_error FROM "${db.schema}".inbox WHERE consumer = $1 AND event_id = $2`,
      [name, poison.id],
    );
    assert.deepEqual([row!.status, row!.attempts], ['dead', 3]);
    const dead = await admin.xrange(`${stream}:dead`, '-', '+');
    assert.equal(dead.length, 1);
    const parsed = parseStreamEntry(dead[0]![1], 'items');
    assert.ok(parsed.ok, 'a dead letter is still a readable event (replayable)');
    assert.equal(parsed.event.id, poison.id);
    const reason = dead[0]![1][dead[0]![1].indexOf('dead.reason') + 1]!;
    assert.match(reason, /handler failed 3 times: boom: cannot apply/);
  });

  it('worker mode: entries are stored in the inbox queue and acked; workers apply them once in per-key order', async () => {
    const { stream, name } = fresh();
    const inbox = inboxFor(name);
    const applied: { id: string; key: string }[] = [];
    inbox.on('Changed', async (event, tx) => {
      await tx.query(`INSERT INTO "${db.schema}".effects (event_id, consumer, key, version) VALUES ($1, $2, $3, $4)`, [event.id, name, event.key, event.version]);
      applied.push({ id: event.id, key: event.key });
    });
    await runWorkerModeScenario({
      db,
      inbox,
      applied,
      keys: 10,
      versions: 10,
      redeliver: 20,
      event: ev,
      send: async (events) => {
        for (const e of events) await admin.xadd(stream, '*', ...encodeStreamFields(e));
      },
      receive: async (queue, messages) => {
        const consumer = consumerFor(stream, name, { queue, count: 30 });
        await consumer.start();
        try {
          await waitFor('all entries queued', () => consumer.stats.queued === messages);
          await waitFor('all acked', async () => (await pending(stream, name)) === 0);
        } finally {
          await consumer.stop();
        }
      },
    });
  });

  it('stop() ends a blocked read at once, lets a running handler commit and acks it', async () => {
    const { stream, name } = fresh();
    const inbox = inboxFor(name);
    let started = false;
    inbox.on('Changed', async (event, tx) => {
      started = true;
      await sleep(400);
      await tx.query(`INSERT INTO "${db.schema}".effects (event_id, consumer, key) VALUES ($1, $2, $3)`, [event.id, name, event.key]);
    });
    const consumer = consumerFor(stream, name, { inbox, blockMs: 30_000 });
    await consumer.start();
    const t0 = performance.now();
    await consumer.stop();
    assert.ok(performance.now() - t0 < 2000, `a read blocked for 30 s was ended (stop took ${Math.round(performance.now() - t0)} ms)`);

    await consumer.start();
    try {
      await admin.xadd(stream, '*', ...encodeStreamFields(ev('slow', 1)));
      await waitFor('the handler started', () => started);
    } finally {
      await consumer.stop();
    }
    assert.equal((await effects(name)).length, 1, 'the running handler committed before stop resolved');
    assert.equal(await pending(stream, name), 0, 'and its entry was acked');
    assert.equal(consumer.stats.acked, 1);
  });

  it('a handler slower than claimIdleMs keeps its entry: no other consumer of the group takes it over', async () => {
    const { stream, name } = fresh();
    const inbox = inboxFor(name);
    let runs = 0;
    inbox.on('Changed', async (event, tx) => {
      runs++;
      await sleep(1500);
      await tx.query(`INSERT INTO "${db.schema}".effects (event_id, consumer, key) VALUES ($1, $2, $3)`, [event.id, name, event.key]);
    });
    const [a, b] = ['a', 'b'].map((c) => consumerFor(stream, name, { inbox, consumer: c, claimIdleMs: 600 }));
    await a!.start();
    await b!.start();
    try {
      await admin.xadd(stream, '*', ...encodeStreamFields(ev('slow', 1)));
      await waitFor('processed', () => a!.stats.processed + b!.stats.processed === 1);
      await waitFor('acked', async () => (await pending(stream, name)) === 0);
    } finally {
      await a!.stop();
      await b!.stop();
    }
    assert.equal(runs, 1, 'the handler ran once');
    assert.deepEqual([a!.stats.reclaimed, b!.stats.reclaimed, a!.stats.duplicate + b!.stats.duplicate], [0, 0, 0], 'its idle time was kept below claimIdleMs (XCLAIM JUSTID)');
  });

  it('a refresh of a held entry that Redis refuses (XCLAIM JUSTID; here an ACL without +xclaim) is reported, not dropped', async () => {
    const { stream, name } = fresh();
    const user = `txbox-noclaim-${randomBytes(3).toString('hex')}`;
    await admin.call('ACL', 'SETUSER', user, 'on', '>hunter2', '~*', '&*', '+@all', '-xclaim');
    const inbox = inboxFor(name);
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    inbox.on('Changed', async () => {
      await gate;
    });
    const consumer = consumerFor(stream, name, { inbox, username: user, password: 'hunter2', claimIdleMs: 600 });
    const errors: string[] = [];
    consumer.events.on('error', (e) => errors.push(`${e.operation}: ${e.message}`));
    await consumer.start();
    try {
      await admin.xadd(stream, '*', ...encodeStreamFields(ev('refresh', 1)));
      await waitFor('the refusal reported', () => errors.some((e) => /^XCLAIM: .*NOPERM/i.test(e)), 10_000).catch((err: Error) => {
        throw new Error(`${err.message}; errors ${JSON.stringify(errors)}`);
      });
    } finally {
      release();
      await consumer.stop();
      await admin.call('ACL', 'DELUSER', user);
    }
  });

  it('a short claimIdleMs (60 ms): entries whose handler outlasts it are kept fresh, not taken over by another consumer nor dead-lettered', async () => {
    // claimIdleMs 60: each process must refresh its entries within a third of it, or another process's XAUTOCLAIM
    // takes them over while their handlers run (a delivery counted each time, the handler run twice at once).
    const { stream, name } = fresh();
    let runs = 0;
    // Two processes of the group, each with its inbox.
    const consumers = ['one', 'two'].map((c) => {
      const inbox = inboxFor(name);
      inbox.on('Changed', async () => {
        runs++;
        await sleep(3000);
      });
      return consumerFor(stream, name, { inbox, consumer: `${name}-${c}`, claimIdleMs: 60, maxDeliveries: 2 });
    });
    const e = ev('slow', 1);
    // The second starts 70 ms after the first: its rounds do not run just after the first's refreshes.
    await consumers[0]!.start();
    await sleep(70);
    await consumers[1]!.start();
    await admin.xadd(stream, '*', ...encodeStreamFields(e));
    try {
      await waitFor('acked', async () => (await pending(stream, name)) === 0 && runs > 0, 10_000);
      await sleep(300);
    } finally {
      for (const c of consumers) await c.stop();
    }
    assert.equal(runs, 1, 'the handler ran once');
    assert.deepEqual(consumers.map((c) => c.stats.reclaimed), [0, 0], 'no takeover of an entry whose handler runs');
    assert.equal(await admin.xlen(`${stream}:dead`), 0, 'nothing dead-lettered');
    const rows = await db.query<{ status: string }>(`SELECT status FROM "${db.schema}".inbox WHERE consumer = $1 AND event_id = $2`, [name, e.id]);
    assert.equal(rows[0]?.status, 'processed');
  });

  it('an entry delivered more than maxDeliveries times (its consumers kept crashing) is dead-lettered without running the handler', async () => {
    const { stream, name } = fresh();
    const { inbox, runs } = countingInbox(name);
    const e = ev('crashy', 1);
    const entryId = await admin.xadd(stream, '*', ...encodeStreamFields(e));
    await admin.xgroup('CREATE', stream, name, '0');
    await admin.xreadgroup('GROUP', name, 'ghost', 'COUNT', 1, 'STREAMS', stream, '>');
    for (let i = 0; i < 3; i++) await admin.xclaim(stream, name, 'ghost', 0, entryId!); // each claim counts a delivery
    const consumer = consumerFor(stream, name, { inbox, claimIdleMs: 50, maxDeliveries: 3 });
    await consumer.start();
    try {
      await waitFor('dead-lettered', async () => (await admin.xlen(`${stream}:dead`)) === 1);
      await waitFor('acked', async () => (await pending(stream, name)) === 0);
    } finally {
      await consumer.stop();
    }
    assert.equal(runs(), 0);
    const [dead] = await admin.xrange(`${stream}:dead`, '-', '+');
    assert.match(dead![1][dead![1].indexOf('dead.reason') + 1]!, /delivered 5 times without an ack \(maxDeliveries 3\)/);
    // Recorded dead in the inbox too, where `txbox inbox dead retry` can run it again.
    const rows = await db.query<{ status: string; last_error: string }>(`SELECT status, last_error FROM "${db.schema}".inbox WHERE consumer = $1 AND event_id = $2`, [name, e.id]);
    assert.equal(rows[0]?.status, 'dead');
    assert.match(rows[0]!.last_error, /delivered 5 times without an ack \(maxDeliveries 3\)/);
  });

  it('start() names the setting: an unreachable url, a key that is not a stream; the constructor checks options', async () => {
    const { stream, name } = fresh();
    const inbox = inboxFor(name);
    const unreachable = new RedisConsumer({ url: 'redis://:s3cret@127.0.0.1:1', streams: [stream], group: name, inbox, connectTimeoutMs: 500 });
    // An outage, not a configuration error: start() keeps trying, naming url, never the password.
    const waiting = await startWhileUnreachable(unreachable);
    assert.match(waiting, /url: cannot reach Redis at redis:\/\/127\.0\.0\.1:1/);
    assert.doesNotMatch(waiting, /s3cret/);
    await admin.set(stream, 'not a stream');
    const wrongType = new RedisConsumer({ url: REDIS_URL, streams: { items: stream }, group: name, inbox });
    await assert.rejects(wrongType.start(), (err: ConfigError) => err instanceof ConfigError && err.field === 'streams.items' && /not a stream/.test(err.message));
    assert.throws(() => new RedisConsumer({ url: REDIS_URL, streams: [stream], group: name }), (err: ConfigError) => err.field === 'inbox');
    assert.throws(() => new RedisConsumer({ url: REDIS_URL, streams: [], group: name, inbox }), (err: ConfigError) => err.field === 'streams');
    assert.throws(() => new RedisConsumer({ url: REDIS_URL, streams: [stream], group: name, inbox, startId: 'latest' }), (err: ConfigError) => err.field === 'startId');
    assert.throws(() => new RedisConsumer({ url: REDIS_URL, streams: [stream], group: name, inbox, claimIdleMs: 20 }), (err: ConfigError) => err.field === 'claimIdleMs' && /from 30 to/.test(err.message));
    const listed = new RedisConsumer({ url: REDIS_URL, streams: ['txbox:orders'], group: name, inbox });
    assert.equal(listed.name, 'redis');
  });
});
