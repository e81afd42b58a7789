/**
 * Metrics on the real PostgreSQL with a real relay (HTTP transport to a test
 * receiver, and a recording transport for injected failures) and a real
 * inbox: through prom-client (txbox/prometheus) and through the
 * OpenTelemetry SDK (the global MeterProvider, the default). Checks the
 * values, that the exported names and labels are exactly the catalogue's,
 * and that no label value carries a key or an id.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Registry, type MetricObjectWithValues, type MetricValueWithName } from 'prom-client';
import { metrics as otelApi } from '@opentelemetry/api';
import { AggregationTemporality, MeterProvider, MetricReader, DataPointType, type ResourceMetrics } from '@opentelemetry/sdk-metrics';
import {
  createInbox,
  createOutbox,
  createRelay,
  defineEvent,
  HoldEvent,
  METRICS,
  payloadType,
  TransportError,
  uuidv7,
  type Metrics,
  type MetricSpec,
  type OutboxEvent,
  type Transport,
} from 'txbox';
import { PostgresOutboxStore, PostgresRelayStore, PostgresInboxStore, inboxNames, migrateInbox } from 'txbox/postgres';
import { HttpTransport } from 'txbox/http';
import { RecordingTransport } from 'txbox/testing';
import { prometheusMetrics } from 'txbox/prometheus';
import { otelInstrumentName } from 'txbox/otel';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { startReceiver, type TestReceiver } from '../helpers/receiver.ts';
import { waitFor } from '../helpers/wait.ts';

const Order = defineEvent({ type: 'OrderCreated', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ n: number }>() });
const Flaky = defineEvent({ type: 'FlakyThing', aggregateType: 'Flaky', destination: 'flaky', payload: payloadType<{ n: number }>() });
const Gone = defineEvent({ type: 'GoneThing', aggregateType: 'Gone', destination: 'gone', payload: payloadType<{ n: number }>() });
const Poison = defineEvent({ type: 'PoisonThing', aggregateType: 'Poison', destination: 'poison', payload: payloadType<{ n: number }>() });
const Stock = defineEvent({ type: 'StockChanged', aggregateType: 'Sku', destination: 'stock', payload: payloadType<{ q: number }>() });

function stockEvent(sku: string, version: number | null, occurredAt = new Date()): OutboxEvent {
  return { id: uuidv7(), type: 'StockChanged', aggregateType: 'Sku', aggregateId: sku, key: `Sku:${sku}`, destination: 'stock', payload: { q: 1 }, headers: {}, occurredAt, version };
}

/** What the scenario drives; every count is checked against the exported values. */
const ORDERS = 30;
const FLAKY = 5;
const POISON = 2;

interface Scenario {
  readonly ids: string[];
  readonly keys: string[];
  readonly relayId: string;
}

/**
 * Enqueues orders (to HTTP), flaky events (fail once, then publish) and
 * poison events (refused for good: parked), runs a relay with `metrics` until
 * all settled, then drives an inbox through processed, duplicate, held, failed and dead.
 */
async function drive(db: TestDb, receiver: TestReceiver, metrics: Metrics | undefined): Promise<Scenario & { stop: () => Promise<void> }> {
  const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Order, Flaky, Poison, Gone] });
  const ids: string[] = [];
  const keys: string[] = [];
  await db.transaction(async (tx) => {
    const events = [
      ...Array.from({ length: ORDERS }, (_, i) => Order({ aggregateId: `o${i}`, payload: { n: i } })),
      ...Array.from({ length: FLAKY }, (_, i) => Flaky({ aggregateId: `f${i}`, payload: { n: i } })),
      ...Array.from({ length: POISON }, (_, i) => Poison({ aggregateId: `p${i}`, payload: { n: i } })),
      Gone({ aggregateId: 'g', payload: { n: 0 } }),
    ];
    ids.push(...(await outbox.enqueue(tx, events)));
    keys.push(...events.map((e) => e.key!));
  });
  const recording = new RecordingTransport({
    fail: (e, attempt) =>
      e.destination === 'poison'
        ? new TransportError('permanent', 'HTTP 400')
        : attempt > 1
          ? undefined
          : e.destination === 'gone'
            ? new TransportError('destination-down', 'HTTP 404') // opens its circuit; the probe after 20 ms closes it
            : new TransportError('retriable', 'HTTP 503'),
  });
  const relay = createRelay({
    store: new PostgresRelayStore({ schema: db.schema, connection: db.connection }),
    routes: [
      { name: 'web', transport: new HttpTransport({ endpoints: { orders: `${receiver.url}/orders` }, secret: receiver.secret }), destinations: ['orders'] },
      { name: 'rec', transport: recording, destinations: ['flaky', 'poison', 'gone'] },
    ],
    pollIntervalMs: 50,
    leaseTtlMs: 3000,
    retry: { baseDelayMs: 10, maxDelayMs: 20, maxAttempts: 5 },
    circuitBreaker: { baseDelayMs: 20, maxDelayMs: 40 },
    metricsCacheMs: 0,
    ...(metrics ? { metrics } : {}),
  });
  let circuitOpened = false;
  relay.on('circuit', (c) => (circuitOpened ||= c.state === 'open'));
  await relay.start();
  await waitFor('orders and flaky published, poison parked', async () => {
    const [r] = await db.query<{ pending: number; parked: number }>(
      `SELECT count(*) FILTER (WHERE state = 'pending')::int AS pending, count(*) FILTER (WHERE state = 'parked')::int AS parked FROM "${db.schema}".outbox`,
    );
    return r!.pending === 0 && r!.parked === POISON;
  });
  assert.ok(circuitOpened, 'the circuit of gone opened');

  await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
  const inbox = createInbox({
    store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }),
    consumer: 'inventory',
    retry: { baseDelayMs: 10, maxDelayMs: 10, maxAttempts: 2 },
    ...(metrics ? { metrics } : {}),
  });
  inbox.on(Stock, async (event) => {
    if (event.aggregateId === 'held') throw new HoldEvent('waits for version 1');
    if (event.aggregateId === 'bad') throw new Error('handler failed');
  });
  const ok = stockEvent('a', null, new Date(Date.now() - 2000));
  ids.push(ok.id);
  assert.equal((await inbox.process(ok)).status, 'processed');
  assert.equal((await inbox.process(ok)).status, 'duplicate');
  const held = stockEvent('held', 2);
  ids.push(held.id);
  assert.equal((await inbox.process(held)).status, 'held');
  const bad = stockEvent('bad', null);
  ids.push(bad.id);
  assert.equal((await inbox.process(bad)).status, 'retry');
  assert.equal((await inbox.process(bad)).status, 'dead');
  inbox.stop();
  return { ids, keys, relayId: relay.relayId, stop: () => relay.stop() };
}

/** Label values must come from configuration: never a key, an id or a relay id. */
function assertNoIds(values: readonly string[], s: Scenario): void {
  const forbidden = [...s.ids, ...s.keys, s.relayId];
  for (const v of values) for (const f of forbidden) assert.ok(!v.includes(f), `label value ${JSON.stringify(v)} carries ${f}`);
}

describe('metrics through prom-client (txbox/prometheus)', () => {
  let db: TestDb;
  let receiver: TestReceiver;
  before(async () => {
    db = await openDb('postgres');
    receiver = await startReceiver();
  });
  after(async () => {
    await receiver.close();
    await db.close();
  });

  it('counts published, retried and parked by destination and transport, the inbox outcomes, and exports exactly the catalogue', async () => {
    const registry = new Registry();
    const s = await drive(db, receiver, prometheusMetrics({ registry }));
    const json = await registry.getMetricsAsJSON();
    const byName = new Map(json.map((m) => [m.name, m as MetricObjectWithValues<MetricValueWithName<string>>]));
    const value = (name: string, labels: Record<string, string>, metricName = name): number | undefined =>
      byName.get(name)!.values.find((v) => (v.metricName ?? name) === metricName && Object.entries(labels).every(([k, x]) => v.labels[k] === x))?.value;

    const events = METRICS.relayEvents.name;
    assert.equal(value(events, { destination: 'orders', transport: 'http', outcome: 'published' }), ORDERS);
    assert.equal(value(events, { destination: 'flaky', transport: 'recording', outcome: 'retried' }), FLAKY);
    assert.equal(value(events, { destination: 'flaky', transport: 'recording', outcome: 'published' }), FLAKY);
    assert.equal(value(events, { destination: 'poison', transport: 'recording', outcome: 'parked' }), POISON);
    // One observation per transport call and destination (not per event: docs/operations.md).
    const publishCount = `${METRICS.relayPublishDuration.name}_count`;
    const between = (x: number | undefined, lo: number, hi: number, what: string) => assert.ok(x !== undefined && x >= lo && x <= hi, `${what}: ${x}`);
    between(value(METRICS.relayPublishDuration.name, { destination: 'orders', transport: 'http' }, publishCount), 1, ORDERS, 'orders publish calls');
    between(value(METRICS.relayPublishDuration.name, { destination: 'flaky', transport: 'recording' }, publishCount), 2, 2 * FLAKY, 'flaky publish calls (failed, then published)');
    between(value(METRICS.relayCommitToAck.name, { destination: 'orders', transport: 'http' }, `${METRICS.relayCommitToAck.name}_count`), 1, ORDERS, 'orders commit-to-ack');
    assert.equal(value(METRICS.relayCommitToAck.name, { destination: 'poison', transport: 'recording' }, `${METRICS.relayCommitToAck.name}_count`), undefined, 'never acked');
    assert.ok(value(METRICS.relayBatchSize.name, { transport: 'http+recording' }, `${METRICS.relayBatchSize.name}_count`)! >= 1);
    assert.ok(value(METRICS.relayClaimDuration.name, { transport: 'http+recording' }, `${METRICS.relayClaimDuration.name}_count`)! >= 1);
    assert.equal(value(METRICS.relayBacklog.name, { destination: 'orders' }), 0);
    assert.equal(value(METRICS.relayParked.name, { destination: 'poison' }), POISON);
    assert.equal(value(METRICS.relayOldestPendingAge.name, { destination: 'poison' }), 0);
    assert.equal(value(METRICS.relayRelaysAlive.name, {}), 1);
    assert.ok(value(METRICS.relayLeasesHeld.name, {})! > 0);

    const inbox = METRICS.inboxEvents.name;
    for (const [outcome, n] of [['processed', 1], ['duplicate', 1], ['held', 1], ['failed', 1], ['dead', 1]] as const) {
      assert.equal(value(inbox, { consumer: 'inventory', outcome }), n, outcome);
    }
    assert.equal(value(METRICS.inboxHandlerDuration.name, { consumer: 'inventory' }, `${METRICS.inboxHandlerDuration.name}_count`), 1);
    const lagSum = value(METRICS.inboxLag.name, { consumer: 'inventory' }, `${METRICS.inboxLag.name}_sum`)!;
    assert.ok(lagSum >= 2 && lagSum < 60, `lag ${lagSum} s: the event occurred 2 s before it was processed`);

    // Exactly the catalogue: every name, no other, each with exactly its labels (histograms add `le`).
    const txbox = json.filter((m) => m.name.startsWith('txbox_'));
    assert.deepEqual(txbox.map((m) => m.name).sort(), Object.values(METRICS).map((m) => m.name).sort());
    for (const spec of Object.values(METRICS)) {
      const m = byName.get(spec.name)!;
      assert.equal(m.type, spec.kind, spec.name);
      assert.equal(m.help, spec.help);
      assert.ok(m.values.length > 0, `${spec.name} has values`);
      for (const v of m.values) {
        const names = Object.keys(v.labels).filter((l) => !(spec.kind === 'histogram' && l === 'le'));
        assert.deepEqual(names.sort(), [...spec.labels].sort(), `${spec.name} labels`);
        assertNoIds(Object.values(v.labels).map(String), s);
      }
      if (spec.kind === 'histogram') {
        const bounds = (m as MetricObjectWithValues<MetricValueWithName<string>>).values.filter((v) => v.metricName?.endsWith('_bucket') && v.labels.le !== '+Inf').map((v) => Number(v.labels.le));
        assert.deepEqual([...new Set(bounds)].sort((a, b) => a - b), [...spec.buckets]);
      }
    }
    // The scrape text carries them too.
    const text = await registry.metrics();
    assert.match(text, /txbox_relay_events_total\{destination="orders",transport="http",outcome="published"\} 30/);
    await s.stop();
    // A stopped relay's gauges are unregistered (prom-client shows a label-less gauge as 0).
    const afterStop = await registry.getMetricsAsJSON();
    assert.deepEqual(afterStop.find((m) => m.name === METRICS.relayLeasesHeld.name)!.values.map((v) => v.value).filter((v) => v !== 0), []);
    assert.equal(afterStop.find((m) => m.name === METRICS.relayBacklog.name)!.values.length, 0);
  });

  it('counts fenced completions by destination when the lease moved during the publish', async () => {
    await db.query(`TRUNCATE "${db.schema}".outbox`);
    const registry = new Registry();
    const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Order] });
    await db.transaction((tx) => outbox.enqueue(tx, Array.from({ length: 10 }, (_, i) => Order({ aggregateId: `x${i}`, payload: { n: i } }))));
    const inner = new RecordingTransport();
    let fenceOnce = true;
    const transport: Transport = {
      name: 'stealing',
      async publish(events, signal) {
        if (fenceOnce) {
          fenceOnce = false;
          // Another relay took the buckets meanwhile: the fence refuses this batch's marks.
          await db.query(`UPDATE "${db.schema}".outbox_buckets SET token = token + 1000 WHERE owner IS NOT NULL`);
        }
        return inner.publish(events, signal);
      },
      close: () => inner.close(),
    };
    const relay = createRelay({
      store: new PostgresRelayStore({ schema: db.schema, connection: db.connection }),
      transport,
      pollIntervalMs: 50,
      leaseTtlMs: 3000,
      lanes: 1,
      metrics: prometheusMetrics({ registry }),
    });
    let fenced = 0;
    relay.on('fenced', (e) => (fenced += e.rejected));
    await relay.start();
    await waitFor('all published after the fence', async () => {
      const [r] = await db.query<{ pending: number }>(`SELECT count(*)::int AS pending FROM "${db.schema}".outbox WHERE state = 'pending'`);
      return r!.pending === 0;
    });
    await relay.stop();
    const m = (await registry.getMetricsAsJSON()).find((x) => x.name === METRICS.relayEvents.name)!;
    const count = (outcome: string) => m.values.filter((v) => v.labels.outcome === outcome && v.labels.destination === 'orders' && v.labels.transport === 'stealing').reduce((a, v) => a + v.value, 0);
    assert.ok(fenced > 0, 'the relay saw the fence');
    assert.equal(count('fenced'), fenced);
    assert.equal(count('published'), 10);
  });
});

/** A reader the test collects on demand (cumulative). */
class TestReader extends MetricReader {
  constructor() {
    super({ aggregationTemporalitySelector: () => AggregationTemporality.CUMULATIVE });
  }
  protected async onForceFlush(): Promise<void> {}
  protected async onShutdown(): Promise<void> {}
}

describe('metrics through the OpenTelemetry SDK (the default: the global MeterProvider)', () => {
  let db: TestDb;
  let receiver: TestReceiver;
  const reader = new TestReader();
  const provider = new MeterProvider({ readers: [reader] });
  before(async () => {
    otelApi.setGlobalMeterProvider(provider);
    db = await openDb('postgres');
    receiver = await startReceiver();
  });
  after(async () => {
    await receiver.close();
    await db.close();
    await provider.shutdown();
    otelApi.disable();
  });

  it('records the same values under the catalogue names (counters without _total), labels and buckets', async () => {
    const s = await drive(db, receiver, undefined);
    const { resourceMetrics, errors } = await reader.collect();
    assert.deepEqual(errors, []);
    const all = (resourceMetrics as ResourceMetrics).scopeMetrics.flatMap((sm) => sm.metrics);
    const byName = new Map(all.map((m) => [m.descriptor.name, m]));
    // The WAL slot gauges report only while a slot streams (wake: 'wal'; test/integration/postgres-wal.test.ts); this relay LISTENs.
    const walOnly = new Set<MetricSpec>([METRICS.relayWalSlotLag, METRICS.relayWalSlotConfirmedAge]);
    const expected = Object.values(METRICS).filter((spec) => !walOnly.has(spec)).map((spec) => otelInstrumentName(spec)).sort();
    assert.deepEqual([...byName.keys()].sort(), expected);
    const sum = (name: string, attrs: Record<string, string>): number => {
      const m = byName.get(name)!;
      return m.dataPoints
        .filter((p) => Object.entries(attrs).every(([k, v]) => p.attributes[k] === v))
        .reduce((a, p) => a + (typeof p.value === 'number' ? p.value : (p.value as { count: number }).count), 0);
    };
    assert.equal(sum('txbox_relay_events', { destination: 'orders', transport: 'http', outcome: 'published' }), ORDERS);
    assert.equal(sum('txbox_relay_events', { destination: 'flaky', transport: 'recording', outcome: 'retried' }), FLAKY);
    assert.equal(sum('txbox_relay_events', { destination: 'poison', transport: 'recording', outcome: 'parked' }), POISON);
    const acks = sum('txbox_relay_commit_to_ack_seconds', { destination: 'orders', transport: 'http' });
    assert.ok(acks >= 1 && acks <= ORDERS, `commit-to-ack observations ${acks}`);
    assert.equal(sum('txbox_relay_parked', { destination: 'poison' }), POISON);
    assert.equal(sum('txbox_relay_relays_alive', {}), 1);
    assert.equal(sum('txbox_inbox_events', { consumer: 'inventory', outcome: 'dead' }), 1);
    assert.equal(sum('txbox_inbox_lag_seconds', { consumer: 'inventory' }), 1);
    for (const spec of Object.values(METRICS)) {
      if (walOnly.has(spec)) continue; // WAL mode only (above)
      const m = byName.get(otelInstrumentName(spec))!;
      assert.equal(m.descriptor.description, spec.help);
      assert.equal(m.descriptor.unit, spec.name.endsWith('_seconds') ? 's' : '1');
      const type = { counter: DataPointType.SUM, histogram: DataPointType.HISTOGRAM, gauge: DataPointType.GAUGE }[spec.kind];
      assert.equal(m.dataPointType, type, spec.name);
      assert.ok(m.dataPoints.length > 0, `${spec.name} has points`);
      for (const p of m.dataPoints) {
        assert.deepEqual(Object.keys(p.attributes).sort(), [...spec.labels].sort(), `${spec.name} attributes`);
        assertNoIds(Object.values(p.attributes).map(String), s);
        if (spec.kind === 'histogram') assert.deepEqual((p.value as { buckets: { boundaries: number[] } }).buckets.boundaries, [...spec.buckets]);
      }
    }
    await s.stop();
  });
});

describe('outboxGauges on PGlite (the same statement as PostgreSQL)', () => {
  it('reads pending, parked and the oldest pending age per destination, and the relays alive', async () => {
    const db = await openDb('pglite');
    try {
      const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Order, Poison] });
      await db.transaction((tx) => outbox.enqueue(tx, [Order({ aggregateId: 'a', payload: { n: 1 } }), Order({ aggregateId: 'b', payload: { n: 2 } }), Poison({ aggregateId: 'p', payload: { n: 3 } })]));
      await db.query(`UPDATE "${db.schema}".outbox SET state = 'parked' WHERE destination = 'poison'`);
      await db.query(`UPDATE "${db.schema}".outbox SET created_at = now() - interval '90 seconds' WHERE destination = 'orders' AND key = 'Order:a'`);
      const store = new PostgresRelayStore({ schema: db.schema, connection: db.connection });
      const g = await store.outboxGauges();
      assert.equal(g.relaysAlive, 0);
      const byDest = new Map(g.destinations.map((d) => [d.destination, d]));
      assert.equal(byDest.get('orders')!.pending, 2);
      assert.equal(byDest.get('orders')!.parked, 0);
      assert.ok(byDest.get('orders')!.oldestPendingSeconds >= 90 && byDest.get('orders')!.oldestPendingSeconds < 120);
      assert.deepEqual(byDest.get('poison'), { destination: 'poison', pending: 0, parked: 1, oldestPendingSeconds: 0 });
    } finally {
      await db.close();
    }
  });
});

describe('metrics option', () => {
  it('refuses what is not metrics, naming the field and the fix', () => {
    const store = new PostgresRelayStore({ schema: 'unused', connection: { query: async () => ({ rows: [] }) } as never });
    const notMetrics = { record: () => {} } as unknown as Metrics;
    assert.throws(() => createRelay({ store, transport: new RecordingTransport(), metrics: notMetrics }), (err: Error & { field?: string }) => {
      assert.equal(err.field, 'metrics');
      assert.match(err.message, /prometheusMetrics\(\{ registry \}\).*or false/);
      return true;
    });
    const inboxStore = new PostgresInboxStore({ schema: 'unused', connection: { query: async () => ({ rows: [] }) } as never });
    assert.throws(() => createInbox({ store: inboxStore, consumer: 'c', metrics: notMetrics }), /metrics: must be metrics/);
  });
});

describe('a Metrics adapter that throws', () => {
  it('does not stop publishing: every event is published once, the failure is logged', async () => {
    const db = await openDb('postgres');
    try {
      const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Order] });
      await db.transaction((tx) => outbox.enqueue(tx, Array.from({ length: 20 }, (_, i) => Order({ aggregateId: `t${i}`, payload: { n: i } }))));
      const broken: Metrics = {
        recorder: () => ({
          record() {
            throw new Error('exporter broke');
          },
        }),
        observe: () => () => {},
      };
      const errors: string[] = [];
      const log = () => {};
      const logger = { debug: log, info: log, warn: log, error: (_o: object, msg: string) => errors.push(msg) };
      const transport = new RecordingTransport();
      const relay = createRelay({ store: new PostgresRelayStore({ schema: db.schema, connection: db.connection }), transport, pollIntervalMs: 50, metrics: broken, logger, logSummaryIntervalMs: 0 });
      await relay.start();
      await waitFor('all published', async () => {
        const [r] = await db.query<{ pending: number }>(`SELECT count(*)::int AS pending FROM "${db.schema}".outbox WHERE state = 'pending'`);
        return r!.pending === 0;
      });
      await relay.stop();
      assert.equal(transport.acked.length, 20, 'published once each');
      assert.ok(errors.some((m) => /recording a metric failed/.test(m)));
    } finally {
      await db.close();
    }
  });
});
