/**
 * A Kafka publish call over a scripted client (no broker): per-event
 * outcomes when the broker refuses part of a send, producer replacement after
 * every failed send, topic checks, chunking, aborts, and the producer pool.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import kafkajs from 'kafkajs';
import { silentLogger, type OutboxEvent, type PublishOutcome } from 'txbox';
import { resolveKafkaTransportOptions, type KafkaTransportOptions } from 'txbox/kafka';
import type { AdminHandle, KafkaClient, KafkaRecord, ProducerHandle } from '../../src/transports/kafka/kafka-client.ts';
import { KafkaPublishCall } from '../../src/transports/kafka/kafka-publish-call.ts';
import { ProducerPool } from '../../src/transports/kafka/kafka-producer-pool.ts';
import { TopicCatalog } from '../../src/transports/kafka/kafka-topics.ts';

type ErrorClass = new (e: unknown, options?: object) => Error;
const { KafkaJSProtocolError, KafkaJSNonRetriableError, KafkaJSNumberOfRetriesExceeded } = kafkajs as unknown as Record<
  'KafkaJSProtocolError' | 'KafkaJSNonRetriableError' | 'KafkaJSNumberOfRetriesExceeded',
  ErrorClass
>;

function refused(type: string, code: number, retriable = false): Error {
  const e = new KafkaJSProtocolError({ message: `broker says ${type}`, type, code, retriable });
  return retriable ? new KafkaJSNumberOfRetriesExceeded(e, { retryCount: 2, retryTime: 1 }) : new KafkaJSNonRetriableError(e, { cause: e });
}

/** Decides what one send does: resolve (ack), reject, or hang until released. */
type Script = (records: readonly KafkaRecord[]) => Promise<void> | void;

class FakeClient implements KafkaClient {
  readonly sends: { producer: number; topics: string[]; ids: string[] }[] = [];
  opened = 0;
  closed = 0;
  topics = new Set(['orders', 'payments', 'secret']);
  listings = 0;
  constructor(public script: Script = () => {}) {}

  destroySockets(): number {
    return 0;
  }

  async openProducer(): Promise<ProducerHandle> {
    const id = ++this.opened;
    let failed = false;
    return {
      send: async (records) => {
        // The invariant under test: a producer whose send failed is never used again.
        assert.equal(failed, false, `producer ${id} was used after a failed send`);
        this.sends.push({ producer: id, topics: [...new Set(records.map((r) => r.topic))], ids: records.map((r) => r.headers['txbox-id']!.toString()) });
        try {
          await this.script(records);
        } catch (err) {
          failed = true;
          throw err;
        }
      },
      close: async () => {
        this.closed++;
      },
    };
  }

  async openAdmin(): Promise<AdminHandle> {
    return {
      listTopics: async () => {
        this.listings++;
        return [...this.topics];
      },
      close: async () => {},
    };
  }
}

let seq = 0;
function event(key: string, destination = 'orders', payload: unknown = { n: 1 }): OutboxEvent {
  return { id: `id-${++seq}-${key}`, type: 'T', aggregateType: 'A', aggregateId: key, key, destination, payload, headers: {}, occurredAt: new Date(), version: null };
}

function setup(client: FakeClient, options: KafkaTransportOptions = {}) {
  const o = resolveKafkaTransportOptions(options);
  const ctx = { options: o, pool: new ProducerPool(client, o.producers, silentLogger), topics: o.allowAutoTopicCreation ? null : new TopicCatalog(client, silentLogger) };
  return {
    publish: (events: OutboxEvent[], signal = new AbortController().signal) => new KafkaPublishCall(ctx, events, signal).run(),
    close: async () => {
      await ctx.pool.close();
      await ctx.topics?.close();
    },
  };
}

function kinds(outcomes: PublishOutcome[]): string[] {
  return outcomes.map((o) => (o.ok ? 'ok' : o.error.kind));
}

describe('KafkaPublishCall', () => {
  it('sends a whole call as one send and acks every event', async () => {
    const client = new FakeClient();
    const t = setup(client);
    const events = Array.from({ length: 50 }, (_, i) => event(`k${i}`, i % 2 ? 'orders' : 'payments'));
    assert.deepEqual(kinds(await t.publish(events)), events.map(() => 'ok'));
    assert.equal(client.sends.length, 1);
    assert.deepEqual(client.sends[0]!.topics.sort(), ['orders', 'payments']);
    assert.equal(client.listings, 1, 'topics are checked once, then remembered');
    await t.publish([event('x')]);
    assert.equal(client.listings, 1);
    await t.close();
  });

  it('one record the broker refuses fails alone: the send is halved until it stands alone, on fresh producers', async () => {
    const client = new FakeClient((records) => {
      if (records.some((r) => r.value.length > 200)) throw refused('MESSAGE_TOO_LARGE', 10);
    });
    const t = setup(client);
    const events = Array.from({ length: 64 }, (_, i) => event(`k${i}`, 'orders', i === 37 ? { blob: 'x'.repeat(300) } : { n: i }));
    const outcomes = await t.publish(events);
    assert.deepEqual(kinds(outcomes), events.map((_, i) => (i === 37 ? 'permanent' : 'ok')));
    const bad = outcomes[37]!;
    assert.ok(!bad.ok);
    assert.match(bad.error.message, /MESSAGE_TOO_LARGE/);
    assert.ok(client.sends.length <= 2 * Math.log2(64) + 1, `${client.sends.length} sends`);
    const failedSends = client.sends.filter((s) => s.ids.includes(events[37]!.id)).length;
    assert.equal(client.opened, failedSends + 1, 'a new producer after each failed send');
    await t.close();
    assert.equal(client.closed, client.opened);
  });

  it('a topic-level refusal fails that topic only: the send is split by topic first', async () => {
    const client = new FakeClient((records) => {
      if (records.some((r) => r.topic === 'secret')) throw refused('TOPIC_AUTHORIZATION_FAILED', 29);
    });
    const t = setup(client);
    const events = [event('a', 'orders'), event('b', 'secret'), event('c', 'payments'), event('d', 'secret')];
    const outcomes = await t.publish(events);
    assert.deepEqual(kinds(outcomes), ['ok', 'permanent', 'ok', 'permanent']);
    assert.ok(!outcomes[1]!.ok && /topic "secret"/.test(outcomes[1]!.error.message));
    assert.equal(client.sends.length, 4, 'the whole call, then orders, secret (both events at once), payments');
    await t.close();
  });

  it('a retriable failure fails the call retriable, without splitting', async () => {
    const client = new FakeClient(() => {
      throw refused('NOT_ENOUGH_REPLICAS', 19, true);
    });
    const t = setup(client);
    const outcomes = await t.publish([event('a'), event('b'), event('c')]);
    assert.deepEqual(kinds(outcomes), ['retriable', 'retriable', 'retriable']);
    assert.equal(client.sends.length, 1);
    await t.close();
  });

  it('a missing topic is unroutable before anything is sent; a topic deleted later is checked again', async () => {
    const client = new FakeClient((records) => {
      if (records.some((r) => !client.topics.has(r.topic))) throw refused('UNKNOWN_TOPIC_OR_PARTITION', 3, true);
    });
    const t = setup(client);
    const first = await t.publish([event('a', 'nowhere'), event('b', 'orders')]);
    assert.deepEqual(kinds(first), ['permanent', 'ok']);
    assert.ok(!first[0]!.ok && first[0]!.error.message.startsWith('unroutable: topic "nowhere"'));
    assert.equal(client.sends.length, 1);
    client.topics.delete('orders');
    const second = await t.publish([event('c', 'orders')]);
    assert.deepEqual(kinds(second), ['permanent']);
    assert.ok(!second[0]!.ok && /^unroutable/.test(second[0]!.error.message));
    await t.close();
  });

  it('illegal topic names, unserializable payloads and oversize events fail before sending', async () => {
    const client = new FakeClient();
    const t = setup(client, { maxMessageBytes: 2048 });
    const outcomes = await t.publish([event('a', 'bad name'), event('b', 'orders', { n: 1n }), event('c', 'orders', 'x'.repeat(3000)), event('d')]);
    assert.deepEqual(kinds(outcomes), ['permanent', 'permanent', 'permanent', 'ok']);
    assert.ok(!outcomes[2]!.ok && /too large.*maxMessageBytes \(2048\)/.test(outcomes[2]!.error.message));
    assert.equal(client.sends.length, 1);
    await t.close();
  });

  it('splits a call into sends of at most maxMessageBytes', async () => {
    const client = new FakeClient();
    const t = setup(client, { maxMessageBytes: 4096 });
    const events = Array.from({ length: 40 }, (_, i) => event(`k${i}`, 'orders', 'y'.repeat(300)));
    assert.ok((await t.publish(events)).every((o) => o.ok));
    assert.ok(client.sends.length >= 4);
    assert.deepEqual(client.sends.flatMap((s) => s.ids), events.map((e) => e.id), 'in order, each once');
    await t.close();
  });

  it('when the cluster is unreachable, the other chunks of the call are not tried', async () => {
    const client = new FakeClient(() => {
      throw refused('NETWORK_EXCEPTION', 13, true);
    });
    const t = setup(client, { maxMessageBytes: 4096 });
    const events = Array.from({ length: 40 }, (_, i) => event(`k${i}`, 'orders', 'y'.repeat(300)));
    assert.deepEqual(kinds(await t.publish(events)), events.map(() => 'retriable'));
    assert.equal(client.sends.length, 1);
    await t.close();
  });

  it('an aborted send is retriable at once; its producer is closed once the send settles and never reused', async () => {
    let release: () => void = () => {};
    let hang = true;
    const client = new FakeClient(() => (hang ? new Promise<void>((_, reject) => (release = () => reject(new Error('socket closed')))) : undefined));
    const t = setup(client, { producers: 1 });
    const controller = new AbortController();
    const pending = t.publish([event('a'), event('b')], controller.signal);
    await new Promise((r) => setTimeout(r, 20));
    controller.abort();
    const outcomes = await pending;
    assert.deepEqual(kinds(outcomes), ['retriable', 'retriable']);
    assert.ok(!outcomes[0]!.ok && /may still write/.test(outcomes[0]!.error.message));
    hang = false;
    assert.deepEqual(kinds(await t.publish([event('c')])), ['ok']);
    assert.deepEqual(
      client.sends.map((s) => s.producer),
      [1, 2],
      'the next call got a new producer while the old send was still pending',
    );
    assert.equal(client.closed, 0);
    release();
    await new Promise((r) => setTimeout(r, 10));
    assert.equal(client.closed, 1, 'the abandoned producer is closed when its send settles');
    await t.close();
  });

  it('concurrent calls use different producers; beyond the pool size they wait (and can be aborted while waiting)', async () => {
    const gates: (() => void)[] = [];
    const client = new FakeClient(() => new Promise<void>((resolve) => gates.push(resolve)));
    const t = setup(client, { producers: 2 });
    const a = t.publish([event('a')]);
    const b = t.publish([event('b')]);
    const waiting = new AbortController();
    const c = t.publish([event('c')], waiting.signal);
    await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(client.sends.map((s) => s.producer).sort(), [1, 2]);
    waiting.abort();
    assert.deepEqual(kinds(await c), ['retriable']);
    const d = t.publish([event('d')]);
    gates.shift()!();
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(client.sends.length, 3, 'd took the slot a freed');
    for (const g of gates.splice(0)) g();
    assert.deepEqual([...kinds(await a), ...kinds(await b), ...kinds(await d)], ['ok', 'ok', 'ok']);
    assert.equal(client.opened, 2);
    await t.close();
  });
});
