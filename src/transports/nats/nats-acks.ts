/**
 * JetStream publishes with their acks on one reply subscription, the way the
 * Go client's PublishAsync works: each message is published with the reply
 * subject `<inbox>.<token>`, and the stream's ack (or error, or the server's
 * 503 "no responders" status) comes back to it. nats.js's `js.publish()` is
 * a request per message instead; its bookkeeping (a subscription entry, a
 * timer and, in @nats-io/nats-core 3.4, an Error with a stack trace for every
 * ack) took about a third of the CPU of a relay draining to NATS.
 *
 * Failures are Errors named like nats.js's own (`NoResponders`,
 * `TimeoutError`, `JetStreamApiError` with `apiError()`, `JetStreamError`),
 * so `classifyPublishError` reads both alike.
 */
import { createInbox, type Msg, type MsgHdrs, type NatsConnection, type Subscription } from '@nats-io/transport-node';

export interface PubAck {
  readonly stream: string;
  readonly seq: number;
  readonly duplicate: boolean;
}

export type AckResult = { readonly ok: true; readonly ack: PubAck } | { readonly ok: false; readonly error: Error };

interface ApiError {
  readonly code?: number;
  readonly err_code?: number;
  readonly description?: string;
}

/** A failure named after the nats.js error it stands for. */
export class AckFailure extends Error {
  readonly #api: ApiError | undefined;
  constructor(name: 'NoResponders' | 'TimeoutError' | 'JetStreamApiError' | 'JetStreamError', message: string, api?: ApiError) {
    super(message);
    this.name = name;
    this.#api = api;
  }

  /** The JetStream API error of a `JetStreamApiError`, as nats.js gives it. */
  apiError(): ApiError | undefined {
    return this.#api;
  }
}

interface Pending {
  readonly subject: string;
  readonly settle: (result: AckResult) => void;
}

/** The acks of one connection's publishes. */
export class JetStreamAcks {
  readonly #nc: NatsConnection;
  readonly #prefix: string;
  readonly #sub: Subscription;
  readonly #pending = new Map<string, Pending>();
  #next = 0;

  constructor(nc: NatsConnection) {
    this.#nc = nc;
    const inboxPrefix = (nc as unknown as { options?: { inboxPrefix?: string } }).options?.inboxPrefix;
    this.#prefix = `${createInbox(inboxPrefix)}.`;
    this.#sub = nc.subscribe(`${this.#prefix}*`, { callback: (err, msg) => this.#onReply(err, msg) });
  }

  /**
   * Publishes `body` to `subject` and calls `settle` once with the stream's
   * ack or the failure. Returns a token for `cancel`.
   */
  publish(subject: string, body: Uint8Array, headers: MsgHdrs, settle: (result: AckResult) => void): string {
    const token = (this.#next++).toString(36);
    this.#pending.set(token, { subject, settle });
    try {
      this.#nc.publish(subject, body, { reply: this.#prefix + token, headers });
    } catch (err) {
      this.#pending.delete(token);
      settle({ ok: false, error: err as Error });
    }
    return token;
  }

  /** Stops waiting for `token`'s ack and settles it with `error` (a timeout, an abort). False if it had settled already. */
  cancel(token: string, error: Error): boolean {
    const p = this.#pending.get(token);
    if (!p) return false;
    this.#pending.delete(token);
    p.settle({ ok: false, error });
    return true;
  }

  /** Stops waiting for `token`'s ack without settling it. False if it had settled already. */
  forget(token: string): boolean {
    return this.#pending.delete(token);
  }

  /** The server refused a publish to `subject` (permissions): every publish to it waiting for an ack fails with `error`. */
  failSubject(subject: string, error: Error): void {
    for (const [token, p] of this.#pending) {
      if (p.subject !== subject) continue;
      this.#pending.delete(token);
      p.settle({ ok: false, error });
    }
  }

  /** Unsubscribes; waiting publishes fail with `error`. */
  close(error: Error): void {
    this.#sub.unsubscribe();
    this.#failAll(error);
  }

  #failAll(error: Error): void {
    const all = [...this.#pending.values()];
    this.#pending.clear();
    for (const p of all) p.settle({ ok: false, error });
  }

  #onReply(err: Error | null, msg: Msg): void {
    // The reply subscription itself failed (no permission to subscribe to the inbox): no ack can come.
    if (err) return this.#failAll(err);
    const token = msg.subject.slice(this.#prefix.length);
    const p = this.#pending.get(token);
    if (!p) return; // timed out or aborted before the ack came
    this.#pending.delete(token);
    p.settle(parseAck(msg, p.subject));
  }
}

/** The stream's answer to one publish. */
function parseAck(msg: Pick<Msg, 'data' | 'headers'>, subject: string): AckResult {
  const h = msg.headers;
  if (msg.data.length === 0 && h?.hasError) {
    if (h.code === 503) return { ok: false, error: new AckFailure('NoResponders', `no responders: '${subject}'`) };
    return { ok: false, error: new AckFailure('JetStreamError', `the server answered with status ${h.code} ${h.description}`) };
  }
  let answer: { stream?: unknown; seq?: unknown; duplicate?: unknown; error?: ApiError };
  try {
    answer = JSON.parse(Buffer.from(msg.data.buffer, msg.data.byteOffset, msg.data.byteLength).toString('utf8')) as typeof answer;
  } catch (err) {
    return { ok: false, error: err as Error };
  }
  if (answer === null || typeof answer !== 'object') return { ok: false, error: new AckFailure('JetStreamError', 'invalid ack response') };
  if (answer.error) return { ok: false, error: new AckFailure('JetStreamApiError', answer.error.description ?? 'JetStream API error', answer.error) };
  if (typeof answer.stream !== 'string' || answer.stream === '') return { ok: false, error: new AckFailure('JetStreamError', 'invalid ack response') };
  return { ok: true, ack: { stream: answer.stream, seq: Number(answer.seq), duplicate: answer.duplicate === true } };
}
