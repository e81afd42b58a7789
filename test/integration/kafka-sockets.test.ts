/**
 * KafkaConsumer.stop() and KafkaTransport.close() leave no socket open, even
 * when they run while kafkajs is connecting to a broker that accepts the
 * connection and never answers (a broker stuck or restarting): every socket
 * the server saw is closed from the client's side within a second of stop().
 * kafkajs alone can leave such a socket open (its issues #1147 and #1639),
 * which keeps a user's process from exiting.
 */
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, it } from 'node:test';
import { createInbox, type OutboxEvent } from 'txbox';
import { KafkaConsumer, KafkaTransport } from 'txbox/kafka';
import { pgConnection, PostgresInboxStore } from 'txbox/postgres';
import { trackSockets } from '../../src/transports/kafka/kafka-client.ts';
import { waitFor } from '../helpers/wait.ts';

let server: Server;
let port = 0;
const accepted = new Set<Socket>();
let connections = 0;

before(async () => {
  server = createServer((s) => {
    connections++;
    accepted.add(s);
    s.on('close', () => accepted.delete(s));
    s.on('error', () => {});
    // Reads the request and never answers.
    s.resume();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as { port: number }).port;
});

after(async () => {
  for (const s of accepted) s.destroy();
  await new Promise((resolve) => server.close(resolve));
});

it('trackSockets: destroyAll closes every open socket, and a socket asked for afterwards is destroyed at once', async () => {
  const tracked = trackSockets();
  // kafkajs listens to each socket's 'error': destroyAll destroys with an error so that its waiting requests fail.
  const errors: string[] = [];
  const tracker = {
    ...tracked,
    socketFactory: (o: Parameters<typeof tracked.socketFactory>[0]) => tracked.socketFactory(o).on('error', (e) => errors.push(e.message)),
  };
  const before = connections;
  const a = tracker.socketFactory({ host: '127.0.0.1', port, ssl: false as never, onConnect: () => {} });
  const b = tracker.socketFactory({ host: '127.0.0.1', port, ssl: false as never, onConnect: () => {} });
  await waitFor('both connected', () => connections - before === 2, 5_000);
  assert.equal(tracker.destroyAll(), 2);
  assert.ok(a.destroyed && b.destroyed);
  const late = tracker.socketFactory({ host: '127.0.0.1', port, ssl: false as never, onConnect: () => {} });
  assert.ok(late.destroyed);
  await waitFor('each destroyed socket reported its error', () => errors.length === 3, 5_000);
  await waitFor('the server saw every socket close', () => accepted.size === 0, 5_000);
  tracker.reopen();
  const again = tracker.socketFactory({ host: '127.0.0.1', port, ssl: false as never, onConnect: () => {} });
  assert.ok(!again.destroyed);
  assert.equal(tracker.destroyAll(), 1);
});

it('KafkaConsumer.stop() while kafkajs waits on a broker that never answers leaves no socket open', { timeout: 60_000 }, async () => {
  // The inbox is never reached: its pool connects nothing until a query.
  const connection = pgConnection({ connectionString: 'postgres://127.0.0.1:5432/test' });
  after(() => connection.close());
  const inbox = createInbox({ store: new PostgresInboxStore({ connection }), consumer: 'sockets' });
  inbox.on('Changed', async () => {});
  const consumer = new KafkaConsumer({ brokers: [`127.0.0.1:${port}`], groupId: 'sockets', topics: ['t'], inbox, connectionTimeoutMs: 1_000, requestTimeoutMs: 30_000 });
  const before = connections;
  const started = consumer.start().catch((err: unknown) => err);
  await waitFor('the consumer connected to the silent broker', () => connections > before, 10_000);
  await sleep(500);
  await consumer.stop();
  await started;
  await waitFor('every socket closed by the client', () => accepted.size === 0, 2_000);
});

it('KafkaTransport.close() while a publish waits on a broker that never answers leaves no socket open', { timeout: 60_000 }, async () => {
  const transport = new KafkaTransport({ brokers: [`127.0.0.1:${port}`], topics: { items: 'items' }, connectionTimeoutMs: 1_000, requestTimeoutMs: 30_000 });
  const before = connections;
  const event: OutboxEvent = { id: '0190a8f0-0000-7000-8000-000000000001', type: 'Changed', aggregateType: 'Item', aggregateId: 'a', key: 'Item:a', destination: 'items', payload: {}, headers: {}, occurredAt: new Date(), version: 1 };
  const outcome = transport.publish([event], AbortSignal.timeout(2_000));
  await waitFor('the transport connected to the silent broker', () => connections > before, 10_000);
  await outcome;
  await transport.close();
  await waitFor('every socket closed by the client', () => accepted.size === 0, 2_000);
});
