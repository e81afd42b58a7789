/**
 * SQS test helpers: an SDK client for ElasticMQ (scripts/sqs/up.sh, any
 * access key works), unique queue names, a private ElasticMQ process for
 * tests that kill it, and a TCP proxy that a test can cut.
 */
import { execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { homedir } from 'node:os';
import { randomBytes } from 'node:crypto';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { CreateQueueCommand, DeleteQueueCommand, SQSClient } from '@aws-sdk/client-sqs';

export const SQS_PORT = Number(process.env.TXBOX_SQS_PORT ?? 9324);
export const SQS_ENDPOINT = `http://127.0.0.1:${SQS_PORT}`;
export const SQS_ACCOUNT = '000000000000';
export const TEST_CREDENTIALS = { accessKeyId: 'test', secretAccessKey: 'test' };

const SCRIPTS = fileURLToPath(new URL('../../scripts/sqs/', import.meta.url));

export function sqsClient(endpoint = SQS_ENDPOINT): SQSClient {
  return new SQSClient({ region: 'us-east-1', endpoint, credentials: { ...TEST_CREDENTIALS }, maxAttempts: 1 });
}

export function uniqueQueueName(prefix: string, fifo: boolean): string {
  return `${prefix}-${randomBytes(5).toString('hex')}${fifo ? '.fifo' : ''}`;
}

/** Creates a queue; returns its URL on `port` (the server resolves queues by path, so a proxy's port works too). */
export async function createQueue(client: SQSClient, name: string, attributes: Record<string, string> = {}, port = SQS_PORT): Promise<string> {
  const fifo = name.endsWith('.fifo');
  await client.send(new CreateQueueCommand({ QueueName: name, Attributes: { ...(fifo ? { FifoQueue: 'true' } : {}), ...attributes } }));
  return queueUrl(name, port);
}

export function queueUrl(name: string, port = SQS_PORT): string {
  return `http://127.0.0.1:${port}/${SQS_ACCOUNT}/${name}`;
}

export async function deleteQueues(client: SQSClient, urls: readonly string[]): Promise<void> {
  await Promise.allSettled(urls.map((QueueUrl) => client.send(new DeleteQueueCommand({ QueueUrl }))));
}

/** A private ElasticMQ on its own port (for tests that kill it), through scripts/sqs. */
export function elasticMq(port: number): { up(): void; kill(): void; down(): void } {
  const env = { ...process.env, TXBOX_SQS_PORT: String(port) };
  const run = (script: string): void => {
    execFileSync('bash', [SCRIPTS + script], { env, stdio: ['ignore', 'ignore', 'inherit'], timeout: 180_000 });
  };
  const instance = `${process.env.TXBOX_SQS_HOME ?? `${homedir()}/.cache/txbox-sqs`}/server-${port}`;
  return {
    up: () => run('up.sh'),
    kill: () => run('kill.sh'),
    down: () => {
      run('down.sh');
      rmSync(instance, { recursive: true, force: true }); // its config and log; the jars stay cached
    },
  };
}

/** A TCP proxy to 127.0.0.1:`target` that a test can cut (every connection dropped, new ones refused) and reopen on the same port. */
export class CuttableProxy {
  readonly #target: number;
  readonly #sockets = new Set<Socket>();
  #server: Server | null = null;
  port = 0;

  constructor(target: number) {
    this.#target = target;
  }

  async open(): Promise<void> {
    const server = createServer((client) => {
      const upstream = connect({ host: '127.0.0.1', port: this.#target });
      for (const s of [client, upstream]) {
        this.#sockets.add(s);
        s.on('close', () => this.#sockets.delete(s));
        s.on('error', () => {
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
    this.port = (server.address() as { port: number }).port;
    this.#server = server;
  }

  async cut(): Promise<void> {
    const server = this.#server;
    this.#server = null;
    for (const s of this.#sockets) s.destroy();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
