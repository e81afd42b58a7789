import { brokerOutage, startDespiteOutage } from '../../core/broker-outage.ts';
import { connect, type MsgHdrs, type NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import type { OutboxEvent } from '../../core/envelope.ts';
import { untilAborted as waitUnlessAborted } from '../../core/abort.ts';
import { AbortedError, ConfigError, TransportError } from '../../core/errors.ts';
import { TypedEmitter } from '../../core/emitter.ts';
import type { PublishOutcome, Transport } from '../../core/ports.ts';
import { AckFailure, JetStreamAcks, type AckResult } from './nats-acks.ts';
import { buildMessage, encodedHeaders } from './nats-message.ts';
import { ACK, classifyPublishError, connectFailure, fail, findError, jetStreamCheckFailure, messageOf, unroutable, type PublishFailureContext } from './nats-outcomes.ts';
import { keyToken, subjectProblem } from './nats-subjects.ts';
import { redactServer, resolveNatsTransportOptions, type NatsTransportOptions, type ResolvedNatsTransportOptions } from './nats-transport-options.ts';

export {
  redactServer,
  resolveNatsTransportOptions,
  type NatsCredentialSetting,
  type NatsTransportOptions,
  type NatsTransportTlsOptions,
  type ResolvedNatsTransportOptions,
} from './nats-transport-options.ts';

/** Events of a NatsTransport, for metrics and logs. */
export interface NatsTransportEvents {
  /** The connection changed state; nats.js reconnects by itself. `error` carries a message only. */
  connection: { readonly status: 'disconnect' | 'reconnect' | 'ldm' | 'error' | 'close'; readonly server?: string; readonly error?: string };
  /** JetStream acked a message as a duplicate of one stored within the stream's duplicate window: a re-publish after a crash or timeout, counted as success. */
  duplicate: { readonly id: string; readonly stream: string; readonly seq: number };
}

/** A destination's subject and stream, and what a failed publish to it reports (built once per destination). */
type Route = { readonly ok: true; readonly subject: string; readonly stream: string | null; readonly ctx: PublishFailureContext } | { readonly ok: false; readonly outcome: PublishOutcome };

/** An open connection and the clients made from it. */
interface Session {
  readonly nc: NatsConnection;
  /** Publishes with their acks on one reply subscription. */
  readonly acks: JetStreamAcks;
  readonly jsm: JetStreamManager;
  readonly owned: boolean;
  /** False between a disconnect and the next reconnect. */
  connected: boolean;
  /** Disconnects seen so far: a publish call that saw one fail its unacked events as destination-down. */
  disconnects: number;
  stopWatching: () => void;
}

/**
 * Publishes each event to NATS JetStream and counts it as sent once the
 * stream acked it. `Nats-Msg-Id` is the event id, so the stream's duplicate
 * window drops re-publishes (acked with `duplicate: true`, a success). All
 * events of a call are in flight at once; timeouts, outages and leader
 * elections are retriable; oversize, unroutable subjects, a wrong stream and
 * denied permissions are permanent. See docs/transports/nats.md.
 *
 * @example
 * const transport = new NatsTransport({ servers: 'nats://127.0.0.1:4222', streams: { orders: 'ORDERS' } });
 * // publishes destination "orders" to subject txbox.orders, which stream ORDERS must capture
 * const relay = createRelay({ store, transport });
 */
export class NatsTransport extends TypedEmitter<NatsTransportEvents> implements Transport {
  readonly name = 'nats';
  readonly #options: ResolvedNatsTransportOptions;
  readonly #routes = new Map<string, Route>();
  readonly #inFlight = new Set<Promise<unknown>>();
  #session: Session | null = null;
  #opening: Promise<Session> | null = null;
  #closing: Promise<void> | null = null;
  #started = false;

  /** Throws ConfigError naming the field when an option is invalid. */
  constructor(options: NatsTransportOptions = {}) {
    super();
    this.#options = resolveNatsTransportOptions(options);
  }

  /**
   * Connects (unless given a connection) and checks that JetStream answers.
   * Throws ConfigError naming `servers`, `user/pass`, `token`,
   * `authenticator` or `connection` when the address, credentials or server
   * setup are wrong. When no server answers (refused, unknown host, timeout)
   * it logs a warning and resolves: the events wait as destination-down and
   * the next publish connects. Reopens the transport after `close()`.
   */
  async start(signal?: AbortSignal): Promise<void> {
    signal?.throwIfAborted();
    if (this.#closing) {
      await this.#closing;
      this.#closing = null;
    }
    this.#started = true;
    const o = this.#options;
    // Unreachable: the first publish connects (the relay's probe); a refused login or a closed connection still throws.
    await startDespiteOutage({ transport: 'nats', address: o.serversDisplay, logger: o.logger }, async () => void (await this.#open(signal)), signal);
  }

  /**
   * Publishes every event at once and resolves with one outcome per event
   * in input order, after each ack. Never rejects for a failed event.
   * Aborting `signal` resolves the events still waiting as retriable.
   */
  publish(events: readonly OutboxEvent[], signal: AbortSignal): Promise<PublishOutcome[]> {
    if (this.#closing || !this.#started) {
      const outcome = fail('retriable', this.#closing ? 'the NATS transport is closed; call start() to reopen it' : 'the NATS transport is not started; call start() first');
      return Promise.resolve(events.map(() => outcome));
    }
    const done = this.#publishAll(events, signal);
    this.#inFlight.add(done);
    void done.finally(() => this.#inFlight.delete(done));
    return done;
  }

  /** Waits for in-flight publishes (each bounded by publishTimeoutMs), then closes the connection unless it was given. */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    this.#started = false;
    await Promise.allSettled([...this.#inFlight, this.#opening]);
    const session = this.#session;
    this.#session = null;
    if (!session) return;
    session.stopWatching();
    session.acks.close(new AckFailure('JetStreamError', 'the NATS transport closed before the ack'));
    if (session.owned) await session.nc.close().catch(() => {});
  }

  /** The open session; opens one if there is none or an owned connection closed for good (auth failure while reconnecting). */
  #open(signal?: AbortSignal): Promise<Session> {
    const s = this.#session;
    if (s && !s.nc.isClosed()) return Promise.resolve(s);
    this.#opening ??= this.#connect(signal).finally(() => (this.#opening = null));
    return this.#opening;
  }

  async #connect(signal: AbortSignal | undefined): Promise<Session> {
    const o = this.#options;
    let nc: NatsConnection;
    if (o.connection) {
      if (o.connection.isClosed()) throw new ConfigError('connection', 'is closed; pass an open NatsConnection (the transport does not reconnect a given connection)');
      nc = o.connection;
    } else {
      const connecting = connect({ ...o.connect!, servers: [...(o.connect!.servers as string[])] });
      try {
        nc = await untilAborted(connecting, signal);
      } catch (err) {
        if (err instanceof AbortedError) void connecting.then((late) => late.close(), () => {});
        throw err instanceof AbortedError ? err : connectFailure(err, o.serversDisplay, o.credentials, o.connect!.timeout ?? 0);
      }
    }
    const owned = o.connection === null;
    try {
      const jsm = await jetstreamManager(nc, { checkAPI: false, timeout: o.publishTimeoutMs });
      await untilAborted(jsm.getAccountInfo(), signal).catch((err: unknown) => {
        throw err instanceof AbortedError ? err : jetStreamCheckFailure(err, o.serversDisplay, o.credentials, o.publishTimeoutMs);
      });
      const session: Session = { nc, jsm, acks: new JetStreamAcks(nc), owned, connected: true, disconnects: 0, stopWatching: () => {} };
      this.#watch(session);
      this.#session?.stopWatching();
      this.#session?.acks.close(new AckFailure('JetStreamError', 'the NATS connection was replaced before the ack'));
      this.#session = session;
      return session;
    } catch (err) {
      if (owned) await nc.close().catch(() => {});
      throw err;
    }
  }

  /** Follows the connection's status: reconnects are nats.js's job; this keeps `connected` for route checks and re-emits the changes. */
  #watch(session: Session): void {
    const statuses = session.nc.status();
    session.stopWatching = () => (statuses as { stop?: () => void }).stop?.();
    void (async () => {
      for await (const s of statuses) {
        if (s.type === 'disconnect') {
          session.connected = false;
          session.disconnects++;
        }
        else if (s.type === 'reconnect') session.connected = true;
        else if (s.type === 'close') session.connected = false;
        // A publish the server refused (permissions) gets no ack: fail the waiting publishes to that subject now.
        if (s.type === 'error' && s.error?.name === 'PermissionViolationError') {
          const pv = s.error as Error & { operation?: string; subject?: string };
          if (pv.operation === 'publish' && pv.subject) session.acks.failSubject(pv.subject, pv);
        }
        if (s.type === 'disconnect' || s.type === 'reconnect' || s.type === 'ldm') this.emit('connection', { status: s.type, server: redactServer(s.server) });
        else if (s.type === 'error') this.emit('connection', { status: 'error', error: messageOf(s.error) });
        else if (s.type === 'close') this.emit('connection', { status: 'close' });
      }
    })().catch(() => {});
  }

  async #publishAll(events: readonly OutboxEvent[], signal: AbortSignal): Promise<PublishOutcome[]> {
    const aborted = (): PublishOutcome => fail('retriable', "aborted: the caller's signal ended the publish before JetStream acked");
    if (signal.aborted) return events.map(aborted);
    let session: Session;
    try {
      session = await untilAborted(this.#open(signal), signal);
    } catch (err) {
      // Nothing answers (started during an outage): destination-down, so the events wait instead of using up attempts.
      const outcome = err instanceof AbortedError ? aborted() : fail(brokerOutage(err) === null ? 'retriable' : 'destination-down', `cannot publish: ${messageOf(err)}`, err);
      return events.map(() => outcome);
    }
    const o = this.#options;
    const disconnects = session.disconnects;
    const outcomes = new Array<PublishOutcome | Promise<PublishOutcome> | undefined>(events.length);
    const tokens = new Map<string, number>();
    const routeChecks = new Map<string, Promise<'none' | 'found' | 'unknown'>>();
    let waiting = 0;
    let allAcked: () => void = () => {};
    const acked = new Promise<void>((resolve) => (allAcked = resolve));
    for (let i = 0; i < events.length; i++) {
      const prepared = this.#prepare(session, events[i]!);
      if ('outcome' in prepared) {
        outcomes[i] = prepared.outcome;
        continue;
      }
      waiting++;
      const settle = (result: AckResult): void => {
        outcomes[i] = this.#outcome(session, events[i]!, prepared.ctx, prepared.subject, result, routeChecks, disconnects);
        if (--waiting === 0) allAcked();
      };
      tokens.set(session.acks.publish(prepared.subject, prepared.body, encodedHeaders(prepared.headers), settle), i);
    }
    if (waiting > 0) {
      // One timer per call: what has no ack by then fails as a timeout (retriable, and checked for a missing stream).
      let timer: NodeJS.Timeout | undefined;
      const timedOut = new Promise<void>((resolve) => (timer = setTimeout(resolve, o.publishTimeoutMs)));
      await untilAborted(Promise.race([acked, timedOut]), signal).catch(() => {});
      clearTimeout(timer);
      if (waiting > 0) {
        let timeout: AckFailure | undefined;
        for (const [token, i] of tokens) {
          if (signal.aborted) {
            if (session.acks.forget(token)) outcomes[i] = aborted();
          } else {
            session.acks.cancel(token, (timeout ??= new AckFailure('TimeoutError', 'timeout')));
          }
        }
      }
    }
    const settled = await untilAborted(Promise.all(outcomes.map((x) => x ?? aborted())), signal).catch(() => null);
    if (settled) return settled;
    return Promise.all(outcomes.map((x) => (x instanceof Promise || x === undefined ? aborted() : x)));
  }

  /** The route, subject and message of one event, or the outcome that it cannot be published. */
  #prepare(session: Session, event: OutboxEvent): { readonly outcome: PublishOutcome } | { readonly subject: string; readonly body: Uint8Array; readonly headers: Uint8Array; readonly ctx: PublishFailureContext } {
    const route = this.#route(event.destination);
    if (!route.ok) return { outcome: route.outcome };
    const o = this.#options;
    const subject = o.keyInSubject ? `${route.subject}.${keyToken(event.key)}` : route.subject;
    const ctx = route.ctx;
    const built = buildMessage(event, route.stream);
    if (!built.ok) return { outcome: fail('permanent', `cannot publish to subject ${route.subject} (destination ${JSON.stringify(event.destination)}): ${built.reason}`) };
    const { message } = built;
    const max = session.nc.info?.max_payload;
    if (max !== undefined && message.bytes > max) {
      return {
        outcome: fail(
          'permanent',
          `message too large: ${message.bytes} bytes with headers, over the server's max_payload of ${max} bytes (subject ${route.subject}); store large data elsewhere and put a reference in the event, or raise max_payload on every server`,
        ),
      };
    }
    return { subject, body: message.body, headers: message.headers, ctx };
  }

  /** The outcome of one publish from its ack or failure; a failure that may mean "no stream captures the subject" is checked with JetStream. */
  #outcome(
    session: Session,
    event: OutboxEvent,
    ctx: PublishFailureContext,
    subject: string,
    result: AckResult,
    routeChecks: Map<string, Promise<'none' | 'found' | 'unknown'>>,
    disconnects: number,
  ): PublishOutcome | Promise<PublishOutcome> {
    if (result.ok) {
      if (result.ack.duplicate) this.emit('duplicate', { id: event.id, stream: result.ack.stream, seq: result.ack.seq });
      return ACK;
    }
    const failure = classifyPublishError(result.error, ctx);
    // The connection went down during the call (nats.js buffers a publish while it reconnects, so it ends as an ack
    // timeout): destination-down, so the relay pauses the destination instead of spending the events' attempts.
    if ((failure.error.kind === 'retriable' || failure.checkRoute) && (!session.connected || session.disconnects !== disconnects)) {
      return { ok: false, error: new TransportError('destination-down', `the NATS connection was down or reconnecting: ${failure.error.message}`, { cause: result.error }) };
    }
    if (!failure.checkRoute || !session.connected) return { ok: false, error: failure.error };
    let check = routeChecks.get(subject);
    if (!check) routeChecks.set(subject, (check = this.#streamFor(session, subject)));
    return check.then((found): PublishOutcome => (found === 'none' ? { ok: false, error: unroutable(ctx, failure) } : { ok: false, error: failure.error }));
  }

  /**
   * Asks JetStream which stream captures `subject`. Only its answer "no
   * stream matches" counts as 'none'; a failed lookup (JetStream down,
   * timeout) is 'unknown', so an outage is never mistaken for a routing error.
   */
  async #streamFor(session: Session, subject: string): Promise<'none' | 'found' | 'unknown'> {
    try {
      await session.jsm.streams.find(subject);
      return 'found';
    } catch (err) {
      return findError(err, 'StreamNotFoundError') && /no stream matches subject/i.test((err as Error).message) ? 'none' : 'unknown';
    }
  }

  #route(destination: string): Route {
    let route = this.#routes.get(destination);
    if (route) return route;
    const o = this.#options;
    const explicit = o.subjects.get(destination);
    const subject = explicit ?? (o.subjectPrefix === '' ? destination : `${o.subjectPrefix}.${destination}`);
    const problem = explicit === undefined ? subjectProblem(destination) : null;
    if (problem) {
      route = {
        ok: false,
        outcome: fail('permanent', `destination ${JSON.stringify(destination)} cannot be part of a NATS subject: it ${problem}; map it to a subject in subjects.${destination}`),
      };
    } else {
      const stream = o.streams.get(destination) ?? null;
      route = { ok: true, subject, stream, ctx: { destination, subject, keyInSubject: o.keyInSubject, stream, timeoutMs: o.publishTimeoutMs, credentials: o.credentials } };
    }
    // Bounded by the number of distinct destinations, which the outbox fixes.
    this.#routes.set(destination, route);
    return route;
  }
}

/** Settles with `promise`, or rejects with AbortedError when `signal` aborts first. */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return promise;
  return waitUnlessAborted(promise, signal).catch((err: unknown) => {
    throw signal.aborted && err === signal.reason ? new AbortedError() : err;
  });
}
