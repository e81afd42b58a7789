/**
 * RabbitMqConfirmChannel matches a `basic.return` to its message by message
 * id, exchange and routing key. Two copies of one event in flight on a
 * channel at once (a retry after a confirm timeout) cannot be told apart, and
 * RabbitMQ confirms out of order: a return of the second copy could be
 * pinned on the first, and the second's ack taken for a delivery. So a copy
 * is not sent while another is unconfirmed on the channel. A fake channel
 * (the broker's timing cannot be produced on cue); pure unit.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { PublishOutcome } from 'txbox';
import { RabbitMqConfirmChannel } from '../../src/transports/rabbitmq/rabbitmq-confirm-channel.ts';

it('a second copy of a message still unconfirmed on the channel is not sent (retriable), so a return can never be matched to the wrong copy', async () => {
  const confirms: ((err: unknown) => void)[] = [];
  const fake = Object.assign(new EventEmitter(), {
    publish(_exchange: string, _routingKey: string, _content: Buffer, _properties: unknown, cb: (err: unknown) => void) {
      confirms.push(cb);
      return true;
    },
    close: async () => {},
  });
  const hooks = { lostReason: () => 'lost', closedByBroker: () => {}, brokerLimit: () => {} };
  const channel = await RabbitMqConfirmChannel.open({ createConfirmChannel: async () => fake } as never, hooks);
  const message = { destination: 'orders', exchange: '', routingKey: 'orders', content: Buffer.from('{}'), properties: { messageId: 'E1', mandatory: true }, setting: 'exchange' } as never;
  const outcomes: PublishOutcome[] = [];
  channel.publish(message, (o) => outcomes.push(o)); // copy 1: routed, its confirm slow
  channel.publish(message, (o) => outcomes.push(o)); // copy 2: the relay's retry
  // The broker: the binding is gone, copy 2 (if sent) comes back unroutable, then both are acked, copy 2 first.
  if (confirms.length === 2) {
    fake.emit('return', { fields: { exchange: '', routingKey: 'orders', replyCode: 312, replyText: 'NO_ROUTE' }, properties: { messageId: 'E1' } });
    confirms[1]!(null);
  }
  confirms[0]!(null);
  assert.equal(confirms.length, 1, 'the second copy was not sent');
  assert.equal(outcomes.length, 2);
  const [second, first] = outcomes;
  assert.ok(second && !second.ok && second.error.kind === 'retriable' && /earlier copy .* unconfirmed/.test(second.error.message), JSON.stringify(second));
  assert.deepEqual(first, { ok: true });
  // Once confirmed, the next copy goes out.
  channel.publish(message, (o) => outcomes.push(o));
  assert.equal(confirms.length, 2);
});
