/**
 * The Pub/Sub transport through the transport conformance suite, against
 * Google's Pub/Sub emulator (scripts/pubsub/up.sh; skipped with a message
 * when it is not installed). Each destination gets a topic and an ordered
 * subscription made before publishing, whose messages are collected (and
 * acked) as they arrive. The emulator keeps everything in memory, so a
 * restart would lose what it holds: the suite's broker interruption is an
 * outage instead, a TCP proxy between the transport and the emulator that
 * cuts every connection and refuses new ones for a few seconds.
 */
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import type { Message, Subscription } from '@google-cloud/pubsub';
import { PubSubTransport, PUBSUB_ATTRIBUTE } from 'txbox/pubsub';
import type { Delivered } from 'txbox/testing';
import { runTransportConformance } from 'txbox/testing/conformance';
import { DATABASE_URL } from '../helpers/databases.ts';
import { adminClient, emulatorProxy, emulatorSkip, PROJECT } from '../helpers/pubsub.ts';

const skip = await emulatorSkip();
if (skip) {
  test('Pub/Sub transport conformance', { skip }, () => {});
} else {
  const run = randomBytes(4).toString('hex');
  const admin = adminClient();
  const proxy = await emulatorProxy();
  const received = new Map<string, Delivered[]>();
  const subscriptions: Subscription[] = [];
  let counter = 0;

  runTransportConformance({
    name: 'pubsub',
    databaseUrl: DATABASE_URL,
    events: 5000,
    broker: {
      dedup: 'none',
      // Above Pub/Sub's 10 MB per message.
      oversizeBytes: 10_100_000,
      async createDestination() {
        const destination = `conf-${run}-${++counter}`;
        const [topic] = await admin.createTopic(destination);
        const [subscription] = await topic.createSubscription(`${destination}-read`, { enableMessageOrdering: true, ackDeadlineSeconds: 60 });
        const got: Delivered[] = [];
        received.set(destination, got);
        subscription.on('message', (m: Message) => {
          got.push({ id: m.attributes[PUBSUB_ATTRIBUTE.id] ?? '', key: m.orderingKey ?? '' });
          m.ack();
        });
        subscription.on('error', () => {});
        subscriptions.push(subscription);
        return destination;
      },
      createTransport() {
        return new PubSubTransport({ projectId: PROJECT, emulatorHost: proxy.host, publishTimeoutMs: 5000 });
      },
      async readBack(destination, expected, timeoutMs) {
        const got = received.get(destination) ?? [];
        const deadline = Date.now() + timeoutMs;
        while (got.length < expected && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
        // A moment more: copies beyond `expected` (re-publishes) show up too.
        await new Promise((r) => setTimeout(r, 300));
        return [...got];
      },
      async outage() {
        await proxy.cut(3000);
      },
      async unroutableDestination() {
        return `nowhere-${run}-${++counter}`;
      },
      misconfigured() {
        return [{ transport: new PubSubTransport({ projectId: PROJECT, emulatorHost: '127.0.0.1:1', connectTimeoutMs: 2000 }), setting: /emulatorHost/ }];
      },
      async close() {
        await Promise.all(subscriptions.map((s) => s.close().then(() => s.delete()).catch(() => {})));
        for (const destination of received.keys()) await admin.topic(destination).delete().catch(() => {});
        await admin.close();
        await proxy.close();
      },
    },
  });
}
