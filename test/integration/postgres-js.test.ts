/**
 * The postgres.js executor (`fromPostgresJs`): events commit and roll back
 * with the business rows, column types survive the trip, the client object
 * (not a transaction) is refused, and `enqueue` pipelines with the caller's
 * other statements: a TCP proxy between postgres.js and PostgreSQL holds the
 * server's answers once the business statement has gone out, and lets them go
 * only when the enqueue's INSERT has gone out too. A driver that waited for an
 * answer before sending the INSERT would never send it (the control case).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, connect, type AddressInfo, type Server, type Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import postgres from 'postgres';
import { createOutbox, defineEvent, fromPostgresJs, InvalidEventError, NotInTransactionError, payloadType } from 'txbox';
import { PostgresOutboxStore } from 'txbox/postgres';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';

const Placed = defineEvent({ type: 'OrderPlaced', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ id: string; total: number }>() });

let db: TestDb;
before(async () => {
  db = await openDb('postgres');
  await db.query(`CREATE TABLE "${db.schema}".orders (id text PRIMARY KEY, total int NOT NULL)`);
});
after(async () => {
  await db.close();
});

const outbox = () => createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Placed] });

async function counts(id: string): Promise<[number, number]> {
  const [o] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".orders WHERE id = $1`, [id]);
  const [e] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE aggregate_id = $1`, [id]);
  return [o!.n, e!.n];
}

describe('fromPostgresJs', () => {
  it('commits the event with the business row (array and async forms) and rolls back both', async () => {
    const sql = postgres(DATABASE_URL, { max: 2, onnotice: () => {} });
    const box = outbox();
    const orders = sql(`${db.schema}.orders`);
    try {
      await sql.begin((sql) => [sql`INSERT INTO ${orders} ${sql({ id: 'array', total: 1 })}`, box.enqueue(fromPostgresJs(sql), Placed({ aggregateId: 'array', payload: { id: 'array', total: 1 } }))]);
      await sql.begin(async (sql) => {
        await sql`INSERT INTO ${orders} ${sql({ id: 'awaited', total: 2 })}`;
        await box.enqueue(fromPostgresJs(sql, { prepare: false }), Placed({ aggregateId: 'awaited', payload: { id: 'awaited', total: 2 } }));
      });
      await assert.rejects(
        sql.begin(async (sql) => {
          await Promise.all([sql`INSERT INTO ${orders} ${sql({ id: 'rolled-back', total: 3 })}`, box.enqueue(fromPostgresJs(sql), Placed({ aggregateId: 'rolled-back', payload: { id: 'rolled-back', total: 3 } }))]);
          throw new Error('business rule failed');
        }),
        /business rule failed/,
      );
      // A failing business statement in the same pipeline: neither row stays.
      await assert.rejects(
        sql.begin((sql) => [sql`INSERT INTO ${orders} ${sql({ id: 'array', total: 4 })}`, box.enqueue(fromPostgresJs(sql), Placed({ aggregateId: 'duplicate', payload: { id: 'array', total: 4 } }))]),
        (e: unknown) => (e as { code?: string }).code === '23505' || (e as { code?: string }).code === '25P02',
      );
    } finally {
      await sql.end();
    }
    assert.deepEqual(await counts('array'), [1, 1]);
    assert.deepEqual(await counts('awaited'), [1, 1]);
    assert.deepEqual(await counts('rolled-back'), [0, 0]);
    assert.deepEqual(await counts('duplicate'), [0, 0]);
  });

  it('stores uuid, jsonb, timestamptz and bigint columns as the pg path does, with prepared statements on and off', async () => {
    const sql = postgres(DATABASE_URL, { max: 1, onnotice: () => {} });
    const box = outbox();
    const occurredAt = new Date('2024-02-29T23:59:59.123Z');
    try {
      for (const prepare of [true, false]) {
        const id = `types-${String(prepare)}`;
        const event = Placed({ aggregateId: id, payload: { id: 'é ✓ "quoted"', total: 2 ** 40 }, headers: { traceparent: '00-abc-01' }, version: 2 ** 53 - 1, occurredAt });
        const [eventId] = await sql.begin((sql) => box.enqueue(fromPostgresJs(sql, { prepare }), event));
        const [row] = await db.query<Record<string, unknown>>(
          `SELECT id::text, payload::text AS payload, headers, occurred_at, version::text AS version, key FROM "${db.schema}".outbox WHERE aggregate_id = $1`,
          [id],
        );
        assert.equal(row!.id, eventId);
        assert.deepEqual(JSON.parse(row!.payload as string), { id: 'é ✓ "quoted"', total: 2 ** 40 });
        assert.deepEqual(row!.headers, { traceparent: '00-abc-01' });
        assert.equal((row!.occurred_at as Date).toISOString(), occurredAt.toISOString());
        assert.equal(row!.version, String(2 ** 53 - 1));
        assert.equal(row!.key, `Order:${id}`);
      }
    } finally {
      await sql.end();
    }
  });

  it('refuses the postgres.js client itself (not a transaction) before any SQL, and names the adapter when it is passed bare', async () => {
    const sql = postgres(DATABASE_URL, { max: 1, onnotice: () => {} });
    const box = outbox();
    try {
      await assert.rejects(
        box.enqueue(fromPostgresJs(sql), Placed({ aggregateId: 'client', payload: { id: 'client', total: 1 } })),
        (e: unknown) => e instanceof NotInTransactionError && /postgres\.js client/.test(e.message) && /sql\.begin/.test(e.message) && /allowAutocommit/.test(e.message),
      );
      await assert.rejects(
        sql.begin((sql) => box.enqueue(sql as never, Placed({ aggregateId: 'bare', payload: { id: 'bare', total: 1 } }))),
        (e: unknown) => e instanceof InvalidEventError && /fromPostgresJs\(sql\)/.test(e.message),
      );
      assert.throws(() => fromPostgresJs(sql, { prepare: 'yes' as never }), /prepare/);
    } finally {
      await sql.end();
    }
    assert.deepEqual(await counts('client'), [0, 0]);
    assert.deepEqual(await counts('bare'), [0, 0]);
  });

  it('pipelines the INSERT with the business statement: both leave before the first answer comes back', async () => {
    const proxy = await startGateProxy();
    const sql = postgres({ host: '127.0.0.1', port: proxy.port, user: 'postgres', database: 'test', max: 1, onnotice: () => {} });
    // One statement shape (no NOTIFY), so that one warm-up transaction prepares it.
    const box = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema, notify: false }), events: [Placed] });
    const orders = sql(`${db.schema}.orders`);
    const insertOrder = (sql: postgres.TransactionSql, id: string) => sql`INSERT INTO ${orders} (id, total) VALUES (${id}, 1)`;
    try {
      // Warm-up: postgres.js describes a statement the first time a connection runs it.
      await sql.begin((sql) => [insertOrder(sql, 'warm-up'), box.enqueue(fromPostgresJs(sql), Placed({ aggregateId: 'warm-up', payload: { id: 'warm-up', total: 1 } }))]);

      const [business, event] = markers();
      const pipelined = proxy.holdAnswers([business, event], 10_000);
      await sql.begin((sql) => [insertOrder(sql, business), box.enqueue(fromPostgresJs(sql), Placed({ aggregateId: event, payload: { id: 'probe', total: 1 } }))]);
      assert.equal(await pipelined, true, 'the INSERT left before the business statement was answered');

      // Two calls started before either is awaited pipeline the same way.
      const [business2, event2] = markers();
      const pipelined2 = proxy.holdAnswers([business2, event2], 10_000);
      await sql.begin(async (sql) => {
        await Promise.all([insertOrder(sql, business2), box.enqueue(fromPostgresJs(sql), Placed({ aggregateId: event2, payload: { id: 'probe', total: 1 } }))]);
      });
      assert.equal(await pipelined2, true);

      // Control: awaiting the business statement first sends the INSERT only after its answer, so the proxy times out.
      const [business3, event3] = markers();
      const awaited = proxy.holdAnswers([business3, event3], 1_000);
      await sql.begin(async (sql) => {
        await insertOrder(sql, business3);
        await box.enqueue(fromPostgresJs(sql), Placed({ aggregateId: event3, payload: { id: 'probe', total: 1 } }));
      });
      assert.equal(await awaited, false, 'the control case is not pipelined, so the proxy can tell');
      for (const id of [event, event2, event3]) assert.equal((await counts(id))[1], 1);
    } finally {
      await sql.end();
      await proxy.close();
    }
  });
});

function markers(): [string, string] {
  const tag = randomBytes(6).toString('hex');
  return [`business-${tag}`, `event-${tag}`];
}

interface GateProxy {
  readonly port: number;
  /**
   * Once the client has sent bytes containing one of `markers`, hold the
   * server's answers until the client has sent all of them (resolves true) or
   * until `timeoutMs` passes (resolves false); then forward what was held.
   */
  holdAnswers(markers: readonly string[], timeoutMs: number): Promise<boolean>;
  close(): Promise<void>;
}

/** A TCP proxy to the test PostgreSQL on 127.0.0.1:5432 (port and host from DATABASE_URL). */
async function startGateProxy(): Promise<GateProxy> {
  const target = new URL(DATABASE_URL);
  const sockets = new Set<Socket>();
  let gate: { markers: readonly string[]; waiting: readonly string[]; sent: string; armed: boolean; held: { to: Socket; data: Buffer }[]; done: (released: boolean) => void } | undefined;
  const release = (byClient: boolean): void => {
    const g = gate;
    if (!g) return;
    gate = undefined;
    for (const { to, data } of g.held) to.write(data);
    g.done(byClient);
  };
  const server: Server = createServer((client) => {
    const upstream = connect({ host: target.hostname, port: Number(target.port || 5432) });
    sockets.add(client).add(upstream);
    client.on('data', (data) => {
      upstream.write(data);
      const text = data.toString('latin1');
      if (!gate) return;
      // Everything the client sent since the gate was set, so that a marker split across two reads still matches.
      gate.sent += text;
      gate.waiting = gate.waiting.filter((m) => !gate!.sent.includes(m));
      if (gate.waiting.length < gate.markers.length) gate.armed = true;
      if (gate.waiting.length === 0) release(true);
    });
    upstream.on('data', (data) => {
      if (gate?.armed) gate.held.push({ to: client, data });
      else client.write(data);
    });
    const end = (): void => {
      client.destroy();
      upstream.destroy();
    };
    client.on('close', end).on('error', end);
    upstream.on('close', end).on('error', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    holdAnswers(markers, timeoutMs) {
      return new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => release(false), timeoutMs);
        gate = { markers, waiting: markers, sent: '', armed: false, held: [], done: (released) => (clearTimeout(timer), resolve(released)) };
      });
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
