/**
 * RabbitMqTransport against the real broker on 127.0.0.1:5672, beyond the
 * conformance suite: the message format, many events in flight, every way
 * the broker refuses a message, the broker's own size limit, an outage
 * (stop_app), a resource alarm (connection.blocked) and close().
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { connect, type Channel, type ChannelModel } from 'amqplib';
import { ConfigError, uuidv7, type OutboxEvent, type PublishOutcome } from 'txbox';
import { RABBITMQ_MAX_MESSAGE_BYTES, RabbitMqTransport, decodeRabbitMqMessage, type RabbitMqTransportOptions } from 'txbox/rabbitmq';
import { waitFor } from '../helpers/wait.ts';
import { lockBroker } from '../fixtures/rabbitmq-consumer-broker.ts';

const AMQP_URL = process.env.TXBOX_TEST_RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const run = promisify(execFile);
const prefix = `txbox_rt_${randomBytes(3).toString('hex')}`;
let unlock: () => Promise<void>;
let admin: ChannelModel | null = null;
let channel: Channel | null = null;
const created = { queues: [] as string[], exchanges: [] as string[] };
const transports: RabbitMqTransport[] = [];


async function adminChannel(): Promise<Channel> {
  if (channel) return channel;
  const model = await connect(AMQP_URL);
  model.on('error', () => {});
  model.on('close', () => {
    admin = null;
    channel = null;
  });
  const ch = await model.createChannel();
  ch.on('error', () => {});
  ch.on('close', () => {
    if (channel === ch) channel = null;
  });
  [admin, channel] = [model, ch];
  return ch;
}

/** A fresh durable queue, bound to a fresh direct exchange under its own name when `exchange` is set. */
async function queue(options: { exchange?: boolean } = {}): Promise<string> {
  const name = `${prefix}_${created.queues.length + created.exchanges.length}`;
  const ch = await adminChannel();
  await ch.assertQueue(name, { durable: true });
  created.queues.push(name);
  if (options.exchange) {
    await ch.assertExchange(name, 'direct', { durable: true });
    created.exchanges.push(name);
    await ch.bindQueue(name, name, name);
  }
  return name;
}

async function drain(name: string, expected: number, timeoutMs = 10_000): Promise<ReturnType<typeof decodeRabbitMqMessage>[]> {
  const out: ReturnType<typeof decodeRabbitMqMessage>[] = [];
  const deadline = Date.now() + timeoutMs;
  while (out.length < expected && Date.now() < deadline) {
    const msg = await (await adminChannel()).get(name, { noAck: true });
    if (msg === false) await sleep(20);
    else out.push(decodeRabbitMqMessage(msg));
  }
  return out;
}

function transport(options: Partial<RabbitMqTransportOptions> = {}): RabbitMqTransport {
  const t = new RabbitMqTransport({ url: AMQP_URL, reconnectInitialDelayMs: 100, reconnectMaxDelayMs: 500, ...options });
  transports.push(t);
  return t;
}

function event(destination: string, key = 'Item:1', payload: unknown = { n: 1 }): OutboxEvent {
  return {
    id: uuidv7(),
    type: 'ItemChanged',
    aggregateType: 'Item',
    aggregateId: key.slice(5),
    key,
    destination,
    payload,
    headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' },
    occurredAt: new Date('2025-01-02T03:04:05.678Z'),
    version: 7,
  };
}

const signal = (): AbortSignal => AbortSignal.timeout(30_000);

function failure(o: PublishOutcome | undefined, kind: 'retriable' | 'permanent' | 'destination-down', text: RegExp): void {
  assert.ok(o && !o.ok, 'expected a failure');
  assert.equal(o.error.kind, kind, o.error.message);
  assert.match(o.error.message, text);
  assert.doesNotMatch(o.error.message, /guest:guest|password/);
}

async function rabbitmqctl(...args: string[]): Promise<string> {
  return (await run('rabbitmqctl', args)).stdout.trim();
}

describe('RabbitMqTransport against RabbitMQ', { timeout: 300_000 }, () => {
  before(async () => {
    unlock = await lockBroker();
  });
  after(async () => {
    await Promise.allSettled(transports.map((t) => t.close()));
    try {
      const ch = await adminChannel();
      for (const q of created.queues) await ch.deleteQueue(q);
      for (const x of created.exchanges) await ch.deleteExchange(x);
      await admin?.close();
    } finally {
      await unlock();
    }
  });

  it('sends a persistent message: payload as JSON body, envelope in properties and headers', async () => {
    const q = await queue();
    const t = transport();
    await t.start();
    const e = event(q);
    assert.deepEqual(await t.publish([e], signal()), [{ ok: true }]);
    const msg = await (await adminChannel()).get(q, { noAck: true });
    assert.ok(msg);
    assert.equal(msg.properties.deliveryMode, 2);
    assert.equal(msg.properties.messageId, e.id);
    assert.equal(msg.properties.type, 'ItemChanged');
    assert.equal(msg.properties.contentType, 'application/json');
    assert.equal(msg.properties.timestamp, Math.floor(e.occurredAt.getTime() / 1000));
    assert.equal(msg.content.toString(), '{"n":1}');
    const h = msg.properties.headers!;
    assert.equal(h.traceparent, e.headers.traceparent);
    assert.equal(h['txbox-key'], 'Item:1');
    const decoded = decodeRabbitMqMessage(msg);
    assert.ok(decoded.ok);
    assert.deepEqual(decoded.event, e);
    // An event header that would forge txbox-* or add routing keys (CC, BCC) is refused, naming it; nothing is sent.
    for (const name of ['txbox-key', 'CC', 'BCC']) {
      const [refused] = await t.publish([{ ...event(q), headers: { [name]: 'forged' } }], signal());
      failure(refused, 'permanent', new RegExp(`event header "${name}" .*rename it`));
    }
    assert.equal(await (await adminChannel()).get(q, { noAck: true }), false, 'nothing was sent for the refused events');
  });

  it('keeps many events in flight: 5000 events of 5000 keys in one call, confirmed and queued in call order', async () => {
    const q = await queue({ exchange: true });
    const t = transport({ destinations: { [q]: { exchange: q } } });
    const events = Array.from({ length: 5000 }, (_, i) => event(q, `Item:${i}`, { i }));
    const started = performance.now();
    const outcomes = await t.publish(events, signal()); // no start(): the first publish connects
    const ms = performance.now() - started;
    assert.equal(outcomes.filter((o) => o.ok).length, 5000);
    const got = await drain(q, 5000);
    assert.deepEqual(
      got.map((d) => (d.ok ? d.event.id : d.message)),
      events.map((e) => e.id),
    );
    assert.ok(ms < 10_000, `took ${Math.round(ms)} ms`);
  });

  it('spreads concurrent calls over several channels', async () => {
    const q = await queue();
    const t = transport({ channels: 3 });
    await t.start();
    const calls = await Promise.all(Array.from({ length: 6 }, (_, c) => t.publish(Array.from({ length: 100 }, (_, i) => event(q, `Item:${c}-${i}`)), signal())));
    assert.equal(calls.flat().filter((o) => o.ok).length, 600);
    assert.equal((await drain(q, 600)).length, 600);
  });

  it('an unroutable message (mandatory, basic.return NO_ROUTE) is permanent and names exchange, routing key and destination', async () => {
    const q = await queue({ exchange: true });
    const t = transport({ destinations: { [q]: { exchange: q }, stray: { exchange: q, routingKey: 'nobody.listens' } } });
    await t.start();
    const [lost, fine, nobodyQueue] = await t.publish([event('stray', 'Item:1'), event(q, 'Item:2'), { ...event('no_such_queue_here'), key: 'Item:3' }], signal());
    failure(lost, 'permanent', new RegExp(`unroutable.*NO_ROUTE.*exchange "${q}" routing key "nobody\\.listens" \\(destination "stray"\\)`));
    assert.deepEqual(fine, { ok: true });
    failure(nobodyQueue, 'permanent', /NO_ROUTE.*the default exchange.*declare a queue named "no_such_queue_here"/);
  });

  it('a missing exchange (404) is permanent and names it and the setting; the channel is reopened for the next call', async () => {
    const q = await queue();
    const t = transport({ destinations: { gone: { exchange: `${prefix}_missing` } } });
    const closed: number[] = [];
    t.on('channel-closed', (e) => closed.push(e.code));
    await t.start();
    const [gone, other] = await t.publish([event('gone', 'Item:1'), event(q, 'Item:2')], signal());
    failure(gone, 'permanent', new RegExp(`exchange "${prefix}_missing" does not exist.*404.*destinations\\.gone\\.exchange`));
    assert.ok(other!.ok || other!.error.kind === 'retriable', 'a message caught in the closed channel is retriable');
    assert.deepEqual(closed, [404]);
    assert.deepEqual(await t.publish([event(q)], signal()), [{ ok: true }]);
  });

  it('a refused publish (403 ACCESS_REFUSED, here an internal exchange) is destination-down and names the exchange', async () => {
    const name = `${prefix}_internal`;
    await (await adminChannel()).assertExchange(name, 'direct', { durable: false, internal: true });
    created.exchanges.push(name);
    const t = transport({ exchange: name });
    await t.start();
    const [refused] = await t.publish([event('anything')], signal());
    failure(refused, 'destination-down', new RegExp(`refused publishing to exchange "${name}".*403 ACCESS_REFUSED.*permission.*fix exchange`));
  });

  it("the broker's own max_message_size: a larger body is permanent, then refused before sending", async (ctx) => {
    const env = await rabbitmqctl('eval', 'application:get_env(rabbit, max_message_size).');
    const limit = Number(/\{ok,(\d+)\}/.exec(env)?.[1]);
    if (!(limit > 0 && limit < 200 * 1024 * 1024)) return ctx.skip(`max_message_size is ${env}: too large to send in a test`);
    const q = await queue();
    const t = transport({ maxMessageBytes: RABBITMQ_MAX_MESSAGE_BYTES, confirmTimeoutMs: 60_000 });
    const closed: string[] = [];
    t.on('channel-closed', (e) => closed.push(e.reason));
    await t.start();
    const [big, small] = await t.publish([event(q, 'Item:1', 'x'.repeat(limit)), event(q, 'Item:2')], signal());
    failure(big, 'permanent', new RegExp(`too large.*over the limit of ${limit} bytes.*max_message_size`));
    assert.ok(small!.ok || small!.error.kind === 'retriable', 'the other message of the call is not parked');
    assert.equal(closed.length, 1);
    assert.match(closed[0]!, /PRECONDITION_FAILED - message size \d+ is larger than configured max size/);
    const [again, fine] = await t.publish([event(q, 'Item:1', 'x'.repeat(limit)), event(q, 'Item:3')], signal());
    failure(again, 'permanent', /too large/);
    assert.deepEqual(fine, { ok: true });
    assert.equal(closed.length, 1, 'the learned limit refuses the body before it reaches the broker');
  });

  it('assertExchanges declares the exchanges at start; a type clash is a ConfigError naming exchangeType', async () => {
    const name = `${prefix}_declared`;
    const t = transport({ exchange: name, assertExchanges: true, exchangeType: 'fanout' });
    await t.start();
    created.exchanges.push(name);
    await (await adminChannel()).checkExchange(name);
    const clash = transport({ exchange: name, assertExchanges: true, exchangeType: 'topic' });
    await assert.rejects(clash.start(), (e: unknown) => e instanceof ConfigError && e.field === 'exchangeType' && e.message.includes(name));
  });

  it('close() waits for outstanding confirms; publish after close is retriable; start() reopens', async () => {
    const q = await queue();
    const t = transport();
    await t.start();
    const pending = t.publish(
      Array.from({ length: 500 }, (_, i) => event(q, `Item:${i}`)),
      signal(),
    );
    await t.close();
    assert.equal((await pending).filter((o) => o.ok).length, 500, 'every event of the call was confirmed before close resolved');
    failure((await t.publish([event(q)], signal()))[0], 'retriable', /closed; call start\(\)/);
    await t.start();
    assert.deepEqual(await t.publish([event(q)], signal()), [{ ok: true }]);
  });

  it('while the broker is stopped, publishes fail fast as destination-down (the relay pauses the destination; nothing uses up attempts); after it is back, they succeed with no help', async () => {
    const q = await queue();
    const t = transport();
    let reconnected = false;
    let disconnected = false;
    t.on('disconnected', () => (disconnected = true));
    t.on('connected', (e) => (reconnected ||= e.reconnected));
    await t.start();
    assert.deepEqual(await t.publish([event(q)], signal()), [{ ok: true }]);
    try {
      await rabbitmqctl('stop_app');
      await waitFor('the transport to notice', () => disconnected, 10_000);
      for (let i = 0; i < 3; i++) {
        const started = performance.now();
        failure((await t.publish([event(q)], signal()))[0], 'destination-down', /not connected to RabbitMQ at amqp:\/\/127\.0\.0\.1:5672\/: reconnecting/);
        assert.ok(performance.now() - started < 100, 'fails fast instead of hanging');
        await sleep(300);
      }
    } finally {
      await rabbitmqctl('start_app');
    }
    await waitFor('the transport to reconnect', () => reconnected, 60_000);
    assert.deepEqual(await t.publish([event(q)], signal()), [{ ok: true }]);
    assert.equal((await drain(q, 2)).length, 2, 'the durable queue and the persistent message survived');
  });

  it('a resource alarm (connection.blocked) fails publishes fast as destination-down until it clears', async () => {
    const q = await queue();
    const t = transport();
    const blocked: string[] = [];
    let unblocked = false;
    t.on('blocked', (e) => blocked.push(e.reason));
    t.on('unblocked', () => (unblocked = true));
    await t.start();
    const watermark = await rabbitmqctl('eval', 'vm_memory_monitor:get_vm_memory_high_watermark().');
    const absolute = /\{absolute,(\d+)\}/.exec(watermark);
    const restore = absolute ? ['set_vm_memory_high_watermark', 'absolute', absolute[1]!] : ['set_vm_memory_high_watermark', watermark];
    let first: PublishOutcome | undefined;
    try {
      await rabbitmqctl('set_vm_memory_high_watermark', 'absolute', '1');
      // The broker blocks a connection when it next publishes after the alarm was raised.
      const deadline = Date.now() + 30_000;
      while (Date.now() < deadline && (first === undefined || first.ok)) {
        [first] = await t.publish([event(q)], signal());
        if (first!.ok) await sleep(200);
      }
      failure(first, 'destination-down', /connection\.blocked: low on memory.*may still arrive/);
      const started = performance.now();
      failure((await t.publish([event(q)], signal()))[0], 'destination-down', /blocks publishing \(connection\.blocked/);
      assert.ok(performance.now() - started < 100, 'fails fast while blocked');
      assert.deepEqual(blocked, ['low on memory']);
    } finally {
      await rabbitmqctl(...restore);
    }
    await waitFor('the alarm to clear', () => unblocked, 30_000);
    assert.deepEqual(await t.publish([event(q)], signal()), [{ ok: true }]);
  });
});
