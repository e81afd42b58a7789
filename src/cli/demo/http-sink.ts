import type { Transport } from '../../core/ports.ts';
import { HttpTransport, createWebhookReceiver, generateWebhookSecret } from '../../transports/http/index.ts';
import { SENDER_HEADER, type DemoSink, type Arrival, type Deliver, type RelayTransportConfig } from './demo-sink.ts';
import type { Logger } from '../../core/logger.ts';

/** The embedded demo's downstream service: an HTTP receiver in this process that verifies signatures. */
export class HttpDemoSink implements DemoSink {
  readonly name = 'HTTP webhooks (in-process receiver)';
  readonly arrivals: Arrival[] = [];
  /** Requests answered 401 (bad or missing signature or timestamp): an independent check of the sender's signing. */
  signatureFailures = 0;
  /** Requests answered 400 or 413 (not a readable envelope). */
  rejected = 0;
  readonly #secret = generateWebhookSecret();
  #url = '';
  #close: (() => Promise<void>) | undefined;

  async start(deliver: Deliver): Promise<void> {
    const handler = createWebhookReceiver({
      secret: this.#secret,
      logger: this.#counter,
      onEvent: async (event, ctx) => {
        const from = ctx.headers[SENDER_HEADER];
        this.arrivals.push({ id: event.id, key: event.key, at: performance.now(), ...(typeof from === 'string' ? { from } : {}) });
        await deliver(event); // the answer (the ack) waits for the inbox commit
      },
    });
    const server = await handler.listen({ port: 0 });
    this.#url = server.url.replace(/\/$/, '');
    this.#close = server.close;
  }

  transport(): Transport {
    return new HttpTransport(this.#options());
  }

  relayTransport(): RelayTransportConfig {
    return { type: 'http', ...this.#options() };
  }

  #options(): { endpoints: Record<string, string>; secret: string; timeoutMs: number } {
    return { endpoints: { orders: `${this.#url}/orders`, payments: `${this.#url}/payments` }, secret: this.#secret, timeoutMs: 5000 };
  }

  /** Counts the receiver's rejections by status (it logs ids and reasons, never bodies). */
  readonly #counter: Logger = {
    debug: () => {},
    info: () => {},
    error: () => {},
    warn: (obj) => {
      const status = (obj as { status?: number }).status;
      if (status === 401) this.signatureFailures++;
      else if (status !== undefined) this.rejected++;
    },
  };

  async close(): Promise<void> {
    await this.#close?.();
  }
}
