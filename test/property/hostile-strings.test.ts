/**
 * Property-based test (fast-check): random strings (full unicode, lone
 * surrogates, NUL, control characters, huge) thrown at enqueue's fields,
 * headers, ids and keys, and at every consumer's envelope parser. Every case
 * must end as stored-and-delivered (the relay publishes it and what arrives
 * equals what was enqueued) or as a clear TxboxError naming the field, with
 * the transaction still usable; never an unhandled PostgreSQL error, never a
 * throw from a parser, never a hang. About 10,500 cases per run; a failure
 * prints fast-check's seed and shrunk counterexample.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import type { Message } from 'amqplib';
import { TxboxError, createOutbox, createRelay, type NewEvent, type OutboxEvent, type Outbox } from 'txbox';
import { PostgresOutboxStore, PostgresRelayStore } from 'txbox/postgres';
import { RecordingTransport } from 'txbox/testing';
import { parseEnvelope } from 'txbox/http';
import { encodeStreamFields, parseStreamEntry } from 'txbox/redis';
import { decodeSqsMessage, encodeSqsMessage } from 'txbox/sqs';
import { parseNatsMessage } from 'txbox/nats';
import { headers as natsHeaders, MsgHdrsImpl } from '@nats-io/transport-node';
import { parseKafkaMessage } from 'txbox/kafka';
import { decodeRabbitMqMessage, encodeRabbitMqMessage } from 'txbox/rabbitmq';
import { buildPubSubMessage, parsePubSubMessage } from 'txbox/pubsub';
import { buildKafkaRecord } from '../../src/transports/kafka/kafka-message.ts';
import { buildMessage } from '../../src/transports/nats/nats-message.ts';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';

/** Garbage for the NATS parser: a message whose headers (any names and values nats.js accepts) and body are arbitrary. */
function natsWire(input: unknown): Parameters<typeof parseNatsMessage>[0] {
  const h = natsHeaders();
  const entries = typeof input === 'object' && input !== null && !Array.isArray(input) ? Object.entries((input as { headers?: object }).headers ?? input) : [];
  for (const [k, v] of entries) {
    try {
      h.set(k, String(v));
    } catch {
      // a name nats.js itself refuses cannot arrive
    }
  }
  return { subject: 'txbox.orders', data: new TextEncoder().encode(typeof input === 'string' ? input : JSON.stringify(input) ?? ''), headers: h };
}

/** Strings that break things: any UTF-16 code units (lone surrogates), NUL and controls, long and huge ones. */
const hostile = (): fc.Arbitrary<string> =>
  fc.oneof(
    { weight: 4, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }) },
    { weight: 2, arbitrary: fc.string({ unit: fc.constantFrom('\u0000', '\uD800', '\uDFFF', '\uFFFE', '\r', '\n', '\t', ' ', ':', '"', '\\', 'é', '😀', 'a'), maxLength: 20 }) },
    { weight: 1, arbitrary: fc.constantFrom('', ' ', '\u0000', 'a\u0000b', '\uD800', 'x\uDC00', '-1', '__proto__', 'constructor', 'txbox-id', 'Nats-Rollup', 'CC') },
    { weight: 1, arbitrary: fc.integer({ min: 1_000, max: 70_000 }).map((n) => 'k'.repeat(n)) },
    { weight: 1, arbitrary: fc.string({ unit: 'binary', minLength: 1, maxLength: 3 }).map((s) => s.repeat(20_000)) },
  );

const ENQUEUE_RUNS = 3000;
const PARSER_RUNS = 1500; // x 5 parsers = 7,500

describe('hostile strings', { timeout: 300_000 }, () => {
  let db: TestDb;
  let outbox: Outbox;
  /** What the relay delivered in the enqueue property: the stored events the transports' encoders get. */
  const delivered: OutboxEvent[] = [];

  before(async () => {
    db = await openDb('pglite');
    outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), destinations: ['orders'] });
  });
  after(async () => {
    await db.close();
  });

  it(`enqueue: ${ENQUEUE_RUNS} hostile events each end stored-and-delivered (equal) or as a TxboxError naming the field`, async () => {
    const accepted = new Map<string, NewEvent>();
    const problems: string[] = [];
    const field = fc.constantFrom('key', 'aggregateId', 'aggregateType', 'type', 'id', 'headerName', 'headerValue', 'payload');
    await fc.assert(
      fc.asyncProperty(field, hostile(), fc.nat(), async (which, text, n) => {
        const event: NewEvent = {
          type: which === 'type' ? text : 'Hostile',
          aggregateType: which === 'aggregateType' ? text : 'H',
          aggregateId: which === 'aggregateId' ? text : `a${n}`,
          destination: 'orders',
          payload: which === 'payload' ? { text } : { n },
          ...(which === 'key' ? { key: text } : {}),
          ...(which === 'id' ? { id: text } : {}),
          ...(which === 'headerName' ? { headers: { [text]: 'v' } } : {}),
          ...(which === 'headerValue' ? { headers: { h: text } } : {}),
        };
        await db.transaction(async (tx) => {
          await tx.query('SAVEPOINT hostile');
          try {
            const [id] = await outbox.enqueue(tx, event);
            accepted.set(id!, event);
          } catch (err) {
            const named = err instanceof TxboxError && 'field' in err && typeof err.field === 'string';
            if (!named) problems.push(`${which}: ${err instanceof Error ? `${(err as { code?: string }).code ?? err.name} ${err.message.slice(0, 80)}` : String(err)}`);
            // The caller's transaction must stay usable; a PostgreSQL error aborted it: roll back to go on.
            await tx.query('ROLLBACK TO SAVEPOINT hostile');
          }
          await tx.query('SELECT 1'); // usable
        });
        return true;
      }),
      { numRuns: ENQUEUE_RUNS, seed: Number(process.env.FC_SEED ?? Date.now() % 2 ** 31) },
    );
    // Everything accepted must be delivered, and equal to what was enqueued.
    const transport = new RecordingTransport();
    const relay = createRelay({ store: new PostgresRelayStore({ schema: db.schema, connection: db.connection }), transport, pollIntervalMs: 20, leaseTtlMs: 5000 });
    await relay.start();
    try {
      await waitFor(`${accepted.size} accepted events delivered`, () => new Set(transport.acked.map((e) => e.id)).size >= accepted.size, 120_000);
    } finally {
      await relay.stop();
    }
    const mismatched: string[] = [];
    for (const e of transport.acked) {
      const sent = accepted.get(e.id);
      if (!sent) {
        mismatched.push(`delivered ${e.id} was never accepted`);
        continue;
      }
      const expected = { type: sent.type, aggregateType: sent.aggregateType, aggregateId: String(sent.aggregateId), key: sent.key ?? `${sent.aggregateType}:${sent.aggregateId}`, headers: sent.headers ?? {}, payload: sent.payload };
      const got = { type: e.type, aggregateType: e.aggregateType, aggregateId: e.aggregateId, key: e.key, headers: e.headers, payload: e.payload };
      try {
        assert.deepEqual(got, expected);
      } catch {
        mismatched.push(`event ${e.id}: delivered differs from enqueued`);
      }
    }
    delivered.push(...transport.acked);
    const parked = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE state <> 'published'`);
    const byKind = new Map<string, number>();
    for (const p of problems) byKind.set(p, (byKind.get(p) ?? 0) + 1);
    assert.deepEqual(Object.fromEntries(byKind), {}, `${problems.length} of ${ENQUEUE_RUNS} cases ended in an error that is not a TxboxError naming the field (field: error -> cases)`);
    assert.deepEqual(mismatched.slice(0, 10), [], `${mismatched.length} delivered events differ from what was enqueued`);
    assert.equal(Number(parked[0]!.n), 0, 'every accepted event was published');
  });

  /** The transports' encoders and their consumers' parsers; an encoder may refuse (clear reason), a parser must read back what was encoded. */
  const codecs: Record<string, { encode(e: OutboxEvent): unknown; parse(wire: unknown): { ok: true; event: OutboxEvent } | { ok: false; message: string } }> = {
    http: {
      encode: (e) => JSON.stringify({ id: e.id, type: e.type, aggregateType: e.aggregateType, aggregateId: e.aggregateId, key: e.key, destination: e.destination, payload: e.payload, headers: e.headers, occurredAt: e.occurredAt.toISOString(), version: e.version }),
      parse: (wire) => parseEnvelope(wire as string),
    },
    redis: { encode: (e) => encodeStreamFields(e), parse: (wire) => parseStreamEntry(wire as string[], 'orders') },
    nats: {
      encode: (e) => {
        const built = buildMessage(e, null);
        // The header block as the server would pass it on, read back by nats.js's own parser.
        return built.ok ? { subject: 'txbox.orders', data: built.message.body, headers: MsgHdrsImpl.decode(built.message.headers) } : built;
      },
      parse: (wire) => parseNatsMessage(wire as Parameters<typeof parseNatsMessage>[0]),
    },
    kafka: {
      encode: (e) => {
        const built = buildKafkaRecord(e, 'orders');
        return built.ok ? built.record : built;
      },
      parse: (wire) => parseKafkaMessage(wire as Parameters<typeof parseKafkaMessage>[0], 'orders'),
    },
    sqs: {
      encode: (e) => {
        const m = encodeSqsMessage(e, true);
        return { MessageId: 'm', Body: m.body, MessageAttributes: m.attributes };
      },
      parse: (wire) => decodeSqsMessage(wire as Parameters<typeof decodeSqsMessage>[0], 'orders'),
    },
    pubsub: {
      encode: (e) => {
        const built = buildPubSubMessage(e);
        return built.ok ? built.message : built;
      },
      parse: (wire) => parsePubSubMessage(wire as Parameters<typeof parsePubSubMessage>[0], 'orders'),
    },
    rabbitmq: {
      encode: (e) => {
        const { content, properties } = encodeRabbitMqMessage(e);
        return { content, properties: { headers: {}, ...properties }, fields: { routingKey: 'orders', exchange: 'x', deliveryTag: 1, redelivered: false } } as unknown as Message;
      },
      parse: (wire) => decodeRabbitMqMessage(wire as Message),
    },
  };

  for (const [name, codec] of Object.entries(codecs)) {
    it(`${name}: every event the enqueue property stored and delivered is refused with a reason or read back equal`, () => {
      assert.ok(delivered.length > 0, 'runs after the enqueue property, on what it delivered');
      const differences: string[] = [];
      for (const event of delivered) {
        let wire: unknown;
        try {
          wire = codec.encode(event);
        } catch (err) {
          // A refusal the relay turns into a parked event (dead letter) must be a TxboxError.
          if (!(err instanceof TxboxError)) differences.push(`encoder threw ${err instanceof Error ? err.name : typeof err}`);
          continue;
        }
        if (typeof wire === 'object' && wire !== null && 'ok' in wire && (wire as { ok: unknown }).ok === false) {
          if (typeof (wire as { reason?: unknown }).reason !== 'string') differences.push('encoder refused without a reason');
          continue;
        }
        const parsed = codec.parse(wire);
        if (!parsed.ok) {
          differences.push(`the parser refused what the encoder built: ${parsed.message}`);
          continue;
        }
        try {
          assert.deepEqual(
            { id: parsed.event.id, type: parsed.event.type, key: parsed.event.key, aggregateId: parsed.event.aggregateId, headers: parsed.event.headers, payload: parsed.event.payload },
            { id: event.id, type: event.type, key: event.key, aggregateId: event.aggregateId, headers: event.headers, payload: event.payload },
          );
        } catch {
          const got = parsed.event as unknown as Record<string, unknown>;
          const sent = event as unknown as Record<string, unknown>;
          const fields = ['id', 'type', 'key', 'aggregateId', 'headers', 'payload'].filter((f) => JSON.stringify(got[f]) !== JSON.stringify(sent[f]));
          differences.push(`read back differs in ${fields.join(', ')}${fields.includes('headers') ? ` (sent ${JSON.stringify(Object.keys(sent.headers as object))}, got ${JSON.stringify(Object.keys(got.headers as object))})` : ''}`);
        }
      }
      const byKind = new Map<string, number>();
      for (const d of differences) byKind.set(d, (byKind.get(d) ?? 0) + 1);
      assert.deepEqual(Object.fromEntries(byKind), {}, `${differences.length} of ${delivered.length} delivered events did not survive ${name}`);
    });

    it(`${name}: ${PARSER_RUNS} garbage inputs are refused with a message, never thrown`, () => {
      const garbage = fc.oneof(
        hostile(),
        fc.array(hostile(), { maxLength: 12 }),
        fc.json().map((j) => j),
        fc.dictionary(hostile(), hostile(), { maxKeys: 6 }).map((h) => ({ key: null, value: null, headers: h, subject: 'x', data: new Uint8Array(), content: Buffer.alloc(0), properties: { headers: h, messageId: h.id, type: h.type } })),
      );
      fc.assert(
        fc.property(garbage, (input) => {
          const wire = name === 'nats' ? natsWire(input) : name === 'redis' ? (Array.isArray(input) ? input : [String(input)]) : name === 'http' ? (typeof input === 'string' ? input : JSON.stringify(input) ?? '') : typeof input === 'object' && input !== null && !Array.isArray(input) ? input : { key: null, value: String(input), headers: {}, subject: 'x', data: new TextEncoder().encode(String(input)), content: Buffer.from(String(input)), properties: { headers: {} } };
          const parsed = codec.parse(wire);
          assert.equal(typeof parsed.ok, 'boolean');
          if (!parsed.ok) assert.ok(parsed.message.length > 0);
        }),
        { numRuns: PARSER_RUNS },
      );
    });
  }
});
