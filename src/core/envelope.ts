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
