import { importOptional } from '../optional-import.ts';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Message, SQSClient } from '@aws-sdk/client-sqs';
import type { Transport } from '../../core/ports.ts';
import { ConfigError } from '../../core/errors.ts';
import { KeyedDispatcher } from '../../inbox/keyed-dispatcher.ts';
import { CliError } from '../cli-error.ts';
import { resolveAwsClientOptions } from '../../transports/sqs/sqs-transport-options.ts';
import type { Arrival, DemoSink, Deliver, RelayTransportConfig } from './demo-sink.ts';

/** The demo's destinations share one FIFO queue: SQS keeps order only within one message group (the key) of one queue. */
const DESTINATIONS = ['orders', 'payments'] as const;
/** An SQS emulator (ElasticMQ) checks neither region nor credentials, but the SDK needs both. */
const REGION = 'us-east-1';
const EMULATOR_CREDENTIALS = { accessKeyId: 'txbox-demo', secretAccessKey: 'txbox-demo' } as const;
/** Receive loops at once: a FIFO queue hands a message group to one receiver at a time, so more loops mean more keys in flight. */
const READERS = 4;

export interface SqsDemoSinkOptions {
  /** The SQS endpoint (an emulator such as ElasticMQ). Default: `'http://127.0.0.1:9324'` (scripts/sqs/up.sh). */
  readonly endpoint?: string;
  /** Where `endpoint` came from, named in errors. Default: `'--transport-url'`. */
  readonly addressSource?: string;
  /** The FIFO queue's name, without `.fifo`. Default: `txbox-demo-<random>`. */
  readonly name?: string;
  /**
   * Read the queue (the observer). False: only create it (and delete it on
   * close), for `txbox torture --inbox`, whose consumer processes read it
   * instead: SQS hands each message to one receiver. Default: true.
   */
  readonly read?: boolean;
  /** The queue's visibility timeout, in seconds: how long a message taken by a receiver that died stays invisible. Default: 30. */
  readonly visibilityTimeoutSeconds?: number;
}

type SqsModule = typeof import('../../transports/sqs/index.ts');
type SqsClientModule = typeof import('@aws-sdk/client-sqs');

/**
 * The demo's downstream side on an SQS emulator (ElasticMQ): a fresh FIFO
 * queue for both destinations (message group = the event key,
 * deduplication id = the event id), created by `start()` before any relay
 * publishes, and read back by a few long-polling loops into `arrivals`. A
 * FIFO queue hands out a group's next message only once the previous one
 * is deleted (or its visibility timeout passed), so one key's events arrive
 * in queue order. Each received message goes to `deliver`, one key after
 * another, and is deleted once `deliver` resolved; when it rejects, it is
 * handed to it again after a pause. The queue is deleted on close. The
 * AWS SDK is loaded by `start()`, so the CLI runs without it unless this
 * sink is chosen.
 */
export class SqsDemoSink implements DemoSink {
  readonly arrivals: Arrival[] = [];
  /** Messages that are not txbox events: counted (and deleted) rather than hidden. */
  undecodable = 0;
  readonly #endpoint: string;
  readonly #source: string;
  readonly #queueName: string;
  readonly #read: boolean;
  readonly #visibility: number;
  readonly #dispatcher = new KeyedDispatcher(32);
  #module: SqsModule | undefined;
  #sdk: SqsClientModule | undefined;
  #client: SQSClient | undefined;
  #queueUrl = '';
  #readers: Promise<void>[] = [];
  #stopped = false;

  constructor(options: SqsDemoSinkOptions = {}) {
    this.#endpoint = options.endpoint ?? 'http://127.0.0.1:9324';
    this.#source = options.addressSource ?? '--transport-url';
    this.#queueName = `${options.name ?? `txbox-demo-${randomBytes(4).toString('hex')}`}.fifo`;
    this.#read = options.read ?? true;
    this.#visibility = options.visibilityTimeoutSeconds ?? 30;
    // Checked here, before the demo opens its database: a malformed endpoint fails at once.
    try {
      resolveAwsClientOptions({ endpoint: this.#endpoint });
    } catch (err) {
      if (err instanceof ConfigError && err.field === 'endpoint') throw new CliError(`${this.#source}: ${err.message.slice('endpoint: '.length)}`);
      throw err;
    }
  }

  get name(): string {
    return `Amazon SQS (FIFO queue ${this.#queueName} at ${this.#endpoint})`;
  }

  /** The queue's URL, after start(). */
  get queueUrl(): string {
    return this.#queueUrl;
  }

  async start(deliver: Deliver): Promise<void> {
    const [mod, sdk] = await importOptional('the sqs demo', () => Promise.all([import('../../transports/sqs/index.ts'), import('@aws-sdk/client-sqs')]));
    this.#module = mod;
    this.#sdk = sdk;
    const client = new sdk.SQSClient({ region: REGION, endpoint: this.#endpoint, credentials: { ...EMULATOR_CREDENTIALS }, maxAttempts: 2 });
    this.#client = client;
    try {
      const created = await client.send(
        new sdk.CreateQueueCommand({ QueueName: this.#queueName, Attributes: { FifoQueue: 'true', VisibilityTimeout: String(this.#visibility) } }),
        { abortSignal: AbortSignal.timeout(10_000) },
      );
      this.#queueUrl = created.QueueUrl ?? '';
    } catch (err) {
      const failure = mod.classifyRequestError(err);
      throw new CliError(`${this.#source}: cannot create queue ${this.#queueName} at ${this.#endpoint} (${failure.reason}); start an SQS emulator there (scripts/sqs/up.sh starts ElasticMQ) or point ${this.#source} at one`);
    }
    if (this.#queueUrl === '') throw new CliError(`${this.#source}: the server at ${this.#endpoint} created no queue URL; is it SQS?`);
    if (this.#read) for (let i = 0; i < READERS; i++) this.#readers.push(this.#follow(client, sdk, mod, deliver));
  }

  transport(): Transport {
    if (!this.#module) throw new Error('SqsDemoSink: call start() first');
    return new this.#module.SqsTransport({ queues: this.#queues(), endpoint: this.#endpoint, region: REGION, credentials: { ...EMULATOR_CREDENTIALS } });
  }

  relayTransport(): RelayTransportConfig {
    return { type: 'sqs', queues: this.#queues(), endpoint: this.#endpoint, region: REGION, credentials: { ...EMULATOR_CREDENTIALS } };
  }

  async close(): Promise<void> {
    this.#stopped = true;
    await Promise.all(this.#readers);
    await this.#dispatcher.onIdle();
    if (this.#client && this.#sdk && this.#queueUrl !== '') {
      await this.#client.send(new this.#sdk.DeleteQueueCommand({ QueueUrl: this.#queueUrl }), { abortSignal: AbortSignal.timeout(10_000) }).catch(() => {});
    }
    this.#client?.destroy();
  }

  #queues(): Record<string, string> {
    return Object.fromEntries(DESTINATIONS.map((d) => [d, this.#queueUrl]));
  }

  /** One receive loop: a short long poll (so that close() is prompt), every message delivered in key order, then the batch deleted. */
  async #follow(client: SQSClient, sdk: SqsClientModule, mod: SqsModule, deliver: Deliver): Promise<void> {
    while (!this.#stopped) {
      let messages: Message[];
      try {
        const out = await client.send(
          new sdk.ReceiveMessageCommand({ QueueUrl: this.#queueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, MessageAttributeNames: ['All'] }),
          { abortSignal: AbortSignal.timeout(15_000) },
        );
        messages = out.Messages ?? [];
      } catch {
        if (!this.#stopped) await sleep(200);
        continue;
      }
      const done = await Promise.all(messages.map((m) => this.#handle(m, mod, deliver)));
      const entries = messages.flatMap((m, i) => (done[i] && m.ReceiptHandle ? [{ Id: String(i), ReceiptHandle: m.ReceiptHandle }] : []));
      // Not deleted (stopping before delivery): visible again after the timeout, as for a crashed reader.
      if (entries.length > 0) await client.send(new sdk.DeleteMessageBatchCommand({ QueueUrl: this.#queueUrl, Entries: entries }), { abortSignal: AbortSignal.timeout(15_000) }).catch(() => {});
    }
  }

  /** Records the arrival and hands the event to `deliver` behind its key's earlier events; true once delivered (or unreadable). */
  async #handle(m: Message, mod: SqsModule, deliver: Deliver): Promise<boolean> {
    const decoded = mod.decodeSqsMessage(m, '');
    if (!decoded.ok) {
      this.undecodable++;
      return true;
    }
    const event = decoded.event;
    this.arrivals.push({ id: event.id, key: event.key, at: performance.now() });
    let delivered = false;
    await this.#dispatcher.push(event.key, async () => {
      for (let attempt = 0; !this.#stopped; attempt++) {
        try {
          await deliver(event);
          delivered = true;
          return;
        } catch {
          await sleep(Math.min(2000, 100 * 2 ** attempt));
        }
      }
    });
    return delivered;
  }
}
