/**
 * The transport conformance suite: every transport runs it against its real
 * broker (Watermill's TestPubSub in spirit). It drives a real relay over a
 * real PostgreSQL outbox and reads the broker back.
 *
 * @example
 * import { runTransportConformance } from 'txbox/testing/conformance';
 * runTransportConformance({ name: 'redis', databaseUrl, broker: redisBroker });
 */
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { OutboxEvent } from '../../core/envelope.ts';
import { ConfigError, TransportError } from '../../core/errors.ts';
import { createOutbox, type Outbox } from '../../core/outbox.ts';
import type { Transport } from '../../core/ports.ts';
import { uuidv7 } from '../../core/uuid.ts';
import { createRelay } from '../../relay/relay.ts';
import type { PostgresConnection } from '../../stores/postgres/postgres-connection.ts';
import { migratePostgres } from '../../stores/postgres/postgres-migrations.ts';
import { PostgresOutboxStore } from '../../stores/postgres/postgres-outbox-store.ts';
import { PostgresRelayStore } from '../../stores/postgres/postgres-relay-store.ts';
import { postgresNames } from '../../stores/postgres/postgres-sql.ts';
import { checkDeliveries, type Delivered } from '../order-check.ts';

/** What a transport's test gives the suite about its broker. */
export interface ConformanceBroker {
  /** Creates fresh broker resources for a new destination (topic, exchange + queue, stream, subject) and returns its name. */
  createDestination(): Promise<string>;
  /** A transport configured for these destinations. The suite starts and closes it. */
  createTransport(destinations: readonly string[]): Transport | Promise<Transport>;
  /** Everything the broker holds for `destination`, in broker order (per key order must be visible), waiting until at least `expected` arrived or `timeoutMs` passed. */
  readBack(destination: string, expected: number, timeoutMs: number): Promise<Delivered[]>;
  /**
   * Stops the broker hard and starts it again; resolves once it accepts
   * connections. Omit it for a broker that cannot restart without losing
   * what it holds (an in-memory emulator): the test is then skipped, and
   * the adapter's test should cut the connection instead (`outage`).
   */
  restart?(): Promise<void>;
  /** A broker outage without a restart (the connections cut and refused for a while), tested like `restart` when that is omitted. */
  outage?(): Promise<void>;
  /** `broker`: a re-publish of the same id is dropped by the broker; `none`: it is stored twice (and counted). */
  readonly dedup: 'broker' | 'none';
  /** A destination the transport cannot route to (unknown topic with auto-creation off, no binding, ...). */
  unroutableDestination(): Promise<string>;
  /** Payload size (bytes of one string field) that the broker refuses as too large. */
  readonly oversizeBytes: number;
  /** Transports with a wrong address or wrong credentials, and the setting their error must name. */
  misconfigured(destinations: readonly string[]): { readonly transport: Transport; readonly setting: RegExp }[];
  /** Called once at the end. */
  close?(): Promise<void>;
}

export interface ConformanceOptions {
  readonly name: string;
  readonly broker: ConformanceBroker;
  /** PostgreSQL for the outbox (a fresh schema is created and dropped). */
  readonly databaseUrl: string;
  /** Events in the ordering test. Default 10,000 over 100 keys. */
  readonly events?: number;
  readonly keys?: number;
}

export function runTransportConformance(options: ConformanceOptions): void {
  const { broker } = options;
  const total = options.events ?? 10_000;
  const keys = options.keys ?? 100;
  const schema = `conf_${options.name.replace(/\W/g, '_')}_${randomBytes(4).toString('hex')}`;
  let db: PostgresConnection;
  const allDestinations: string[] = [];

  async function newDestination(): Promise<string> {
    const d = await broker.createDestination();
    allDestinations.push(d);
    return d;
  }

  /** Writes `count` events over `keys` keys in transactions of 500; returns key -> ids in commit order. */
  async function produce(destination: string, count: number, payloadBytes = 100): Promise<Map<string, string[]>> {
    const committed = new Map<string, string[]>();
    const pad = 'x'.repeat(payloadBytes);
    const outbox: Outbox = createOutbox({ store: new PostgresOutboxStore({ schema }), destinations: [destination] });
    for (let start = 0; start < count; start += 500) {
      const n = Math.min(500, count - start);
      const events = Array.from({ length: n }, (_, i) => ({
        type: 'ConformanceEvent',
        aggregateType: 'Item',
        aggregateId: String((start + i) % keys),
        destination,
        payload: { n: start + i, pad },
        version: Math.floor((start + i) / keys) + 1,
      }));
      const ids = await db.transaction((tx) => outbox.enqueue(tx, events));
      ids.forEach((id, i) => {
        const key = `Item:${events[i]!.aggregateId}`;
        committed.set(key, [...(committed.get(key) ?? []), id]);
      });
    }
    return committed;
  }

  function relayFor(transport: Transport) {
    return createRelay({
      store: new PostgresRelayStore({ schema, connection: db }),
      transport,
      leaseTtlMs: 12_000, // publishTimeoutMs must fit inside the lease (leaseTtlMs minus a 2 s margin)
      pollIntervalMs: 50,
      retry: { baseDelayMs: 100, maxDelayMs: 2000, maxAttempts: 1000 },
      publishTimeoutMs: 10_000,
    });
  }

  function event(destination: string, payload: unknown = { n: 1 }): OutboxEvent {
    return {
      id: uuidv7(),
      type: 'ConformanceEvent',
      aggregateType: 'Item',
      aggregateId: '1',
      key: 'Item:1',
      destination,
      payload,
      headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' },
      occurredAt: new Date(),
      version: 1,
    };
  }

  describe(`transport conformance: ${options.name}`, { timeout: 600_000 }, () => {
    before(async () => {
      // Loaded here, not at the top: the store suite shares this subpath and must load without pg (a MySQL store's tests).
      const { pgConnection } = await import('../../stores/postgres/pg-connection.ts');
      db = pgConnection({ connectionString: options.databaseUrl, maxConnections: 6 });
      await migratePostgres(db, postgresNames({ schema }));
    });
    after(async () => {
      await db.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => {});
      await db.close();
      await broker.close?.();
    });

    it(`delivers ${total} events over ${keys} keys: every id, per-key order intact`, async () => {
      const destination = await newDestination();
      const committed = await produce(destination, total);
      const relay = relayFor(await broker.createTransport([destination]));
      await relay.start();
      try {
        const got = await broker.readBack(destination, total, 120_000);
        const report = checkDeliveries(committed, got);
        assert.equal(report.lost, 0, `lost ${report.lost}`);
        assert.equal(report.phantom, 0);
        assert.equal(report.orderViolations, 0, `order violations ${report.orderViolations}`);
      } finally {
        await relay.stop();
      }
    });

    const interrupt = broker.restart ?? broker.outage;
    it(`survives a broker ${broker.restart ? 'restart' : 'outage'} mid-stream: nothing lost, the relay recovers by itself`, { skip: interrupt ? false : 'the broker gives neither restart nor outage' }, async () => {
      const destination = await newDestination();
      const count = Math.min(total, 6000);
      const committed = await produce(destination, count);
      const relay = relayFor(await broker.createTransport([destination]));
      await relay.start();
      try {
        await broker.readBack(destination, Math.floor(count / 4), 60_000);
        await interrupt!.call(broker);
        const got = await broker.readBack(destination, count, 180_000);
        const report = checkDeliveries(committed, got);
        assert.equal(report.lost, 0, `lost ${report.lost} after the restart`);
        assert.equal(report.orderViolations, 0);
      } finally {
        await relay.stop();
      }
    });

    it(`re-publishing the same id is ${broker.dedup === 'broker' ? 'dropped by the broker' : 'stored again and counted'}`, async () => {
      const destination = await newDestination();
      const transport = await broker.createTransport([destination]);
      await transport.start?.(new AbortController().signal);
      try {
        const e = event(destination);
        for (let i = 0; i < 2; i++) {
          const [outcome] = await transport.publish([e], new AbortController().signal);
          assert.equal(outcome!.ok, true, outcome!.ok ? '' : outcome!.error.message);
        }
        const got = await broker.readBack(destination, 2, broker.dedup === 'broker' ? 1500 : 15_000);
        const copies = got.filter((d) => d.id === e.id).length;
        assert.equal(copies, broker.dedup === 'broker' ? 1 : 2);
      } finally {
        await transport.close();
      }
    });

    it('an oversize message and an unroutable destination fail permanently with a clear error', async () => {
      const destination = await newDestination();
      const unroutable = await broker.unroutableDestination();
      const transport = await broker.createTransport([destination, unroutable]);
      await transport.start?.(new AbortController().signal);
      try {
        const [big, lost, fine] = await transport.publish(
          [event(destination, { blob: 'x'.repeat(broker.oversizeBytes) }), { ...event(unroutable), key: 'Item:2' }, { ...event(destination), key: 'Item:3' }],
          new AbortController().signal,
        );
        assert.equal(big!.ok, false);
        assert.ok(!big!.ok && big!.error instanceof TransportError && big!.error.kind === 'permanent', !big!.ok ? big!.error.message : '');
        assert.match(!big!.ok ? big!.error.message : '', /large|size|exceed|too big|max/i);
        assert.ok(!lost!.ok && lost!.error.kind === 'permanent', !lost!.ok ? lost!.error.message : 'unroutable was acked');
        assert.match(!lost!.ok ? lost!.error.message : '', new RegExp(unroutable.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')));
        assert.equal(fine!.ok, true, 'other events of the call are unaffected');
      } finally {
        await transport.close();
      }
    });

    it('a wrong address or wrong credentials give a clear error naming the setting', async () => {
      const destination = await newDestination();
      for (const { transport, setting } of broker.misconfigured([destination])) {
        let message = '';
        try {
          await transport.start?.(AbortSignal.timeout(30_000));
          const [outcome] = await transport.publish([event(destination)], AbortSignal.timeout(30_000));
          if (!outcome!.ok) message = outcome!.error.message;
        } catch (err) {
          message = (err as Error).message;
          assert.ok(err instanceof ConfigError || err instanceof TransportError, `a txbox error, got ${String(err)}`);
        } finally {
          await transport.close().catch(() => {});
        }
        assert.match(message, setting);
        assert.doesNotMatch(message, /password=|:[^@/\s]+@/, 'no credentials in the message');
      }
    });
  });
}
