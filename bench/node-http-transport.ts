/**
 * The HTTP transport as it was before it moved to undici (node:http
 * `request()` on a keep-alive Agent), kept for the benchmarks only, so that
 * the two clients are measured in the same run (bench/http-clients.ts,
 * bench/peer-graphile-worker.ts with BENCH_PEER_HTTP_CLIENTS). Same options,
 * requests, signing and outcomes as the transport had; not a transport to
 * deploy.
 */
import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import { request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { payloadText, type OutboxEvent } from '../src/core/envelope.ts';
import type { PublishOutcome, Transport } from '../src/core/ports.ts';
import { ceHeaderValue, forwardableHeaderName, isValidHeaderValue } from '../src/transports/http/http-headers.ts';
import { ACK, abortedFailure, bodyExcerpt, fail, failedResponse, networkFailure, timeoutFailure } from '../src/transports/http/http-outcomes.ts';
import { resolveHttpTransportOptions, type HttpTransportOptions, type ResolvedHttpEndpoint, type ResolvedHttpTransportOptions } from '../src/transports/http/http-transport-options.ts';
import { signWebhook } from '../src/transports/http/webhook-signature.ts';

interface PublishContext {
  readonly options: ResolvedHttpTransportOptions;
  readonly httpAgent: HttpAgent | null;
  readonly httpsAgent: HttpsAgent | null;
}

/** One event's request: what was sent and how far the answer got. */
interface Attempt {
  readonly index: number;
  readonly endpoint: ResolvedHttpEndpoint;
  readonly body: Buffer;
  readonly headers: Record<string, string>;
  req: ClientRequest | null;
  /** 0 until the status line arrives. */
  status: number;
  response: IncomingMessage | null;
  chunks: Buffer[];
  excerptBytes: number;
  retried: boolean;
}

/** Errors after which a request on a reused keep-alive socket is sent again at once: the server closed the idle socket as we wrote. */
const STALE_SOCKET = new Set(['ECONNRESET', 'EPIPE']);

class PublishCall {
  readonly #ctx: PublishContext;
  readonly #events: readonly OutboxEvent[];
  readonly #signal: AbortSignal;
  readonly #outcomes: (PublishOutcome | undefined)[];
  readonly #attempts: (Attempt | null)[];
  #pending: number;
  /** The next event to send, and how many sent ones still wait for an outcome. */
  #next = 0;
  #active = 0;
  #pumping = false;
  #timestamp = '';
  #timer: NodeJS.Timeout | undefined;
  #resolve: ((outcomes: PublishOutcome[]) => void) | undefined;
  readonly #onAbort = (): void => this.#cancelAll(abortedFailure);
  readonly #onTimeout = (): void => this.#cancelAll((endpoint) => timeoutFailure(endpoint, this.#ctx.options.timeoutMs));

  constructor(ctx: PublishContext, events: readonly OutboxEvent[], signal: AbortSignal) {
    this.#ctx = ctx;
    this.#events = events;
    this.#signal = signal;
    this.#outcomes = new Array<PublishOutcome | undefined>(events.length);
    this.#attempts = new Array<Attempt | null>(events.length).fill(null);
    this.#pending = events.length;
  }

  run(): Promise<PublishOutcome[]> {
    return new Promise<PublishOutcome[]>((resolve) => {
      this.#resolve = resolve;
      if (this.#pending === 0) return this.#finish();
      if (this.#signal.aborted) {
        for (let i = 0; i < this.#events.length; i++) this.#settle(i, abortedFailure(this.#endpointName(i)));
        return;
      }
      this.#timer = setTimeout(this.#onTimeout, this.#ctx.options.timeoutMs);
      this.#signal.addEventListener('abort', this.#onAbort, { once: true });
      this.#timestamp = String(Math.floor(Date.now() / 1000));
      this.#pump();
    });
  }

  /** Starts requests until `maxSockets` of this call are in flight or none are left. */
  #pump(): void {
    if (this.#pumping) return; // a request that settled while being started: the running loop goes on
    this.#pumping = true;
    while (this.#next < this.#events.length && this.#active < this.#ctx.options.maxSockets) {
      this.#active++;
      this.#begin(this.#next++, this.#timestamp);
    }
    this.#pumping = false;
  }

  #begin(index: number, timestamp: string): void {
    const event = this.#events[index]!;
    const endpoint = this.#ctx.options.endpoints.get(event.destination);
    if (endpoint === undefined) {
      this.#settle(index, fail('permanent', `unknown destination ${JSON.stringify(event.destination)}: add it to endpoints`));
      return;
    }
    let body: Buffer;
    let headers: Record<string, string>;
    try {
      body = Buffer.from(serializeEnvelope(event), 'utf8');
      headers = this.#headers(event, body, timestamp);
    } catch (err) {
      const reason = err instanceof Error ? `${err.name}: ${err.message}` : 'unknown error';
      this.#settle(index, fail('permanent', `cannot build the request for POST ${endpoint.display}: ${reason}`, err));
      return;
    }
    const attempt: Attempt = { index, endpoint, body, headers, req: null, status: 0, response: null, chunks: [], excerptBytes: 0, retried: false };
    this.#attempts[index] = attempt;
    this.#send(attempt);
  }

  #send(a: Attempt): void {
    const { endpoint } = a;
    const options = {
      ...endpoint.request,
      agent: (endpoint.secure ? this.#ctx.httpsAgent : this.#ctx.httpAgent) ?? undefined,
      headers: a.headers,
    };
    let req: ClientRequest;
    try {
      req = endpoint.secure ? httpsRequest(options) : httpRequest(options);
    } catch (err) {
      // Node refused the request before sending it (a header or path it will not write): resending cannot help.
      const reason = err instanceof Error ? err.message : String(err);
      this.#settle(a.index, fail('permanent', `cannot send POST ${endpoint.display}: ${reason}`, err));
      return;
    }
    a.req = req;
    req.on('response', (res) => this.#onResponse(a, res));
    req.on('error', (err: NodeJS.ErrnoException) => {
      if (this.#outcomes[a.index] !== undefined || a.req !== req) return;
      if (a.status === 0 && !a.retried && req.reusedSocket && STALE_SOCKET.has(err.code ?? '')) {
        a.retried = true;
        this.#send(a);
        return;
      }
      this.#settle(a.index, a.status === 0 ? networkFailure(err, endpoint.display) : this.#answered(a));
    });
    req.end(a.body);
  }

  #onResponse(a: Attempt, res: IncomingMessage): void {
    a.status = res.statusCode ?? 0;
    a.response = res;
    const done = (): void => {
      if (this.#outcomes[a.index] === undefined) this.#settle(a.index, this.#answered(a));
    };
    res.on('end', done);
    res.on('close', done);
    res.on('error', done);
    if (a.status >= 200 && a.status < 300) {
      res.resume(); // drain, so that the socket goes back to the pool
      return;
    }
    const limit = this.#ctx.options.errorBodyChars * 4;
    res.on('data', (chunk: Buffer) => {
      if (a.excerptBytes >= limit) return;
      a.chunks.push(chunk);
      a.excerptBytes += chunk.length;
    });
  }

  /** The outcome of a request whose status line arrived. */
  #answered(a: Attempt): PublishOutcome {
    if (a.status >= 200 && a.status < 300) return ACK;
    const res = a.response!;
    return failedResponse({
      destination: a.endpoint.destination,
      endpoint: a.endpoint.display,
      status: a.status,
      headers: res.headers,
      excerpt: bodyExcerpt(a.chunks, res.headers['content-type'], this.#ctx.options.errorBodyChars),
    });
  }

  /** Timeout or abort: every event still waiting gets an outcome now and its request is destroyed. */
  #cancelAll(failure: (endpoint: string) => PublishOutcome): void {
    const unsent = this.#next;
    for (let i = unsent; i < this.#events.length; i++) this.#settle(i, failure(this.#endpointName(i)));
    this.#next = this.#events.length; // nothing more is started
    for (let i = 0; i < unsent; i++) {
      const a = this.#attempts[i];
      if (a === null || a === undefined || this.#outcomes[i] !== undefined) continue;
      // A 2xx status line is the ack even if the body was still coming.
      this.#settle(i, a.status === 0 ? failure(a.endpoint.display) : this.#answered(a));
      a.req?.destroy();
    }
  }

  #settle(index: number, outcome: PublishOutcome): void {
    if (this.#outcomes[index] !== undefined) return;
    this.#outcomes[index] = outcome;
    this.#attempts[index] = null;
    if (--this.#pending === 0) return this.#finish();
    if (index < this.#next) {
      this.#active--;
      this.#pump();
    }
  }

  #finish(): void {
    clearTimeout(this.#timer);
    this.#signal.removeEventListener('abort', this.#onAbort);
    this.#resolve!(this.#outcomes as PublishOutcome[]);
  }

  #endpointName(index: number): string {
    const destination = this.#events[index]!.destination;
    return this.#ctx.options.endpoints.get(destination)?.display ?? `destination ${JSON.stringify(destination)}`;
  }

  #headers(event: OutboxEvent, body: Buffer, timestamp: string): Record<string, string> {
    const o = this.#ctx.options;
    const h: Record<string, string> = {};
    const eventHeaders = event.headers;
    if (eventHeaders) {
      for (const name in eventHeaders) {
        const lower = forwardableHeaderName(name);
        const value = eventHeaders[name];
        if (lower !== null && isValidHeaderValue(value)) h[lower] = value;
      }
    }
    Object.assign(h, o.headers);
    h['content-type'] = 'application/json';
    h['content-length'] = String(body.length);
    h['ce-specversion'] = '1.0';
    h['ce-id'] = ceHeaderValue(event.id);
    h['ce-type'] = ceHeaderValue(event.type);
    h['ce-source'] = o.source;
    h['ce-subject'] = ceHeaderValue(`${event.aggregateType}:${event.aggregateId}`);
    h['ce-time'] = event.occurredAt.toISOString();
    h['ce-partitionkey'] = ceHeaderValue(event.key);
    if (!isValidHeaderValue(event.id)) throw new TypeError('the event id contains characters not allowed in an HTTP header');
    h['webhook-id'] = event.id;
    if (o.signingKey !== null) {
      h['webhook-timestamp'] = timestamp;
      h['webhook-signature'] = signWebhook(o.signingKey, event.id, timestamp, body);
    }
    return h;
  }
}

/**
 * The JSON body: the envelope's fields only (a StoredEvent's bookkeeping stays
 * out). A stored payload's JSON text goes in as it is.
 */
function serializeEnvelope(e: OutboxEvent): string {
  const payload = payloadText(e) ?? 'null';
  const j = JSON.stringify;
  return (
    `{"id":${j(e.id)},"type":${j(e.type)},"aggregateType":${j(e.aggregateType)},"aggregateId":${j(e.aggregateId)},` +
    `"key":${j(e.key)},"destination":${j(e.destination)},"payload":${payload},"headers":${j(e.headers)},` +
    `"occurredAt":${j(e.occurredAt.toISOString())},"version":${j(e.version ?? null)}}`
  );
}

export class NodeHttpBenchTransport implements Transport {
  readonly name = 'http-node';
  readonly #options: ResolvedHttpTransportOptions;
  readonly #inFlight = new Set<Promise<unknown>>();
  #ctx: PublishContext;
  #closing: Promise<void> | null = null;

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
    this.#ctx.httpAgent?.destroy();
    this.#ctx.httpsAgent?.destroy();
  }

  #openContext(): PublishContext {
    const o = this.#options;
    const pool = { keepAlive: true, maxSockets: o.maxSockets, maxFreeSockets: o.maxSockets, scheduling: 'lifo' } as const;
    let http = false;
    let https = false;
    for (const e of o.endpoints.values()) {
      if (e.secure) https = true;
      else http = true;
    }
    return {
      options: o,
      httpAgent: http ? new HttpAgent(pool) : null,
      httpsAgent: https ? new HttpsAgent({ ...o.tls, ...pool }) : null,
    };
  }
}
