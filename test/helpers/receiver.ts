/** A webhook receiver in the test process that logs arrivals, with optional delay. */
import { createWebhookReceiver, generateWebhookSecret, type ListeningWebhookReceiver } from 'txbox/http';

export interface Arrival {
  readonly id: string;
  readonly key: string;
}

export interface TestReceiver {
  readonly url: string;
  readonly secret: string;
  readonly arrivals: Arrival[];
  /** Milliseconds each request waits before it is answered. */
  delayMs: number;
  close(): Promise<void>;
}

export async function startReceiver(delayMs = 0): Promise<TestReceiver> {
  const secret = generateWebhookSecret();
  const arrivals: Arrival[] = [];
  const state = { delayMs };
  const handler = createWebhookReceiver({
    secret,
    onEvent: async (event) => {
      arrivals.push({ id: event.id, key: event.key });
      if (state.delayMs > 0) await new Promise((r) => setTimeout(r, state.delayMs));
    },
  });
  const server: ListeningWebhookReceiver = await handler.listen({ port: 0 });
  return {
    url: server.url.replace(/\/$/, ''),
    secret,
    arrivals,
    get delayMs() {
      return state.delayMs;
    },
    set delayMs(v: number) {
      state.delayMs = v;
    },
    close: () => server.close(),
  };
}
