/**
 * The SQS transport through the transport conformance suite, on a FIFO queue
 * and on a standard queue, against a private ElasticMQ (scripts/sqs/up.sh on a
 * free port) so that the restart test can kill it.
 *
 * The transport talks to ElasticMQ through a TCP proxy. ElasticMQ keeps
 * queues and messages in memory, so a restart empties it: restart() first
 * cuts the proxy (the relay meets refused connections), reads every message
 * the server holds, kills the server with SIGKILL, starts it again, creates
 * the queues again and reopens the proxy. The read-back log thus holds
 * exactly what the server acknowledged; requests cut mid-flight are retried by
 * the relay (duplicates allowed).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { DeleteMessageBatchCommand, ReceiveMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { decodeSqsMessage, SqsTransport } from 'txbox/sqs';
import type { Delivered } from 'txbox/testing';
import { runTransportConformance } from 'txbox/testing/conformance';
import { DATABASE_URL } from '../helpers/databases.ts';
import { freePort } from '../helpers/ports.ts';
import { createQueue, CuttableProxy, elasticMq, queueUrl, sqsClient, TEST_CREDENTIALS, uniqueQueueName } from '../helpers/sqs.ts';

const port = await freePort();
const server = elasticMq(port);
server.up();
const proxy = new CuttableProxy(port);
await proxy.open();
let direct: SQSClient = sqsClient(`http://127.0.0.1:${port}`);

for (const fifo of [true, false]) {
  const logs = new Map<string, { name: string; delivered: Delivered[] }>();

  async function drain(destination: string, rounds = Infinity): Promise<number> {
    const log = logs.get(destination)!;
    let got = 0;
    for (let i = 0; i < rounds; i++) {
      const { Messages = [] } = await direct.send(
        new ReceiveMessageCommand({ QueueUrl: queueUrl(log.name, port), MaxNumberOfMessages: 10, MessageAttributeNames: ['All'], VisibilityTimeout: 60 }),
      );
      if (Messages.length === 0) break;
      for (const m of Messages) {
        const decoded = decodeSqsMessage(m, destination);
        if (!decoded.ok) throw new Error(`message ${m.MessageId} of ${destination}: ${decoded.message}`);
        log.delivered.push({ id: decoded.event.id, key: decoded.event.key });
      }
      got += Messages.length;
      await direct.send(
        new DeleteMessageBatchCommand({ QueueUrl: queueUrl(log.name, port), Entries: Messages.map((m, n) => ({ Id: `m${n}`, ReceiptHandle: m.ReceiptHandle! })) }),
      );
    }
    return got;
  }

  runTransportConformance({
    name: fifo ? 'sqs-fifo' : 'sqs-standard',
    databaseUrl: DATABASE_URL,
    events: 3000,
    keys: 100,
    broker: {
      dedup: fifo ? 'broker' : 'none',
      oversizeBytes: 300_000,
      async createDestination() {
        const name = uniqueQueueName('txbox-conf', fifo);
        await createQueue(direct, name, {}, port);
        const destination = `d-${name}`;
        logs.set(destination, { name, delivered: [] });
        return destination;
      },
      createTransport(destinations) {
        const queues: Record<string, string> = {};
        for (const d of destinations) {
          const log = logs.get(d);
          if (log) queues[d] = queueUrl(log.name, proxy.port);
        }
        return new SqsTransport({ queues, region: 'us-east-1', endpoint: `http://127.0.0.1:${proxy.port}`, credentials: TEST_CREDENTIALS, requestTimeoutMs: 5000 });
      },
      async readBack(destination, expected, timeoutMs) {
        const log = logs.get(destination)!;
        const deadline = Date.now() + timeoutMs;
        for (;;) {
          const got = await drain(destination, 50).catch(() => 0); // the server may be restarting
          if (new Set(log.delivered.map((d) => d.id)).size >= expected || Date.now() > deadline) return [...log.delivered];
          if (got === 0) await sleep(50);
        }
      },
      async restart() {
        await proxy.cut();
        try {
          await sleep(300); // requests already inside the server finish
          for (const destination of logs.keys()) await drain(destination);
          server.kill();
          server.up();
          // The old client's kept-alive sockets went with the server.
          direct.destroy();
          direct = sqsClient(`http://127.0.0.1:${port}`);
          for (const { name } of logs.values()) await createQueue(direct, name, {}, port);
          await sleep(1000); // the relay meets refused connections meanwhile
        } finally {
          await proxy.open();
        }
      },
      async unroutableDestination() {
        return `nowhere-${uniqueQueueName('q', false)}`;
      },
      misconfigured(destinations) {
        const queues = Object.fromEntries(destinations.map((d) => [d, queueUrl(logs.get(d)?.name ?? 'x', 1)]));
        return [{ transport: new SqsTransport({ queues, region: 'us-east-1', endpoint: 'http://127.0.0.1:1', credentials: TEST_CREDENTIALS, requestTimeoutMs: 3000 }), setting: /127\.0\.0\.1:1\b.*nothing answers at the endpoint/ }];
      },
      async close() {
        if (fifo) return;
        await proxy.cut();
        direct.destroy();
        server.down();
      },
    },
  });
}
