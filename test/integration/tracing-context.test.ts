/**
 * How trace context is captured, kept and carried, on PostgreSQL with an
 * in-memory transport (the broker round trips: tracing.test.ts): enqueue adds
 * the active span's context unless the caller set one, counted in the size
 * limit; a caller's valid traceparent parents the publish span, an invalid one
 * parents nothing and breaks nothing; without a registered propagator W3C is
 * used, and a propagator that throws fails nothing; with the API but no SDK,
 * or without the API, nothing is added or started; each route has its own
 * publish span; the inbox gives every event of a group-commit batch its own
 * span and marks failures, and an enqueue in a handler continues the trace;
 * the inbox worker adds no publish span; the webhook receiver runs onEvent in
 * its span, falls back to the HTTP headers' context, and an inbox behind it
 * joins its span; Redis trace fields are read into headers.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { ROOT_CONTEXT, context, propagation, trace, SpanKind, SpanStatusCode, TraceFlags, createTraceState, type SpanContext } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { InboxQueue, PayloadTooLargeError, TransportError, createInbox, createInboxWorker, createOutbox, createRelay, type OutboxEvent } from 'txbox';
import { createWebhookConsumer, createWebhookReceiver } from 'txbox/http';
import { parseStreamEntry } from 'txbox/redis';
import { PostgresInboxStore, PostgresOutboxStore, PostgresRelayStore, migratePostgres, postgresNames } from 'txbox/postgres';
import { RecordingTransport } from 'txbox/testing';
import { setOtelApiForTests } from '../../src/core/tracing.ts';
import type { TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';
import { ItemChanged, exporter, recordingInbox, registerOtel, spansOf, tracer, tracingDb } from '../fixtures/tracing-harness.ts';

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]$/;
const FOREIGN = { traceId: '4bf92f3577b34da6a3ce929d0e0e4736', spanId: '00f067aa0ba902b7' };

let db: TestDb;
before(async () => {
  registerOtel();
  db = await tracingDb();
});
after(async () => {
  await db.close();
});
beforeEach(() => {
  setOtelApiForTests(undefined);
  exporter.reset();
});

const outbox = (maxPayloadBytes?: number) =>
  createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [ItemChanged], ...(maxPayloadBytes ? { maxPayloadBytes } : {}) });

async function enqueue(headers?: Record<string, string>, maxPayloadBytes?: number): Promise<string> {
  const [id] = await db.transaction((tx) => outbox(maxPayloadBytes).enqueue(tx, ItemChanged({ aggregateId: 'a', payload: { n: 1 }, ...(headers ? { headers } : {}) })));
  return id!;
}

async function storedHeaders(id: string): Promise<Record<string, string>> {
  const [row] = await db.query<{ headers: Record<string, string> }>(`SELECT headers FROM "${db.schema}".outbox WHERE id = $1`, [id]);
  return row!.headers;
}

/** Relays every pending event to a RecordingTransport; returns what it acked. */
async function relayAll(ids: readonly string[]): Promise<OutboxEvent[]> {
  const transport = new RecordingTransport();
  const relay = createRelay({ store: new PostgresRelayStore({ schema: db.schema, connection: db.connection }), transport, pollIntervalMs: 50, retention: false });
  await relay.start();
  try {
    await waitFor('all relayed', () => ids.every((id) => transport.acked.some((e) => e.id === id)), 30_000);
  } finally {
    await relay.stop();
  }
  return ids.map((id) => transport.acked.find((e) => e.id === id)!);
}

function publishSpan(id: string) {
  const spans = spansOf(id).filter((s) => s.kind === SpanKind.PRODUCER);
  assert.equal(spans.length, 1, `one publish span for ${id}`);
  return spans[0]!;
}

describe('enqueue', () => {
  it('stores no trace context when no span is active', async () => {
    assert.deepEqual(await storedHeaders(await enqueue({ 'content-type': 'application/json' })), { 'content-type': 'application/json' });
    assert.deepEqual(await storedHeaders(await enqueue()), {});
  });

  it("stores the active span's traceparent and tracestate beside the caller's headers", async () => {
    const remote: SpanContext = { ...FOREIGN, traceFlags: TraceFlags.SAMPLED, isRemote: true, traceState: createTraceState('vendor=abc') };
    const parent = trace.setSpanContext(ROOT_CONTEXT, remote);
    const { id, span } = await tracer.startActiveSpan('app', {}, parent, async (s) => {
      try {
        return { id: await enqueue({ 'x-app': '1' }), span: s.spanContext() };
      } finally {
        s.end();
      }
    });
    const headers = await storedHeaders(id);
    assert.equal(headers['x-app'], '1');
    assert.equal(headers['traceparent'], `00-${span.traceId}-${span.spanId}-01`);
    assert.equal(headers['tracestate'], 'vendor=abc');
  });

  it("keeps a caller's traceparent as it is (any letter case) and adds nothing", async () => {
    const own = `00-${FOREIGN.traceId}-${FOREIGN.spanId}-01`;
    const id = await inSpan(() => enqueue({ Traceparent: own }));
    assert.deepEqual(await storedHeaders(id), { Traceparent: own });
  });

  it('counts the added trace context in maxPayloadBytes', async () => {
    // {"n":1} is 7 bytes; traceparent adds 11 + 55.
    await enqueue(undefined, 20);
    await assert.rejects(
      inSpan(() => enqueue(undefined, 20)),
      (err: unknown) => err instanceof PayloadTooLargeError && /headers/.test(err.message),
    );
  });
});

describe('relay', () => {
  it("parents the publish span on a caller's traceparent and sends the publish span's context", async () => {
    const id = await enqueue({ traceparent: `00-${FOREIGN.traceId}-${FOREIGN.spanId}-01`, 'x-app': 'kept' });
    const [sent] = await relayAll([id]);
    const span = publishSpan(id);
    assert.equal(span.spanContext().traceId, FOREIGN.traceId);
    assert.equal(span.parentSpanContext?.spanId, FOREIGN.spanId);
    assert.equal(sent!.headers['traceparent'], `00-${FOREIGN.traceId}-${span.spanContext().spanId}-01`);
    assert.equal(sent!.headers['x-app'], 'kept');
    assert.equal(span.attributes['messaging.system'], 'recording');
    assert.equal(span.attributes['messaging.message.id'], id);
    assert.equal(span.attributes['txbox.attempt'], 1);
    assert.equal((await storedHeaders(id))['traceparent'], `00-${FOREIGN.traceId}-${FOREIGN.spanId}-01`, 'the stored headers are not changed');
  });

  it('an invalid traceparent parents nothing: the publish span starts a trace, the consumer joins it, nothing throws', async () => {
    const ids = [];
    for (const bad of ['00-zz-nonsense', `00-${'0'.repeat(32)}-${FOREIGN.spanId}-01`, `ff-${FOREIGN.traceId}-${FOREIGN.spanId}-01`, '\t']) ids.push(await enqueue({ traceparent: bad }));
    const sent = await relayAll(ids);
    const { inbox, runs } = recordingInbox(db, 'invalid');
    for (const [i, id] of ids.entries()) {
      const span = publishSpan(id);
      assert.equal(span.parentSpanContext, undefined, 'no parent');
      const [, traceId, spanId] = TRACEPARENT.exec(sent[i]!.headers['traceparent']!)!;
      assert.deepEqual([traceId, spanId], [span.spanContext().traceId, span.spanContext().spanId]);
      assert.equal((await inbox.process(sent[i]!)).status, 'processed');
      const consumer = spansOf(id).find((s) => s.kind === SpanKind.CONSUMER)!;
      assert.equal(consumer.parentSpanContext?.spanId, span.spanContext().spanId);
      assert.equal(runs.find((r) => r.eventId === id)?.active?.spanId, consumer.spanContext().spanId);
    }
    inbox.stop();
  });

  it('marks a failed publish span with error status and error.type', async () => {
    const id = await enqueue();
    const failing = new RecordingTransport({ fail: (_e, attempt) => (attempt === 1 ? new TransportError('retriable', 'broker said no') : undefined) });
    const relay = createRelay({ store: new PostgresRelayStore({ schema: db.schema, connection: db.connection }), transport: failing, pollIntervalMs: 50, retention: false, retry: { baseDelayMs: 10, maxDelayMs: 20 } });
    await relay.start();
    try {
      await waitFor('published on the second attempt', () => failing.acked.some((e) => e.id === id), 30_000);
    } finally {
      await relay.stop();
    }
    const spans = spansOf(id).filter((s) => s.kind === SpanKind.PRODUCER).sort((a, b) => Number(a.attributes['txbox.attempt']) - Number(b.attributes['txbox.attempt']));
    assert.equal(spans.length, 2);
    assert.equal(spans[0]!.status.code, SpanStatusCode.ERROR);
    assert.match(spans[0]!.status.message ?? '', /retriable: broker said no/);
    assert.equal(spans[0]!.attributes['error.type'], 'retriable');
    assert.notEqual(spans[1]!.status.code, SpanStatusCode.ERROR);
  });

  it('without a registered propagator, carries W3C trace context all the same', async () => {
    propagation.disable();
    try {
      const id = await inSpan(() => enqueue());
      assert.match((await storedHeaders(id))['traceparent'] ?? '', TRACEPARENT);
      const [sent] = await relayAll([id]);
      const span = publishSpan(id);
      assert.equal(sent!.headers['traceparent'], `00-${span.spanContext().traceId}-${span.spanContext().spanId}-01`);
      assert.ok(span.parentSpanContext, 'the publish span has the producer span as parent');
    } finally {
      propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    }
  });

  it('a propagator that throws fails nothing: the event is stored, published and processed without trace context', async () => {
    const boom = (): never => {
      throw new Error('propagator bug');
    };
    propagation.disable();
    propagation.setGlobalPropagator({ fields: () => ['traceparent'], inject: boom, extract: boom });
    try {
      const id = await inSpan(() => enqueue({ 'x-app': '1' }));
      assert.deepEqual(await storedHeaders(id), { 'x-app': '1' });
      const own = await enqueue({ traceparent: `00-${FOREIGN.traceId}-${FOREIGN.spanId}-01` });
      const sent = await relayAll([id, own]);
      assert.equal(publishSpan(own).parentSpanContext, undefined);
      assert.equal(sent[1]!.headers['traceparent'], `00-${FOREIGN.traceId}-${FOREIGN.spanId}-01`, 'the stored context travels as it is');
      const { inbox, runs } = recordingInbox(db, 'throwing');
      assert.equal((await inbox.process(sent[1]!)).status, 'processed');
      inbox.stop();
      assert.ok(runs[0]?.active, 'the handler still ran in a span');
    } finally {
      propagation.disable();
      propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    }
  });

  it('with the API but no SDK: nothing is added or started, and a stored traceparent travels unchanged', async () => {
    trace.disable();
    context.disable();
    try {
      const id = await inSpan(() => enqueue());
      assert.deepEqual(await storedHeaders(id), {});
      const own = `00-${FOREIGN.traceId}-${FOREIGN.spanId}-01`;
      const kept = await enqueue({ traceparent: own });
      const sent = await relayAll([id, kept]);
      assert.equal(sent[1]!.headers['traceparent'], own);
      const { inbox, runs } = recordingInbox(db, 'no-sdk');
      assert.equal((await inbox.process(sent[1]!)).status, 'processed');
      inbox.stop();
      assert.equal(runs[0]?.active, undefined, 'no span around the handler');
    } finally {
      registerOtel({ propagator: false });
    }
    // The test's own tracer was bound to the SDK before it was disabled: only its 'app' span was recorded.
    assert.deepEqual(exporter.getFinishedSpans().map((s) => s.name), ['app']);
  });

  it('multiple routes: each route gets its own publish span, named after its transport', async () => {
    const id = await enqueue();
    const a = new RecordingTransport();
    const b = new RecordingTransport();
    Object.defineProperty(b, 'name', { value: 'second' });
    const relay = createRelay({ store: new PostgresRelayStore({ schema: db.schema, connection: db.connection }), routes: [{ name: 'a', transport: a }, { name: 'b', transport: b }], pollIntervalMs: 50, retention: false });
    await relay.start();
    try {
      await waitFor('both routes acked', () => a.acked.some((e) => e.id === id) && b.acked.some((e) => e.id === id), 30_000);
    } finally {
      await relay.stop();
    }
    const spans = spansOf(id).filter((s) => s.kind === SpanKind.PRODUCER);
    assert.deepEqual(spans.map((s) => s.attributes['messaging.system']).sort(), ['recording', 'second']);
    const sentA = a.acked.find((e) => e.id === id)!.headers['traceparent'];
    const sentB = b.acked.find((e) => e.id === id)!.headers['traceparent'];
    assert.notEqual(sentA, sentB, 'each route carries its own span');
  });

  it('without the OpenTelemetry API: nothing is added, no span is started, the producer context passes through', async () => {
    setOtelApiForTests(null);
    const id = await inSpan(() => enqueue());
    assert.deepEqual(await storedHeaders(id), {});
    const own = `00-${FOREIGN.traceId}-${FOREIGN.spanId}-01`;
    const kept = await enqueue({ traceparent: own });
    const sent = await relayAll([id, kept]);
    assert.deepEqual(sent[1]!.headers, { traceparent: own });
    const { inbox } = recordingInbox(db, 'no-api');
    assert.equal((await inbox.process(sent[1]!)).status, 'processed');
    inbox.stop();
    assert.equal(exporter.getFinishedSpans().length, 1, 'only the test app span');
  });
});

describe('inbox', () => {
  it('runs each handler of a group-commit batch in its own span; a failure marks only its span', async () => {
    const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: 'batch', batch: { maxSize: 16 } });
    const seen = new Map<string, (string | undefined)[]>();
    inbox.on(ItemChanged, async (event) => {
      seen.set(event.id, [...(seen.get(event.id) ?? []), trace.getActiveSpan()?.spanContext().spanId]);
      await new Promise((r) => setTimeout(r, 5)); // handlers of one batch overlap in time
      if (event.aggregateId === 'bad') throw new Error('handler bug');
    });
    const events = await inSpan(async () =>
      ['k1', 'k2', 'k3', 'bad'].map((k) => ({ ...ItemChanged({ aggregateId: k, payload: { n: 1 } }), id: crypto.randomUUID(), key: `Item:${k}`, aggregateType: 'Item', headers: { traceparent: `00-${FOREIGN.traceId}-${FOREIGN.spanId}-01` }, occurredAt: new Date(), version: null }) as OutboxEvent),
    );
    // The good three share one transaction; then a batch with the failing one is redone one by one.
    const outcomes = await Promise.all(events.slice(0, 3).map((e) => inbox.process(e)));
    outcomes.push(...(await Promise.all([events[3]!, { ...events[0]!, id: crypto.randomUUID() }].map((e) => inbox.process(e)))).slice(0, 1));
    inbox.stop();
    assert.deepEqual(outcomes.map((o) => o.status), ['processed', 'processed', 'processed', 'retry']);
    for (const e of events) {
      const [span] = spansOf(e.id);
      assert.equal(span?.kind, SpanKind.CONSUMER);
      assert.equal(span!.parentSpanContext?.spanId, FOREIGN.spanId);
      assert.ok(seen.get(e.id)!.length >= 1);
      for (const active of seen.get(e.id)!) assert.equal(active, span!.spanContext().spanId, 'the handler ran in its own span');
      assert.equal(span!.attributes['txbox.consumer'], 'batch');
      assert.equal(span!.status.code === SpanStatusCode.ERROR, e.aggregateId === 'bad');
    }
    assert.match(spansOf(events[3]!.id)[0]!.status.message ?? '', /retry after attempt 1: handler bug/);
  });

  it('an enqueue inside a handler continues the trace: its event is a child of the process span', async () => {
    const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: 'chain' });
    let next = '';
    inbox.on(ItemChanged, async (_event, tx) => {
      [next] = (await outbox().enqueue(tx, ItemChanged({ aggregateId: 'next', payload: { n: 2 } }))) as [string];
    });
    const event = { ...ItemChanged({ aggregateId: 'c', payload: { n: 1 } }), id: crypto.randomUUID(), key: 'Item:c', aggregateType: 'Item', headers: { traceparent: `00-${FOREIGN.traceId}-${FOREIGN.spanId}-01` }, occurredAt: new Date(), version: null } as OutboxEvent;
    assert.equal((await inbox.process(event)).status, 'processed');
    inbox.stop();
    const [span] = spansOf(event.id);
    assert.equal((await storedHeaders(next))['traceparent'], `00-${FOREIGN.traceId}-${span!.spanContext().spanId}-01`);
  });

  it('worker mode: the local hop adds no publish span; the handler span is a child of the stored context', async () => {
    await migratePostgres(db.connection, postgresNames({ schema: db.schema, table: 'inbox_queue' }));
    const queue = new InboxQueue(new PostgresOutboxStore({ schema: db.schema, table: 'inbox_queue', onDuplicateId: 'ignore' }), (fn) => db.connection.transaction(fn));
    const { inbox, runs } = recordingInbox(db, 'worker');
    const event = { ...ItemChanged({ aggregateId: 'w', payload: { n: 1 } }), id: crypto.randomUUID(), key: 'Item:w', aggregateType: 'Item', headers: { traceparent: `00-${FOREIGN.traceId}-${FOREIGN.spanId}-01` }, occurredAt: new Date(), version: null } as OutboxEvent;
    await queue.receive([event]);
    const worker = createInboxWorker({ inbox, store: new PostgresRelayStore({ schema: db.schema, table: 'inbox_queue', connection: db.connection }), pollIntervalMs: 30 });
    await worker.start();
    try {
      await waitFor('handled', () => spansOf(event.id).length > 0, 30_000);
    } finally {
      await worker.stop();
      inbox.stop();
    }
    const spans = spansOf(event.id);
    assert.deepEqual(spans.map((s) => s.kind), [SpanKind.CONSUMER]);
    assert.equal(spans[0]!.parentSpanContext?.spanId, FOREIGN.spanId);
    assert.equal(runs[0]?.active?.spanId, spans[0]!.spanContext().spanId);
  });
});

describe('webhook receiver', () => {
  it('an inbox behind it joins its span (one span per event, also for an id sent in upper case)', async () => {
    const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: 'joined' });
    let active: string | undefined;
    inbox.on('Good', () => {
      active = trace.getActiveSpan()?.spanContext().spanId;
    });
    const receiver = await createWebhookConsumer({ inbox, allowUnsigned: true }).listen();
    try {
      const id = crypto.randomUUID();
      const body = JSON.stringify({ id: id.toUpperCase(), type: 'Good', destination: 'items', payload: {}, headers: { traceparent: `00-${FOREIGN.traceId}-${FOREIGN.spanId}-01` } });
      assert.equal((await fetch(`${receiver.url}/x`, { method: 'POST', headers: { 'content-type': 'application/json' }, body })).status, 204);
      const spans = exporter.getFinishedSpans().filter((s) => s.kind === SpanKind.CONSUMER);
      assert.equal(spans.length, 1, 'one process span');
      assert.equal(spans[0]!.parentSpanContext?.spanId, FOREIGN.spanId);
      assert.equal(spans[0]!.attributes['txbox.consumer'], 'joined');
      assert.equal(spans[0]!.attributes['txbox.inbox.outcome'], 'processed');
      assert.equal(active, spans[0]!.spanContext().spanId);
    } finally {
      await receiver.close();
      inbox.stop();
    }
  });

  it('runs onEvent in its span; the HTTP traceparent is the parent when the envelope has none; a failure is a 500 and an error span', async () => {
    let active: string | undefined;
    const receiver = await createWebhookReceiver({
      allowUnsigned: true,
      onEvent: (event) => {
        active = trace.getActiveSpan()?.spanContext().spanId;
        if (event.type === 'Bad') throw new Error('nope');
      },
    }).listen();
    try {
      const post = (type: string, id: string) =>
        fetch(`${receiver.url}/x`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', traceparent: `00-${FOREIGN.traceId}-${FOREIGN.spanId}-01` },
          body: JSON.stringify({ id, type, destination: 'items', payload: {}, headers: {} }),
        });
      const good = crypto.randomUUID();
      assert.equal((await post('Good', good)).status, 204);
      const [span] = spansOf(good);
      assert.equal(span?.name, 'process Good');
      assert.equal(span!.parentSpanContext?.spanId, FOREIGN.spanId);
      assert.equal(active, span!.spanContext().spanId);
      const bad = crypto.randomUUID();
      assert.equal((await post('Bad', bad)).status, 500);
      assert.equal(spansOf(bad)[0]?.status.code, SpanStatusCode.ERROR);
    } finally {
      await receiver.close();
    }
  });
});

describe('redis stream entries', () => {
  it('read traceparent and tracestate fields into headers when the headers field lacks them', () => {
    const id = crypto.randomUUID();
    const tp = `00-${FOREIGN.traceId}-${FOREIGN.spanId}-01`;
    const parsed = parseStreamEntry(['id', id, 'type', 'T', 'headers', '{"x":"1"}', 'payload', '{}', 'traceparent', tp, 'tracestate', 'a=b'], 'items');
    assert.ok(parsed.ok);
    assert.deepEqual(parsed.event.headers, { x: '1', traceparent: tp, tracestate: 'a=b' });
    const both = parseStreamEntry(['id', id, 'type', 'T', 'headers', JSON.stringify({ traceparent: 'from-headers' }), 'traceparent', tp], 'items');
    assert.ok(both.ok);
    assert.equal(both.event.headers['traceparent'], 'from-headers');
  });
});

function inSpan<T>(fn: () => Promise<T>): Promise<T> {
  return tracer.startActiveSpan('app', async (span) => {
    try {
      return await fn();
    } finally {
      span.end();
    }
  });
}
