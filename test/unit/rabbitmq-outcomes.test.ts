/**
 * Error classification of the RabbitMQ transport, without a broker: the
 * internal classifier, the confirm channel (returns, nacks, channel closes)
 * against a fake amqplib channel, and a publish call's timeout and abort.
 * The integration tests check the same against the real broker.
 */
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { describe, it } from 'node:test';
import { ConfigError, type OutboxEvent, type PublishOutcome } from 'txbox';
import { resolveRabbitMqTransportOptions } from 'txbox/rabbitmq';
import { RabbitMqConfirmChannel, type OutgoingMessage } from '../../src/transports/rabbitmq/rabbitmq-confirm-channel.ts';
import { channelClosedOutcome, closeReason, connectError } from '../../src/transports/rabbitmq/rabbitmq-outcomes.ts';
import { PublishCall } from '../../src/transports/rabbitmq/rabbitmq-publish-call.ts';

function serverClose(code: number, name: string, text: string): Error {
  return Object.assign(new Error(`Channel closed by server: ${code} (${name}) with message "${text}"`), { code, classId: 60, methodId: 40 });
}

function expectFailure(o: PublishOutcome | undefined, kind: 'retriable' | 'permanent' | 'destination-down', text: RegExp): void {
  assert.ok(o && !o.ok, 'expected a failure');
  assert.equal(o.error.kind, kind, o.error.message);
  assert.match(o.error.message, text);
}

const target = { destination: 'orders', exchange: 'orders-x', routingKey: 'order.created', bytes: 100, setting: 'destinations.orders.exchange' };

describe('channelClosedOutcome', () => {
  it('404 on the message’s own exchange is permanent and names it and the setting; on another, retriable', () => {
    const reason = closeReason(serverClose(404, 'NOT-FOUND', "NOT_FOUND - no exchange 'orders-x' in vhost '/'"));
    assert.deepEqual(reason, { code: 404, text: "NOT_FOUND - no exchange 'orders-x' in vhost '/'" });
    expectFailure(channelClosedOutcome(reason, target, ''), 'permanent', /exchange "orders-x" does not exist .*destinations\.orders\.exchange/);
    expectFailure(channelClosedOutcome(reason, { ...target, exchange: 'other' }, ''), 'retriable', /another message in flight/);
  });

  it('403 ACCESS_REFUSED on the exchange is destination-down and names the permission to grant', () => {
    const reason = closeReason(serverClose(403, 'ACCESS-REFUSED', "ACCESS_REFUSED - access to exchange 'orders-x' in vhost '/' refused for user 'relay'"));
    expectFailure(channelClosedOutcome(reason, target, ''), 'destination-down', /refused publishing to exchange "orders-x".*user in url write permission/);
  });

  it('406 message size: permanent for bodies over the broker limit, retriable for the rest', () => {
    const reason = closeReason(serverClose(406, 'PRECONDITION-FAILED', 'PRECONDITION_FAILED - message size 2000 is larger than configured max size 1000'));
    expectFailure(channelClosedOutcome(reason, { ...target, bytes: 2000 }, ''), 'permanent', /too large.*2000 bytes.*limit of 1000.*max_message_size/);
    expectFailure(channelClosedOutcome(reason, { ...target, bytes: 10 }, ''), 'retriable', /406/);
  });

  it('a lost connection or a forced close is retriable', () => {
    expectFailure(channelClosedOutcome(null, target, 'connection lost (write ECONNRESET)'), 'retriable', /ECONNRESET/);
    const forced = closeReason(serverClose(320, 'CONNECTION-FORCED', "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"));
    expectFailure(channelClosedOutcome(forced, target, ''), 'retriable', /shutting down/);
    assert.equal(closeReason(new Error('channel closed')), null);
  });
});

describe('connectError', () => {
  const check = (err: Error, text: RegExp): void => {
    const e = connectError(err, 'amqp://rabbit:5672/', 'relay');
    assert.ok(e instanceof ConfigError);
    assert.equal(e.field, 'url');
    assert.match(e.message, text);
    assert.equal(e.cause, err);
  };
  it('names url and says what to fix, never with the password', () => {
    check(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' }), /^url: cannot connect to RabbitMQ at amqp:\/\/rabbit:5672\/ \(ECONNREFUSED.*host and port/);
    check(new Error('connect ETIMEDOUT'), /ETIMEDOUT/);
    check(
      new Error('Handshake terminated by server: 403 (ACCESS-REFUSED) with message "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN."'),
      /refused the login of user "relay".*user name and password in url/,
    );
    check(new Error('Expected ConnectionOpenOk; got <ConnectionClose channel:0>'), /virtual host.*vhost path of url/);
    check(new Error('getaddrinfo ENOTFOUND amqp://relay:hunter2@rabbit'), /^(?!.*hunter2)/s);
  });
});

/** A stand-in for amqplib's ConfirmChannel that records publishes and lets the test answer them. */
class FakeChannel extends EventEmitter {
  readonly sent: { messageId: string; exchange: string; routingKey: string; cb: (err: unknown) => void }[] = [];
  publish(exchange: string, routingKey: string, _content: Buffer, props: { messageId: string }, cb: (err: unknown) => void): boolean {
    this.sent.push({ messageId: props.messageId, exchange, routingKey, cb });
    return true;
  }
  returns(i: number): void {
    const s = this.sent[i]!;
    this.emit('return', { content: Buffer.alloc(0), properties: { messageId: s.messageId }, fields: { replyCode: 312, replyText: 'NO_ROUTE', exchange: s.exchange, routingKey: s.routingKey } });
  }
  closeByServer(err: Error): void {
    this.emit('error', err);
    for (const s of this.sent) s.cb(new Error('channel closed'));
    this.emit('close');
  }
  async close(): Promise<void> {}
}

async function openFake(): Promise<{ fake: FakeChannel; channel: RabbitMqConfirmChannel; limits: number[] }> {
  const fake = new FakeChannel();
  const limits: number[] = [];
  const model = { createConfirmChannel: async () => fake } as never;
  const channel = await RabbitMqConfirmChannel.open(model, { lostReason: () => 'connection lost', closedByBroker: () => {}, brokerLimit: (b) => limits.push(b) });
  return { fake, channel, limits };
}

function message(id: string, exchange = 'orders-x', bytes = 10): OutgoingMessage {
  return { destination: 'orders', exchange, routingKey: 'order.created', setting: 'exchange', content: Buffer.alloc(bytes), properties: { messageId: id } };
}

describe('RabbitMqConfirmChannel', () => {
  it('a return before the ack makes that message permanent, matched by message id, exchange and routing key', async () => {
    const { fake, channel } = await openFake();
    const outcomes: PublishOutcome[] = [];
    for (const id of ['a', 'b', 'c']) channel.publish(message(id), (o) => outcomes.push(o));
    fake.returns(1);
    fake.sent[1]!.cb(null);
    fake.sent[0]!.cb(null);
    fake.sent[2]!.cb(new Error('message nacked'));
    assert.deepEqual(outcomes[1], { ok: true }); // a
    expectFailure(outcomes[0], 'permanent', /unroutable.*312 NO_ROUTE.*exchange "orders-x" routing key "order\.created"/); // b
    expectFailure(outcomes[2], 'retriable', /nacked/);
    assert.equal(channel.inFlight, 0);
  });

  it('a server close settles every waiting message by the reason, learns the broker limit, and marks the channel closed', async () => {
    const { fake, channel, limits } = await openFake();
    const outcomes = new Map<string, PublishOutcome>();
    channel.publish(message('big', 'orders-x', 5000), (o) => outcomes.set('big', o));
    channel.publish(message('small'), (o) => outcomes.set('small', o));
    fake.closeByServer(serverClose(406, 'PRECONDITION-FAILED', 'PRECONDITION_FAILED - message size 5000 is larger than configured max size 4096'));
    expectFailure(outcomes.get('big'), 'permanent', /too large/);
    expectFailure(outcomes.get('small'), 'retriable', /406/);
    assert.deepEqual(limits, [4096]);
    assert.equal(channel.closed, true);
    let after: PublishOutcome | undefined;
    channel.publish(message('late'), (o) => (after = o));
    expectFailure(after, 'retriable', /channel closed/);
  });

  it('a channel closed without a reason of its own (connection lost) is retriable', async () => {
    const { fake, channel } = await openFake();
    const outcome = new Promise<PublishOutcome>((resolve) => channel.publish(message('a'), resolve));
    for (const s of fake.sent) s.cb(new Error('channel closed'));
    fake.emit('close');
    expectFailure(await outcome, 'retriable', /connection lost/);
  });
});

describe('PublishCall', () => {
  const options = resolveRabbitMqTransportOptions({
    url: 'amqp://127.0.0.1',
    exchange: 'events',
    confirmTimeoutMs: 50,
    maxMessageBytes: 64,
    destinations: { bad: { routingKey: () => 'k'.repeat(300) }, throws: { routingKey: () => { throw new Error('no type'); } } },
  });
  const event = (destination: string, payload: unknown = {}): OutboxEvent => ({
    id: `id-${destination}`, type: 'T', aggregateType: 'A', aggregateId: '1', key: `A:${destination}`, destination, payload, headers: {}, occurredAt: new Date(), version: null,
  });
  const silent = { publish() {} } as unknown as RabbitMqConfirmChannel;
  const ctx = (channel: () => Promise<RabbitMqConfirmChannel>) => ({ options, bodyLimit: () => ({ bytes: options.maxMessageBytes, source: 'maxMessageBytes' }), channel });

  it('settles what cannot be sent at once and the rest as destination-down when no confirm comes within confirmTimeoutMs', async () => {
    const started = performance.now();
    const [big, badKey, throws, silentOne] = await new PublishCall(
      ctx(async () => silent),
      [event('orders', { pad: 'x'.repeat(100) }), event('bad'), event('throws'), event('orders')],
      new AbortController().signal,
    ).run();
    expectFailure(big, 'permanent', /too large.*limit of 64 bytes \(maxMessageBytes\).*exchange "events" routing key "orders"/);
    expectFailure(badKey, 'permanent', /longer than 255 bytes.*destinations\.bad\.routingKey/);
    expectFailure(throws, 'permanent', /destinations\.throws\.routingKey threw: no type/);
    expectFailure(silentOne, 'destination-down', /ETIMEDOUT.*50 ms \(confirmTimeoutMs\)/);
    assert.ok(performance.now() - started < 1000);
  });

  it('an aborted signal gives retriable outcomes; a channel that cannot open (connection down) destination-down ones', async () => {
    const ac = new AbortController();
    const call = new PublishCall(ctx(async () => silent), [event('orders')], ac.signal).run();
    ac.abort();
    expectFailure((await call)[0], 'retriable', /aborted/);
    const [noChannel] = await new PublishCall(ctx(() => Promise.reject(new Error('not connected'))), [event('orders')], new AbortController().signal).run();
    expectFailure(noChannel, 'destination-down', /cannot open a confirm channel.*not connected/);
  });
});
