/**
 * PubSubTransport against Google's Pub/Sub emulator (skipped with a message
 * when it is not installed): after a failed publish the client stops the
 * ordering key, and the transport resumes it, so that the key's next publish
 * goes out; a missing topic named in `topics` fails start() naming it; the
 * envelope arrives as attributes with the key as ordering key.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { Message, PubSub } from '@google-cloud/pubsub';
import { ConfigError, uuidv7, type OutboxEvent } from 'txbox';
import { parsePubSubMessage, PubSubTransport } from 'txbox/pubsub';
import { adminClient, EMULATOR_HOST, emulatorSkip, PROJECT } from '../helpers/pubsub.ts';
import { waitFor } from '../helpers/wait.ts';
import { startTcpProxy } from '../helpers/tcp-proxy.ts';

const skip = await emulatorSkip();
const run = randomBytes(4).toString('hex');
let admin: PubSub;
const topicNames: string[] = [];

const ev = (destination: string, key: string, version: number): OutboxEvent => ({
  id: uuidv7(),
  type: 'Changed',
  aggregateType: 'Item',
  aggregateId: key,
  key: `Item:${key}`,
  destination,
  payload: { version },
  headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' },
  occurredAt: new Date(),
  version,
});

describe('PubSubTransport on the Pub/Sub emulator', { skip }, () => {
  before(() => {
    admin = adminClient();
  });
  after(async () => {
    for (const name of topicNames) {
      const [subs] = await admin.topic(name).getSubscriptions().catch(() => [[]]);
      for (const s of subs) await s.delete().catch(() => {});
      await admin.topic(name).delete().catch(() => {});
    }
    await admin.close();
  });

  it('a Pub/Sub that answers nothing (connection open, a black hole) is destination-down after publishTimeoutMs', async () => {
    const destination = `pt-${run}-silent`;
    topicNames.push(destination);
    await admin.createTopic(destination);
    const [host, port] = EMULATOR_HOST.split(':') as [string, string];
    const proxy = await startTcpProxy(Number(port), host);
    const transport = new PubSubTransport({ projectId: PROJECT, emulatorHost: `127.0.0.1:${proxy.port}`, publishTimeoutMs: 1000 });
    await transport.start();
    try {
      const [ok] = await transport.publish([ev(destination, 's', 1)], AbortSignal.timeout(10_000));
      assert.ok(ok?.ok, JSON.stringify(ok));
      proxy.hold();
      proxy.silence();
      const [silent] = await transport.publish([ev(destination, 's', 2)], AbortSignal.timeout(10_000));
      // Nothing about the event: the relay pauses the destination instead of spending its attempts.
      assert.ok(silent && !silent.ok && silent.error.kind === 'destination-down', JSON.stringify(silent));
    } finally {
      proxy.release();
      await transport.close();
      await proxy.close();
    }
  });

  it('resumes an ordering key after a failed publish: the key publishes again, in order', async () => {
    const destination = `pt-${run}-late`;
    topicNames.push(destination);
    const transport = new PubSubTransport({ projectId: PROJECT, emulatorHost: EMULATOR_HOST, publishTimeoutMs: 5000 });
    await transport.start();
    try {
      // The topic does not exist yet: the publish fails, and the client stops key Item:a on this topic.
      const first = ev(destination, 'a', 1);
      const [failed] = await transport.publish([first], AbortSignal.timeout(10_000));
      assert.ok(failed && !failed.ok && failed.error.kind === 'permanent', JSON.stringify(failed));
      assert.match(failed.error.message, new RegExp(`topic ${destination} \\(destination ${destination}\\).*does not exist`));
      const [topic] = await admin.createTopic(destination);
      const [sub] = await topic.createSubscription(`${destination}-read`, { enableMessageOrdering: true });
      const got: Message[] = [];
      sub.on('message', (m: Message) => {
        got.push(m);
        m.ack();
      });
      // The relay's retry of the key, and the key's next event, in one call.
      const retry = [first, ev(destination, 'a', 2)];
      const outcomes = await transport.publish(retry, AbortSignal.timeout(10_000));
      assert.deepEqual(outcomes.map((o) => o.ok), [true, true], JSON.stringify(outcomes));
      await waitFor('both messages', () => got.length === 2);
      await sub.close();
      const events = got.map((m) => parsePubSubMessage(m));
      assert.deepEqual(events.map((e) => e.ok && e.event.version), [1, 2]);
      assert.equal(got[0]!.orderingKey, 'Item:a');
      assert.equal(got[0]!.attributes.traceparent, first.headers.traceparent);
    } finally {
      await transport.close();
    }
  });

  it('start() names a topic in `topics` that does not exist', async () => {
    const transport = new PubSubTransport({ projectId: PROJECT, emulatorHost: EMULATOR_HOST, topics: { orders: `pt-${run}-missing` } });
    await assert.rejects(transport.start(), (err: unknown) => err instanceof ConfigError && err.field === 'topics.orders' && /does not exist/.test(err.message));
    await transport.close();
  });
});
