import { createRequire } from 'node:module';
import type * as Undici from 'undici';
import type { OutboxEvent } from '../../core/envelope.ts';
import type { PublishOutcome, Transport } from '../../core/ports.ts';
import { fail } from './http-outcomes.ts';
import { fixedHeadersOf, PublishCall, type HttpTarget, type PublishContext } from './http-publish-call.ts';
import { resolveHttpTransportOptions, type HttpTransportOptions, type ResolvedHttpEndpoint, type ResolvedHttpTransportOptions } from './http-transport-options.ts';

export {
  resolveHttpTransportOptions,
  type HttpTransportOptions,
  type HttpTransportTlsOptions,
  type ResolvedHttpEndpoint,
  type ResolvedHttpTransportOptions,
} from './http-transport-options.ts';

/**
 * Publishes each event as one signed HTTP POST (a secret is required unless `allowUnsigned: true`) (a webhook) to its
 * destination's endpoint. A 2xx answer is the ack; 408, 425, 429, 5xx (but
 * 503), answers that do not come in time and dropped connections are
 * retriable (Retry-After honoured); 401, 403, 404, 503 and an endpoint out of
 * reach (refused, unknown host, no route, no connection within timeoutMs)
 * are destination-down; other 4xx and every 3xx are permanent. Events of one call go out
 * concurrently over a keep-alive pool.
 *
 * @example
 * const transport = new HttpTransport({
 *   endpoints: { orders: 'https://hooks.example.com/orders' },
 *   secret: process.env.WEBHOOK_SECRET, // 'whsec_...' from `npx txbox secret`; unset throws (allowUnsigned: true to go unsigned on purpose)
 * });
 * const relay = createRelay({ store, transport });
 */
export class HttpTransport implements Transport {
  readonly name = 'http';
  readonly #options: ResolvedHttpTransportOptions;
  readonly #inFlight = new Set<Promise<unknown>>();
  #ctx: PublishContext;
  #closing: Promise<void> | null = null;

  /** Throws ConfigError naming the field when an option is invalid. */
  constructor(options: HttpTransportOptions) {
    this.#options = resolveHttpTransportOptions(options);
    this.#ctx = this.#openContext();
  }

  /** Nothing to connect: options were checked by the constructor. Reopens the pool after `close()`. */
  async start(signal?: AbortSignal): Promise<void> {
    signal?.throwIfAborted();
    if (this.#closing) {
      await this.#closing;
      this.#closing = null;
      this.#ctx = this.#openContext();
    }
  }

  /**
   * Sends every event at once and resolves with one outcome per event in
   * input order. Never rejects for a failed event. Aborting `signal`
   * destroys requests still waiting and makes their outcomes retriable.
   */
  publish(events: readonly OutboxEvent[], signal: AbortSignal): Promise<PublishOutcome[]> {
    if (this.#closing) {
      const outcome = fail('retriable', 'the HTTP transport is closed; call start() to reopen it');
      return Promise.resolve(events.map(() => outcome));
    }
    const done = new PublishCall(this.#ctx, events, signal).run();
    this.#inFlight.add(done);
    void done.finally(() => this.#inFlight.delete(done));
    return done;
  }

  /** Waits for in-flight publishes to settle (each is bounded by timeoutMs), then destroys the socket pool. */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    await Promise.allSettled([...this.#inFlight]);
    await this.#ctx.dispatcher.destroy();
  }

  #openContext(): PublishContext {
    const o = this.#options;
    const { Agent } = loadUndici();
    const targets = new Map<string, HttpTarget>();
    for (const [destination, endpoint] of o.endpoints) targets.set(destination, httpTarget(endpoint, o));
    return {
      options: o,
      // One pool of keep-alive connections per origin; TLS options apply to https origins only.
      dispatcher: new Agent({ connections: o.maxSockets, pipelining: 1, connect: { ...o.tls } }),
      targets,
    };
  }
}

let undici: typeof Undici | undefined;

/** undici, loaded by the first HttpTransport: importing `txbox/http` for the receiver or the signing functions does not load it. */
function loadUndici(): typeof Undici {
  undici ??= createRequire(import.meta.url)('undici') as typeof Undici;
  return undici;
}

function httpTarget(endpoint: ResolvedHttpEndpoint, o: ResolvedHttpTransportOptions): HttpTarget {
  const { protocol, hostname, port, path, auth } = endpoint.request;
  const host = hostname!.includes(':') ? `[${hostname!}]` : hostname!;
  // As node:http sent the URL's userinfo: Basic, unless a static header sets authorization.
  const authorization = auth ? `Basic ${Buffer.from(auth).toString('base64')}` : null;
  const fixed = fixedHeadersOf(o.headers, authorization, o.source);
  return {
    endpoint,
    origin: `${protocol!}//${host}${port === undefined || port === null || port === '' ? '' : `:${String(port)}`}`,
    path: path ?? '/',
    authorization,
    fixedHeaders: fixed.headers,
    fixedNames: fixed.names,
  };
}
