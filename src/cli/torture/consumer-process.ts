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

const settings = JSON.parse(process.env.TXBOX_TORTURE_CONSUMER ?? 'null') as ConsumerSettings | null;
if (!settings) throw new Error('consumer-process.ts is started by txbox torture --inbox (TXBOX_TORTURE_CONSUMER is missing)');
const { schema, transport } = settings;
const url = new URL(settings.databaseUrl);
url.searchParams.set('application_name', `txbox-torture-${settings.run}-c${settings.slot}`);
const connection = pgConnection({ connectionString: url.toString(), maxConnections: 8 });
const inbox = createInbox({ store: new PostgresInboxStore({ connection, schema }), consumer: 'torture', retry: { baseDelayMs: 50, maxDelayMs: 1000 } });

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
    group: `torture-${settings.run}`,
    consumer: `c${settings.slot}`,
    claimIdleMs: 3000,
    blockMs: 500,
    inbox,
  });
  await consumer.start();
  stop = () => consumer.stop();
} else if (transport.type === 'nats') {
  const { NatsConsumer } = await import('../../transports/nats/index.ts');
  const streams = transport.streams as Record<string, string>;
  const consumer = new NatsConsumer({ servers: transport.servers as string, stream: streams.orders!, durable: `torture-${settings.run}`, inbox, ackWaitMs: 3000, deadLetterSubject: null });
  await consumer.start();
  stop = () => consumer.stop();
} else {
  throw new Error(`txbox torture --inbox: no consumer process for transport ${transport.type}`);
}
process.once('SIGTERM', () => {
  void stop()
    .then(() => connection.close())
    .then(() => process.exit(0));
});
process.stdout.write('ready\n');
