/**
 * One `publish()` call of the HTTP transport: events are POSTed concurrently
 * through undici's dispatcher, at most `maxSockets` requests of the call at a
 * time (a request's body exists only while it is sent, which bounds memory on
 * large batches); one timer bounds the whole call, one abort listener cancels
 * what is still waiting, and the call resolves when every event has an
 * outcome. Requests go through `dispatch` with a handler, not undici's
 * `request()`: no stream or promise per request.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { Dispatcher } from 'undici';
import { payloadText, type OutboxEvent } from '../../core/envelope.ts';
import type { PublishOutcome } from '../../core/ports.ts';
import { ceHeaderValue, forwardableHeaderName, isValidHeaderValue } from './http-headers.ts';
import { ACK, abortedFailure, bodyExcerpt, fail, failedResponse, networkFailure, timeoutFailure, unreachableFailure } from './http-outcomes.ts';
import type { ResolvedHttpEndpoint, ResolvedHttpTransportOptions } from './http-transport-options.ts';
import { signWebhook } from './webhook-signature.ts';

/** Where an endpoint's requests go: undici's origin and path, and the Basic credentials of the URL's userinfo. */
export interface HttpTarget {
  readonly endpoint: ResolvedHttpEndpoint;
  readonly origin: string;
  readonly path: string;
  /** `Basic ...` from the URL's userinfo, or null. Sent unless a static header sets `authorization`. */
  readonly authorization: string | null;
  /**
   * The headers every request to this endpoint carries, flattened once (`[name, value, ...]`): the
   * static `headers` option, the URL's `authorization`, `content-type`, `ce-specversion` and `ce-source`.
   */
  readonly fixedHeaders: readonly string[];
  /** Names in `fixedHeaders`: an event header of the same name is not forwarded (the static one wins). */
  readonly fixedNames: ReadonlySet<string>;
}

/**
 * The flattened headers that do not depend on the event, in the order the
 * requests send them. `content-length` is not among them: undici writes it
 * from the body's length, as the last header.
 */
export function fixedHeadersOf(staticHeaders: Readonly<Record<string, unknown>>, authorization: string | null, source: string): { headers: string[]; names: Set<string> } {
  const headers: string[] = [];
  for (const name of Object.keys(staticHeaders)) headers.push(name, String(staticHeaders[name]));
  if (authorization !== null && staticHeaders['authorization'] === undefined) headers.push('authorization', authorization);
  headers.push('content-type', 'application/json', 'ce-specversion', '1.0', 'ce-source', source);
  const names = new Set<string>();
  for (let i = 0; i < headers.length; i += 2) names.add(headers[i]!);
  return { headers, names };
}

export interface PublishContext {
  readonly options: ResolvedHttpTransportOptions;
  /** One undici Agent: a keep-alive pool of `maxSockets` connections per origin. */
  readonly dispatcher: Dispatcher;
  readonly targets: ReadonlyMap<string, HttpTarget>;
}

/** Errors after which a request that got no answer is sent again once, at once: the server closed the keep-alive connection as we wrote. */
const STALE_SOCKET = new Set(['ECONNRESET', 'EPIPE', 'UND_ERR_SOCKET']);

/** One event's request: what is sent and how far the answer got. */
class Attempt {
  /** 0 until the status line arrives. */
  status = 0;
  responseHeaders: IncomingHttpHeaders | null = null;
  chunks: Buffer[] = [];
  excerptBytes = 0;
  retried = false;
  /** The running dispatch, to abort it; null before undici starts it. */
  controller: Dispatcher.DispatchController | null = null;
  /** The handler of the latest dispatch: callbacks of one replaced by a resend are ignored. */
  handler: AttemptHandler | null = null;

  constructor(
    readonly index: number,
    readonly target: HttpTarget,
    readonly body: Buffer,
    /** Flattened: `[name, value, name, value, ...]`, as undici takes them without another pass. */
    readonly headers: string[],
  ) {}
}

/** undici's callbacks for one dispatch of an attempt (a resend is a new dispatch with a new handler). */
class AttemptHandler implements Dispatcher.DispatchHandler {
  constructor(
    private readonly call: PublishCall,
    private readonly a: Attempt,
  ) {}

  onRequestStart(controller: Dispatcher.DispatchController): void {
    // Settled while it waited for a connection (timeout, abort): never send it.
    if (this.call.settled(this.a.index)) return controller.abort(new Error('the publish call already gave this event an outcome'));
    this.a.controller = controller;
    this.call.reached();
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    this.a.status = statusCode;
    this.a.responseHeaders = headers;
  }

  onResponseData(_controller: Dispatcher.DispatchController, chunk: Buffer): void {
    const a = this.a;
    // A 2xx body is read and dropped (the ack waits for its end); an error body is kept up to the excerpt's size.
    if (a.status >= 200 && a.status < 300) return;
    if (a.excerptBytes >= this.call.excerptLimit) return;
    a.chunks.push(chunk);
    a.excerptBytes += chunk.length;
  }

  onResponseEnd(): void {
    this.a.controller = null;
    this.call.answered(this.a);
  }

  onResponseError(_controller: Dispatcher.DispatchController, err: Error): void {
    this.a.controller = null;
    this.call.failed(this.a, this, err);
  }
}

export class PublishCall {
  readonly #ctx: PublishContext;
  readonly #events: readonly OutboxEvent[];
  readonly #signal: AbortSignal;
  readonly #outcomes: (PublishOutcome | undefined)[];
  readonly #attempts: (Attempt | null)[];
  /** Bytes of an error body kept for its excerpt. */
  readonly excerptLimit: number;
  #pending: number;
  /** The next event to send, and how many sent ones still wait for an outcome. */
  #next = 0;
  #active = 0;
  #pumping = false;
  #timestamp = '';
  #timer: NodeJS.Timeout | undefined;
  #resolve: ((outcomes: PublishOutcome[]) => void) | undefined;
  readonly #onAbort = (): void => this.#cancelAll(abortedFailure);
  /** A request of this call got a connection (undici started writing it). */
  #reached = false;
  // No request of the call reached a connection in timeoutMs: the endpoint is out of reach (a host gone, packets
  // dropped), which is about the destination; else the answer was slow, which may be about the event.
  readonly #onTimeout = (): void =>
    this.#cancelAll((endpoint) => (this.#reached ? timeoutFailure(endpoint, this.#ctx.options.timeoutMs) : unreachableFailure(endpoint, this.#ctx.options.timeoutMs)));

  constructor(ctx: PublishContext, events: readonly OutboxEvent[], signal: AbortSignal) {
    this.#ctx = ctx;
    this.#events = events;
    this.#signal = signal;
    this.#outcomes = new Array<PublishOutcome | undefined>(events.length);
    this.#attempts = new Array<Attempt | null>(events.length).fill(null);
    this.#pending = events.length;
    this.excerptLimit = ctx.options.errorBodyChars * 4;
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

  reached(): void {
    this.#reached = true;
  }

  settled(index: number): boolean {
    return this.#outcomes[index] !== undefined;
  }

  /** The whole answer arrived. */
  answered(a: Attempt): void {
    if (this.#outcomes[a.index] === undefined) this.#settle(a.index, this.#outcomeOf(a));
  }

  /** The dispatch failed: before an answer (network), or while its body was read. */
  failed(a: Attempt, handler: AttemptHandler, err: Error): void {
    if (this.#outcomes[a.index] !== undefined || a.handler !== handler) return;
    const code = (err as NodeJS.ErrnoException).code ?? '';
    if (a.status === 0 && !a.retried && STALE_SOCKET.has(code)) {
      a.retried = true;
      this.#dispatch(a);
      return;
    }
    this.#settle(a.index, a.status === 0 ? networkFailure(err, a.target.endpoint.display) : this.#outcomeOf(a));
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
    const target = this.#ctx.targets.get(event.destination);
    if (target === undefined) {
      this.#settle(index, fail('permanent', `unknown destination ${JSON.stringify(event.destination)}: add it to endpoints`));
      return;
    }
    let body: Buffer;
    let headers: string[];
    try {
      const occurredAt = event.occurredAt.toISOString();
      body = Buffer.from(serializeEnvelope(event, occurredAt), 'utf8');
      headers = this.#headers(event, target, body, timestamp, occurredAt);
    } catch (err) {
      const reason = err instanceof Error ? `${err.name}: ${err.message}` : 'unknown error';
      this.#settle(index, fail('permanent', `cannot build the request for POST ${target.endpoint.display}: ${reason}`, err));
      return;
    }
    const attempt = new Attempt(index, target, body, headers);
    this.#attempts[index] = attempt;
    this.#dispatch(attempt);
  }

  #dispatch(a: Attempt): void {
    const handler = new AttemptHandler(this, a);
    a.handler = handler;
    try {
      this.#ctx.dispatcher.dispatch(
        // undici's own timeouts are off (0): the call's one timer bounds every request of the call,
        // settles what has no answer and aborts its dispatch (#cancelAll); per-request timers on
        // each connection would only repeat it, at a timer set and cleared per request.
        { origin: a.target.origin, path: a.target.path, method: 'POST', headers: a.headers, body: a.body, headersTimeout: 0, bodyTimeout: 0 },
        handler,
      );
    } catch (err) {
      // The dispatcher is closed or destroyed (close() raced this call).
      this.#settle(a.index, networkFailure(err, a.target.endpoint.display));
    }
  }

  /** The outcome of a request whose status line arrived. */
  #outcomeOf(a: Attempt): PublishOutcome {
    if (a.status >= 200 && a.status < 300) return ACK;
    const headers = a.responseHeaders ?? {};
    const contentType = headers['content-type'];
    return failedResponse({
      destination: a.target.endpoint.destination,
      endpoint: a.target.endpoint.display,
      status: a.status,
      headers,
      excerpt: bodyExcerpt(a.chunks, Array.isArray(contentType) ? contentType[0] : contentType, this.#ctx.options.errorBodyChars),
    });
  }

  /** Timeout or abort: every event still waiting gets an outcome now and its request is aborted. */
  #cancelAll(failure: (endpoint: string) => PublishOutcome): void {
    const unsent = this.#next;
    for (let i = unsent; i < this.#events.length; i++) this.#settle(i, failure(this.#endpointName(i)));
    this.#next = this.#events.length; // nothing more is started
    for (let i = 0; i < unsent; i++) {
      const a = this.#attempts[i];
      if (a === null || a === undefined || this.#outcomes[i] !== undefined) continue;
      const controller = a.controller;
      // A 2xx status line is the ack even if the body was still coming.
      this.#settle(i, a.status === 0 ? failure(a.target.endpoint.display) : this.#outcomeOf(a));
      // Frees the connection; a dispatch still waiting for one is aborted when undici starts it (onRequestStart).
      controller?.abort(new Error('the publish call timed out or was aborted'));
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
    return this.#ctx.targets.get(destination)?.endpoint.display ?? `destination ${JSON.stringify(destination)}`;
  }

  #headers(event: OutboxEvent, target: HttpTarget, body: Buffer, timestamp: string, occurredAt: string): string[] {
    const o = this.#ctx.options;
    const h: string[] = [];
    const eventHeaders = event.headers;
    if (eventHeaders) {
      // Collected by name first: two names of one header in different case are one header, the last value wins.
      let forwarded: Record<string, string> | undefined;
      for (const name in eventHeaders) {
        const lower = forwardableHeaderName(name);
        const value = eventHeaders[name];
        if (lower !== null && isValidHeaderValue(value) && !target.fixedNames.has(lower)) (forwarded ??= {})[lower] = value;
      }
      if (forwarded !== undefined) for (const name in forwarded) h.push(name, forwarded[name]!);
    }
    const fixed = target.fixedHeaders;
    for (let i = 0; i < fixed.length; i++) h.push(fixed[i]!);
    if (!isValidHeaderValue(event.id)) throw new TypeError('the event id contains characters not allowed in an HTTP header');
    h.push(
      'ce-id', ceHeaderValue(event.id),
      'ce-type', ceHeaderValue(event.type),
      'ce-subject', ceHeaderValue(`${event.aggregateType}:${event.aggregateId}`),
      'ce-time', occurredAt,
      'ce-partitionkey', ceHeaderValue(event.key),
      'webhook-id', event.id,
    );
    if (o.signingKey !== null) h.push('webhook-timestamp', timestamp, 'webhook-signature', signWebhook(o.signingKey, event.id, timestamp, body));
    return h;
  }
}

/**
 * The JSON body: the envelope's fields only (a StoredEvent's bookkeeping stays
 * out). A stored payload's JSON text goes in as it is; `occurredAt` is the
 * ISO string the `ce-time` header carries too (it needs no JSON escaping).
 */
function serializeEnvelope(e: OutboxEvent, occurredAt: string): string {
  const payload = payloadText(e) ?? 'null';
  const j = JSON.stringify;
  const headers = e.headers;
  const version = e.version;
  return (
    `{"id":${j(e.id)},"type":${j(e.type)},"aggregateType":${j(e.aggregateType)},"aggregateId":${j(e.aggregateId)},` +
    `"key":${j(e.key)},"destination":${j(e.destination)},"payload":${payload},"headers":${isEmpty(headers) ? '{}' : j(headers)},` +
    `"occurredAt":"${occurredAt}","version":${version === undefined || version === null ? 'null' : j(version)}}`
  );
}

/** No own enumerable key (most events carry no headers): its JSON is `{}`, without a JSON.stringify call. */
function isEmpty(o: object): boolean {
  for (const _ in o) return false;
  return true;
}
