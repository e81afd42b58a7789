import type { Transport } from '../../core/ports.ts';
import { HttpTransport, createWebhookReceiver, generateWebhookSecret } from '../../transports/http/index.ts';
import type { DemoSink, Arrival, Deliver } from './demo-sink.ts';

/** The embedded demo's downstream service: an HTTP receiver in this process that verifies signatures. */
export class HttpDemoSink implements DemoSink {
  readonly name = 'HTTP webhooks (in-process receiver)';
  readonly arrivals: Arrival[] = [];
  readonly #secret = generateWebhookSecret();
  #url = '';
  #close: (() => Promise<void>) | undefined;

  async start(deliver: Deliver): Promise<void> {
    const handler = createWebhookReceiver({
      secret: this.#secret,
      onEvent: async (event) => {
        this.arrivals.push({ id: event.id, key: event.key, at: performance.now() });
        await deliver(event); // the answer (the ack) waits for the inbox commit
      },
    });
    const server = await handler.listen({ port: 0 });
    this.#url = server.url.replace(/\/$/, '');
    this.#close = server.close;
  }

  transport(): Transport {
    return new HttpTransport({
      endpoints: { orders: `${this.#url}/orders`, payments: `${this.#url}/payments` },
      secret: this.#secret,
      timeoutMs: 5000,
    });
  }

  async close(): Promise<void> {
    await this.#close?.();
  }
}
