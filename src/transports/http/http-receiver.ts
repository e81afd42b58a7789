/**
 * The receiving end of HttpTransport: a `node:http` request handler that
 * verifies the Standard Webhooks signature, parses the envelope and answers
 * 2xx only once `onEvent` has resolved. Used by the demo and the inbox consumer.
 */
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { OutboxEvent } from '../../core/envelope.ts';
import { ConfigError } from '../../core/errors.ts';
import { silentLogger, type Logger } from '../../core/logger.ts';
import { runTraced, startConsumerTrace } from '../../core/consumer-tracing.ts';
import { parseEnvelope } from './http-envelope.ts';
import { checkWebhookHeaders, missingSecretError, verifyWebhook, webhookKey, type WebhookSecret } from './webhook-signature.ts';
import { thrownText } from '../../core/error-text.ts';

/** What `onEvent` learns about the request besides the event. */
export interface WebhookContext {
  /** `webhook-id` (the event id, the dedup key), or null when the sender did not send one. */
  readonly webhookId: string | null;
  /** `webhook-timestamp` in Unix seconds when the signature was verified, else null. */
  readonly timestamp: number | null;
  /** True when a secret is configured and the signature matched (false only with `allowUnsigned: true`). */
  readonly verified: boolean;
  readonly headers: IncomingHttpHeaders;
  /** Aborted when the sender disconnects before the answer (its request timed out): it will retry. */
  readonly signal: AbortSignal;
}

/**
 * Options of `createWebhookReceiver(...)`; only `onEvent` is required.
 *
 * @example
 * const options: WebhookReceiverOptions = { secret: 'whsec_...', onEvent: async (event) => { await handle(event); } };
 */
export interface WebhookReceiverOptions {
  /**
   * The secret shared with the sender (several during a rotation). Requests
   * without a valid signature and timestamp are answered 401. Required unless
   * `allowUnsigned` is true: a missing secret (say, an unset environment
   * variable) throws. Generate one with `npx txbox secret`.
   */
  readonly secret?: WebhookSecret | readonly WebhookSecret[] | undefined;
  /**
   * Accepts requests without checking any signature when no `secret` is
   * given. Only for tests and trusted networks. Default: false (no secret throws).
   */
  readonly allowUnsigned?: boolean;
  /** How far `webhook-timestamp` may be from the receiver's clock, either way. Default: 300 seconds. */
  readonly toleranceSeconds?: number;
  /** Largest accepted body; larger ones are answered 413. Default: 1048576 (1 MiB). */
  readonly maxBodyBytes?: number;
  /**
   * Handles one event. The answer is 204 once it resolves and 500 if it
   * throws (the sender retries). Deliveries are at-least-once: dedup on
   * `event.id` (the inbox does). Required.
   */
  readonly onEvent: (event: OutboxEvent, ctx: WebhookContext) => Promise<void> | void;
  /** Told about rejected requests and handler failures (ids and reasons, never bodies). Default: silent. */
  readonly logger?: Logger;
}

/**
 * Thrown by `onEvent` when the receiver cannot take any event now (its
 * database is down): answered 503 with `Retry-After`, which HttpTransport
 * takes for the destination being down (paused, no attempt counted, nothing
 * parked), as it would a refused connection. The webhook consumer throws it
 * when the inbox store fails.
 */
export class WebhookUnavailableError extends Error {
  constructor(
    message: string,
    readonly retryAfterSeconds = 5,
  ) {
    super(message);
    this.name = 'WebhookUnavailableError';
  }
}

/**
 * Thrown by `onEvent` for an event the receiver can never take (its store
 * refuses it): answered 422 with the message, which HttpTransport parks at
 * once, so the event stays visible at the sender instead of being acked.
 */
export class WebhookRefusedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'WebhookRefusedError';
  }
}

/** A receiver serving on a port; `close()` it when done. */
export interface ListeningWebhookReceiver {
  /** `http://127.0.0.1:<port>`, without a trailing slash: append any path (the handler serves every path). */
  readonly url: string;
  readonly port: number;
  readonly server: Server;
  /** Stops accepting, lets answers in progress finish, closes every connection. */
  close(): Promise<void>;
}

/** A `node:http` request handler that also knows how to listen by itself. */
export interface WebhookReceiver {
  (req: IncomingMessage, res: ServerResponse): void;
  /** Starts a server on `host` (default 127.0.0.1) and `port` (default 0: a free one). */
  listen(options?: ListenOptions): Promise<ListeningWebhookReceiver>;
}

/**
 * Creates a webhook receiver. Mount it in any `node:http` server or router,
 * or call `listen()`.
 *
 * @example
 * const receiver = createWebhookReceiver({
 *   secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
 *   onEvent: async (event) => { await handle(event); },
 * });
 * const { url, close } = await receiver.listen({ port: 0 });
 */
export function createWebhookReceiver(options: WebhookReceiverOptions): WebhookReceiver {
  if (typeof options?.onEvent !== 'function') {
    throw new ConfigError('onEvent', 'is required: pass an async function (event, ctx) => { ... }');
  }
  const tolerance = int('toleranceSeconds', options.toleranceSeconds, 300, 1);
  const maxBodyBytes = int('maxBodyBytes', options.maxBodyBytes, 1_048_576, 1);
  const allowUnsigned = options.allowUnsigned ?? false;
  if (typeof allowUnsigned !== 'boolean') throw new ConfigError('allowUnsigned', 'must be true or false');
  if (options.secret === undefined && !allowUnsigned) throw missingSecretError('receiver');
  const secrets = options.secret === undefined ? null : toKeys(options.secret);
  const logger = options.logger ?? silentLogger;
  const { onEvent } = options;

  const reject = (res: ServerResponse, status: number, reason: string, id: string | null, extra?: Record<string, string>): void => {
    logger.warn({ status, reason, webhookId: id === null ? null : id.slice(0, 100) }, 'txbox webhook receiver: request rejected');
    reply(res, status, reason, extra);
  };

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (req.method !== 'POST') return reply(res, 405, 'only POST is accepted', { allow: 'POST' });
    if (secrets !== null) {
      // Refused before the body is read: a request that cannot be valid buffers nothing.
      const early = checkWebhookHeaders(req.headers, tolerance);
      if (!early.ok) return reject(res, 401, early.message, typeof req.headers['webhook-id'] === 'string' ? req.headers['webhook-id'] : null, { connection: 'close' });
    }
    const body = await readBody(req, res, maxBodyBytes);
    if (body === null) return; // answered 413, or the sender went away
    const webhookId = typeof req.headers['webhook-id'] === 'string' ? req.headers['webhook-id'] : null;
    let timestamp: number | null = null;
    if (secrets !== null) {
      const check = verifyWebhook({ secret: secrets, headers: req.headers, body, toleranceSeconds: tolerance });
      if (!check.ok) return reject(res, 401, check.message, webhookId);
      timestamp = check.timestamp;
    }
    const parsed = parseEnvelope(body);
    if (!parsed.ok) return reject(res, 400, parsed.message, webhookId);
    const aborted = new AbortController();
    res.once('close', () => {
      if (!res.writableFinished) aborted.abort(new Error('the sender disconnected before the answer'));
    });
    const ctx: WebhookContext = { webhookId, timestamp, verified: secrets !== null, headers: req.headers, signal: aborted.signal };
    // The span of this event (child of the trace context in the envelope, else in the HTTP headers); an inbox behind onEvent joins it.
    const trace = startConsumerTrace(parsed.event, {}, req.headers);
    try {
      await runTraced(trace, () => onEvent(parsed.event, ctx));
    } catch (err) {
      trace?.fail(thrownText(err));
      trace?.end();
      if (err instanceof WebhookUnavailableError) {
        logger.warn({ eventId: parsed.event.id, type: parsed.event.type, err: err.message }, 'txbox webhook receiver: unavailable; answered 503 so the sender pauses and retries');
        return reply(res, 503, 'the receiver cannot take events now; retry later', { 'retry-after': String(err.retryAfterSeconds) });
      }
      if (err instanceof WebhookRefusedError) {
        logger.warn({ eventId: parsed.event.id, type: parsed.event.type, err: err.message }, 'txbox webhook receiver: event refused; answered 422 so the sender parks it');
        return reply(res, 422, err.message);
      }
      logger.error(
        { eventId: parsed.event.id, type: parsed.event.type, err: thrownText(err) },
        'txbox webhook receiver: onEvent failed; answered 500 so the sender retries',
      );
      return reply(res, 500, 'the event handler failed');
    }
    trace?.end();
    reply(res, 204, '');
  }

  const receiver = ((req: IncomingMessage, res: ServerResponse): void => {
    handle(req, res).catch((err: unknown) => {
      logger.error({ err: thrownText(err) }, 'txbox webhook receiver: unexpected failure');
      if (!res.headersSent) reply(res, 500, 'internal error');
      else res.destroy();
    });
  }) as WebhookReceiver;
  receiver.listen = (listenOptions) => listenWebhookReceiver(receiver, listenOptions);
  return receiver;
}

/** The body, or null when it was too large (answered 413 here) or the request broke off. */
function readBody(req: IncomingMessage, res: ServerResponse, max: number): Promise<Buffer | null> {
  const declared = Number(req.headers['content-length']);
  if (declared > max) {
    tooLarge(req, res, max);
    return Promise.resolve(null);
  }
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size > max) {
        req.off('data', onData);
        tooLarge(req, res, max);
        resolve(null);
        return;
      }
      chunks.push(chunk);
    };
    req.on('data', onData);
    req.once('end', () => resolve(size > max ? null : Buffer.concat(chunks, size)));
    req.once('error', () => resolve(null));
    req.once('close', () => resolve(null)); // no-op after 'end' resolved
  });
}

function tooLarge(req: IncomingMessage, res: ServerResponse, max: number): void {
  reply(res, 413, `the body is larger than ${max} bytes (maxBodyBytes)`, { connection: 'close' });
  req.resume(); // read and drop the rest so that the sender sees the answer
}

function reply(res: ServerResponse, status: number, text: string, extra: Record<string, string> = {}): void {
  if (res.headersSent) return;
  if (status === 204) {
    res.writeHead(204, extra).end();
    return;
  }
  const body = Buffer.from(text, 'utf8');
  res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8', 'content-length': String(body.length), ...extra }).end(body);
}

export interface ListenOptions {
  /** Default: 0 (a free port). */
  readonly port?: number;
  /** Default: '127.0.0.1' (this machine only). */
  readonly host?: string;
}

/**
 * Serves `handler` (a webhook receiver or any `node:http` request handler) on
 * 127.0.0.1 and a free port unless told otherwise.
 *
 * @example
 * const { url, close } = await listenWebhookReceiver(createWebhookReceiver({ secret, onEvent }), { port: 0 });
 * const transport = new HttpTransport({ endpoints: { orders: `${url}/orders` }, secret });
 */
export async function listenWebhookReceiver(
  handler: (req: IncomingMessage, res: ServerResponse) => void,
  options: ListenOptions = {},
): Promise<ListeningWebhookReceiver> {
  const host = options.host ?? '127.0.0.1';
  if (typeof host !== 'string' || host.trim() === '') throw new ConfigError('host', 'must be a host name or address, e.g. 127.0.0.1 (an empty one would listen on every interface)');
  // A sender writes a whole request at once: one that takes longer is stalling (slow loris), not slow.
  const server = createServer({ headersTimeout: 10_000, requestTimeout: 30_000 }, handler);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const hostPart = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  // Answers in progress when close() is called say `connection: close`, so that close() need not wait for keep-alive timeouts.
  const answering = new Set<ServerResponse>();
  let closing: Promise<void> | null = null;
  // Each connection's request in progress: at close(), one whose request was never read whole (a
  // stalled sender) has no work started and is destroyed; server.close() would wait for it for good.
  const sockets = new Map<Socket, IncomingMessage | null>();
  server.on('connection', (socket: Socket) => {
    if (closing) return void socket.destroy();
    sockets.set(socket, null);
    socket.once('close', () => sockets.delete(socket));
  });
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    if (closing && !res.headersSent) res.setHeader('connection', 'close');
    answering.add(res);
    sockets.set(req.socket, req);
    res.once('close', () => answering.delete(res));
    res.once('finish', () => {
      if (sockets.get(req.socket) === req) sockets.set(req.socket, null);
    });
  });
  return {
    url: `http://${hostPart}:${address.port}`,
    port: address.port,
    server,
    close() {
      closing ??= new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        server.closeIdleConnections();
        for (const res of answering) if (!res.headersSent) res.setHeader('connection', 'close');
        for (const [socket, req] of sockets) if (req === null || !req.complete) socket.destroy();
      });
      return closing;
    },
  };
}

function toKeys(secret: WebhookSecret | readonly WebhookSecret[]): WebhookSecret[] {
  const list = Array.isArray(secret) ? (secret as readonly WebhookSecret[]) : [secret as WebhookSecret];
  if (list.length === 0) throw new ConfigError('secret', 'is an empty list; pass at least one secret or leave it out');
  return list.map((s, i) => webhookKey(s, list.length > 1 ? `secret[${i}]` : 'secret'));
}

function int(field: string, value: number | undefined, fallback: number, min: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < min) throw new ConfigError(field, `must be an integer >= ${min}, got ${String(value)}`);
  return value;
}
