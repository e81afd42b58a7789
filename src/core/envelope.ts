/** JSON values: what a payload may contain. */
export type JsonValue = null | boolean | number | string | readonly JsonValue[] | { readonly [key: string]: JsonValue };

/** Event headers: a flat string map (trace context, content type, schema version). */
export type EventHeaders = Readonly<Record<string, string>>;

/**
 * The envelope of one event, as stored in the outbox and handed to transports.
 * `id` is a UUIDv7 and the dedup key everywhere; `key` is the ordering key
 * (default `aggregateType:aggregateId`): events of one key are published in
 * outbox order.
 */
export interface OutboxEvent<TPayload = unknown, TType extends string = string> {
  readonly id: string;
  readonly type: TType;
  readonly aggregateType: string;
  readonly aggregateId: string;
  readonly key: string;
  readonly destination: string;
  readonly payload: TPayload;
  /**
   * The payload as JSON text, when the event was read from a store that has
   * it (the relay's claim): transports send it as it is instead of
   * serializing `payload` again, and `payload` is parsed from it only when
   * read. Absent on events built in code; then transports serialize `payload`.
   */
  readonly payloadJson?: string;
  readonly headers: EventHeaders;
  readonly occurredAt: Date;
  /** Per-aggregate version, increasing; null when the producer does not track one. */
  readonly version: number | null;
}

/**
 * The payload as JSON text, for a transport to send: the stored text when the
 * event has it (`payloadJson`), otherwise `payload` serialized (`undefined`
 * as `null`). Returns undefined for a payload JSON cannot represent (a
 * function, a symbol); throws where `JSON.stringify` throws (a cycle, a BigInt).
 */
export function payloadText(event: OutboxEvent): string | undefined {
  return event.payloadJson ?? JSON.stringify(event.payload === undefined ? null : event.payload);
}

/** The event without `payloadJson`: for a copy whose payload may change, or that is stored with its payload already. */
export function withoutPayloadText<E extends OutboxEvent>(event: E): Omit<E, 'payloadJson'> {
  const { payloadJson: _text, ...rest } = event;
  return rest;
}

/** An outbox event together with the relay's bookkeeping for it. */
export interface StoredEvent extends OutboxEvent {
  /** Outbox order: assigned at insert, increasing. */
  readonly seq: number;
  /** The bucket (hash slot of `key`) that relays share among themselves. */
  readonly bucket: number;
  /** Publish attempts made so far (persisted across restarts). */
  readonly attempts: number;
  /** Routes that already acked this event (when a relay publishes to several transports). */
  readonly routesDone: readonly string[];
  /** When the row was written (the database's `created_at`), in epoch ms, when the store reads it: for the commit-to-ack metric. */
  readonly createdAtMs?: number;
}

/** What a store read of an event: every field of a StoredEvent, the payload as its stored JSON text. */
export type StoredEventFields = Omit<StoredEvent, 'payload' | 'payloadJson' | 'createdAtMs'> & {
  readonly payloadJson: string;
  /** Undefined when the store does not read it: the event then has no `createdAtMs`. */
  readonly createdAtMs?: number | undefined;
};

/** The parsed payload of an event from storedEvent (UNPARSED until `payload` is first read); not enumerable. */
const PARSED = Symbol('txbox.parsedPayload');
const UNPARSED = Symbol('txbox.unparsed');

/**
 * The one getter of every stored event's `payload`: parses payloadJson on the
 * first read and keeps it in the event's slot. An event frozen by its reader,
 * or a copy of the accessor without the slot, parses on every read instead
 * of failing.
 */
function lazyPayload(this: { readonly payloadJson: string; [PARSED]?: unknown }): unknown {
  const slot = this[PARSED];
  if (slot !== UNPARSED && slot !== undefined) return slot;
  const parsed: unknown = JSON.parse(this.payloadJson);
  if (slot === UNPARSED) Reflect.set(this, PARSED, parsed); // false, not thrown, on a frozen event
  return parsed;
}
const PAYLOAD_PROPERTY: PropertyDescriptor = { get: lazyPayload, enumerable: true, configurable: true };
const PARSED_SLOT: PropertyDescriptor = { value: UNPARSED, writable: true, enumerable: false, configurable: true };

/**
 * A StoredEvent from what a store read, with `payload` parsed from its JSON
 * text on first read only (transports send payloadJson as it is). `payload`
 * is an own enumerable accessor, so a spread or JSON.stringify of the event
 * has the parsed payload, as with a plain object. It runs once per event on
 * the relay's hot path: every event shares one getter function and its
 * properties are added in one order, so V8 keeps it a fast-properties object
 * (about 330 bytes); an object literal with a `get payload()` of its own is a
 * dictionary-mode object of about 1.1 KB, slower on every property read.
 */
export function storedEvent(f: StoredEventFields): StoredEvent {
  // Built in two steps, the accessor between them, so that the keys keep the order of the plain-object events before.
  const e = {
    seq: f.seq,
    id: f.id,
    type: f.type,
    aggregateType: f.aggregateType,
    aggregateId: f.aggregateId,
    key: f.key,
    bucket: f.bucket,
    destination: f.destination,
    payloadJson: f.payloadJson,
  } as { -readonly [K in keyof StoredEvent]: StoredEvent[K] };
  Object.defineProperty(e, 'payload', PAYLOAD_PROPERTY);
  e.headers = f.headers;
  e.occurredAt = f.occurredAt;
  e.version = f.version;
  e.attempts = f.attempts;
  e.routesDone = f.routesDone;
  if (f.createdAtMs !== undefined) e.createdAtMs = f.createdAtMs;
  Object.defineProperty(e, PARSED, PARSED_SLOT);
  return e;
}

/** The default ordering key of an aggregate. */
export function defaultKey(aggregateType: string, aggregateId: string): string {
  return `${aggregateType}:${aggregateId}`;
}

/**
 * Sets a header as an own property, so that a header named `__proto__` (a
 * legal header name) is kept rather than swallowed by the prototype setter.
 */
export function ownHeader<T>(headers: Record<string, T>, name: string, value: T): void {
  Object.defineProperty(headers, name, { value, enumerable: true, writable: true, configurable: true });
}
