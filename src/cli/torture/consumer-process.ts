/**
 * A consumer service process of `txbox torture --inbox`: txbox's consumer
 * for the run's transport feeding an inbox on PostgreSQL, whose handler
 * applies each event to a version-guarded projection (`torture_view`) and
 * records it in `torture_applied`, both in the inbox's transaction. On
 * SIGUSR2 it arms a crash: at the next event it kills itself with SIGKILL,
 * either in the middle of the handler (before the commit) or right after the
 * commit (before the ack). Started by consumer-fleet.ts; prints `ready`.
 */
import { createInbox } from '../../inbox/inbox.ts';
import { pgConnection } from '../../stores/postgres/pg-connection.ts';
import { PostgresInboxStore } from '../../stores/postgres/postgres-inbox-store.ts';
import { applyVersioned } from '../../stores/postgres/postgres-projection.ts';
import { DESTINATIONS } from './producers.ts';
import type { ConsumerSettings } from './consumer-fleet.ts';
import { bindConsumerQueue, consumerGroupOf, consumerQueueOf, consumerSubscriptionOf, ensureConsumerDeadQueue, ensureConsumerSubscription } from './consumer-broker.ts';

const settings = JSON.parse(process.env.TXBOX_TORTURE_CONSUMER ?? 'null') as ConsumerSettings | null;
if (!settings) throw new Error('consumer-process.ts is started by txbox torture --inbox (TXBOX_TORTURE_CONSUMER is missing)');
const { schema, transport } = settings;
const url = new URL(settings.databaseUrl);
url.searchParams.set('application_name', `txbox-torture-${settings.run}-c${settings.slot}`);
const connection = pgConnection({ connectionString: url.toString(), maxConnections: 8 });
// A held version whose predecessor committed in a consumer killed before it released the hold waits for the periodic
// re-check: every 3 s here rather than the default 30 s, so that a run's drain does not wait on it.
const inbox = createInbox({ store: new PostgresInboxStore({ connection, schema }), consumer: 'torture', retry: { baseDelayMs: 50, maxDelayMs: 1000 }, heldRecheckIntervalMs: 3000 });

let crash: 'mid-handler' | 'after-commit' | undefined;
process.on('SIGUSR2', () => {
  crash = Math.random() < 0.5 ? 'mid-handler' : 'after-commit';
});
for (const destination of DESTINATIONS) {
  inbox.on(`Torture.${destination}`, async (event, tx) => {
    const { key, version } = event.payload as { key: string; version: number };
    await applyVersioned(tx, { table: `${schema}.torture_view`, id: { key }, version, values: { event_id: event.id }, onGap: 'hold' });
    await tx.query(`INSERT INTO "${schema}".torture_applied (event_id, key, version) VALUES ($1, $2, $3)`, [event.id, key, version]);
    if (crash === 'mid-handler') process.kill(process.pid, 'SIGKILL');
  });
}
inbox.events.on('processed', () => {
  if (crash === 'after-commit') process.kill(process.pid, 'SIGKILL');
});

// What this process saw, on stdout as `stats {json}` every second (and at SIGTERM): the fleet sums them over the run's
// processes for the report, so that a drain that times out says whether events went dead, held or unseen.
const counts = { processed: 0, duplicate: 0, held: 0, retried: 0, dead: 0 };
inbox.events.on('processed', () => counts.processed++);
inbox.events.on('duplicate', () => counts.duplicate++);
inbox.events.on('held', () => counts.held++);
inbox.events.on('failed', (e) => (e.dead ? counts.dead++ : counts.retried++));
let brokerStats: () => Record<string, number> = () => ({});
const reportStats = (): void => void process.stdout.write(`stats ${JSON.stringify({ inbox: counts, broker: brokerStats() })}\n`);
setInterval(reportStats, 1000).unref();

let stop: () => Promise<void>;
if (transport.type === 'http') {
  const { createWebhookConsumer } = await import('../../transports/http/index.ts');
  const server = await createWebhookConsumer({ inbox, secret: settings.secret! }).listen({ port: settings.port! });
  stop = server.close;
} else if (transport.type === 'redis') {
  const { RedisConsumer } = await import('../../transports/redis/index.ts');
  const prefix = String(transport.streamPrefix);
  const consumer = new RedisConsumer({
    url: String(transport.url),
    streams: Object.fromEntries(DESTINATIONS.map((d) => [d, prefix + d])),
    group: consumerGroupOf(settings.run),
    consumer: `c${settings.slot}`,
    claimIdleMs: 3000,
    blockMs: 500,
    maxDeliveries: settings.maxDeliveries,
    inbox,
  });
  await consumer.start();
  brokerStats = () => ({ ...consumer.stats });
  stop = () => consumer.stop();
} else if (transport.type === 'nats') {
  const { NatsConsumer } = await import('../../transports/nats/index.ts');
  const streams = transport.streams as Record<string, string>;
  const consumer = new NatsConsumer({ servers: transport.servers as string, stream: streams.orders!, durable: consumerGroupOf(settings.run), inbox, ackWaitMs: 3000, maxDeliveries: settings.maxDeliveries, deadLetterSubject: null });
  await consumer.start();
  brokerStats = () => ({ ...consumer.stats });
  stop = () => consumer.stop();
} else if (transport.type === 'kafka') {
  const { KafkaConsumer } = await import('../../transports/kafka/index.ts');
  // Both destinations share the observer's topic; a group of the consumers' own, read from the start.
  // A short session: a consumer killed with SIGKILL holds its partitions until the session expires.
  const consumer = new KafkaConsumer({
    brokers: transport.brokers as string[],
    clientId: `txbox-torture-c${settings.slot}`,
    groupId: consumerGroupOf(settings.run),
    topics: transport.topics as Record<string, string>,
    fromBeginning: true,
    deadLetterTopic: null,
    sessionTimeoutMs: 6000,
    heartbeatIntervalMs: 1000,
    rebalanceTimeoutMs: 10_000,
    stopTimeoutMs: 5000,
    inbox,
  });
  await consumer.start();
  brokerStats = () => ({ ...consumer.stats });
  stop = () => consumer.stop();
} else if (transport.type === 'rabbitmq') {
  const { RabbitMqConsumer } = await import('../../transports/rabbitmq/index.ts');
  // One durable queue of the run, shared by the consumers (competing: the inbox's held versions restore each key's order).
  const consumer = new RabbitMqConsumer({
    url: String(transport.url),
    queues: [consumerQueueOf(transport)],
    assertQueues: true,
    prefetch: 64,
    reconnectInitialDelayMs: 100,
    reconnectMaxDelayMs: 1000,
    connectionName: `txbox torture consumer ${settings.run} c${settings.slot}`,
    stopTimeoutMs: 5000,
    inbox,
  });
  await consumer.start();
  // Bound before `ready`, so before the relays start: nothing published is missed by the queue.
  await bindConsumerQueue(transport);
  brokerStats = () => ({ ...consumer.stats });
  stop = () => consumer.stop();
} else if (transport.type === 'pubsub') {
  const { PubSubConsumer } = await import('../../transports/pubsub/index.ts');
  // A subscription of the consumers' own on the observer's topic, made before `ready` (so before the relays start):
  // every message reaches both. The consumers share it; unordered (consumer-broker.ts says why): the inbox's held
  // versions restore each key's order.
  await ensureConsumerSubscription(transport);
  const consumer = new PubSubConsumer({
    projectId: String(transport.projectId),
    emulatorHost: String(transport.emulatorHost),
    subscription: consumerSubscriptionOf(transport),
    maxMessages: 200,
    stopTimeoutMs: 5000,
    inbox,
  });
  await consumer.start();
  brokerStats = () => ({ ...consumer.stats });
  stop = () => consumer.stop();
} else if (transport.type === 'sqs') {
  const { SqsConsumer } = await import('../../transports/sqs/index.ts');
  // The relays' FIFO queue itself (the observer leaves it to the consumers). A short visibility timeout: the messages a
  // killed consumer held, and the rest of their message groups, come back after 5 s.
  const consumer = new SqsConsumer({
    queueUrl: (transport.queues as Record<string, string>).orders!,
    endpoint: String(transport.endpoint),
    region: String(transport.region),
    credentials: transport.credentials as { accessKeyId: string; secretAccessKey: string },
    deadLetterQueueUrl: await ensureConsumerDeadQueue(transport),
    visibilityTimeoutSeconds: 5,
    waitTimeSeconds: 1,
    stopTimeoutMs: 5000,
    inbox,
  });
  await consumer.start();
  brokerStats = () => ({ ...consumer.stats });
  stop = () => consumer.stop();
} else {
  throw new Error(`txbox torture --inbox: no consumer process for transport ${transport.type}`);
}
process.once('SIGTERM', () => {
  void stop()
    .then(reportStats)
    .then(() => connection.close())
    .then(() => process.exit(0));
});
process.stdout.write('ready\n');
