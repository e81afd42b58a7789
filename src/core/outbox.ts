import { defaultKey } from './envelope.ts';
import { ConfigError, InvalidEventError, PayloadTooLargeError, UnknownDestinationError } from './errors.ts';
import type { EventDefinition, NewEvent } from './events.ts';
import { serializePayload } from './json.ts';
import type { OutboxStore, PreparedEvent, SqlExecutor } from './ports.ts';
import { isUuid, uuidv7 } from './uuid.ts';

export interface OutboxOptions {
  /** Where events are written, e.g. `new PostgresOutboxStore({ schema: 'txbox' })`. Required. */
  readonly store: OutboxStore;
  /** The event definitions this outbox writes; their destinations are the known ones. Default: none. */
  readonly events?: readonly EventDefinition<string, any, any>[];
  /** Destinations allowed in addition to those of `events`. Default: none. */
  readonly destinations?: readonly string[];
  /** Largest serialized payload accepted by `enqueue`, in bytes. Default: 1 MiB (1048576). */
  readonly maxPayloadBytes?: number;
  /** Largest number of events in one `enqueue` call. Default: 10000. */
  readonly maxBatch?: number;
}

export interface ResolvedOutboxOptions {
  readonly store: OutboxStore;
  readonly destinations: ReadonlySet<string>;
  readonly maxPayloadBytes: number;
  readonly maxBatch: number;
}

const ONE_MIB = 1024 * 1024;

export function resolveOutboxOptions(options: OutboxOptions): ResolvedOutboxOptions {
  if (options === null || typeof options !== 'object') throw new ConfigError('options', 'pass an options object');
  const store = options.store as OutboxStore | undefined;
  if (!store || typeof store.insert !== 'function') {
    throw new ConfigError('store', 'is required: pass an outbox store such as new PostgresOutboxStore({ schema: "txbox" })');
  }
  const destinations = new Set<string>(options.destinations ?? []);
  for (const def of options.events ?? []) destinations.add(def.destination);
  if (destinations.size === 0) {
    throw new ConfigError('events', 'name at least one event definition or destination, so that enqueue can reject events for unknown destinations');
  }
  const maxPayloadBytes = positiveInt('maxPayloadBytes', options.maxPayloadBytes, ONE_MIB);
  const maxBatch = positiveInt('maxBatch', options.maxBatch, 10_000);
  return Object.freeze({ store, destinations, maxPayloadBytes, maxBatch });
}

function positiveInt(field: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value <= 0) throw new ConfigError(field, `must be a positive integer, got ${String(value)}`);
  return value;
}

/** The write side of txbox. Create one per outbox table and share it. */
export interface Outbox {
  /**
   * Writes events inside the caller's transaction: they exist if and only if
   * that transaction commits. Never begins, commits or rolls back. Every event
   * is validated (schema, JSON, size, destination) before any SQL is sent, so a
   * rejected call leaves the transaction untouched and usable.
   * Resolves with the ids of the written events, in order.
   *
   * @example
   * await client.query('BEGIN');
   * await client.query('INSERT INTO orders ...');
   * await outbox.enqueue(client, OrderCreated({ aggregateId: id, payload: { id, total } }));
   * await client.query('COMMIT');
   */
  enqueue(tx: SqlExecutor, events: NewEvent<any, string> | readonly NewEvent<any, string>[]): Promise<string[]>;
  readonly options: ResolvedOutboxOptions;
}

/** Creates the write side of an outbox. See `Outbox.enqueue`. */
export function createOutbox(options: OutboxOptions): Outbox {
  const resolved = resolveOutboxOptions(options);
  return {
    options: resolved,
    async enqueue(tx, events) {
      if (!tx || typeof tx.query !== 'function') {
        throw new InvalidEventError('tx', "is not a transaction: pass the caller's client or transaction object (anything with query(text, params))");
      }
      const list: readonly NewEvent<any, string>[] = Array.isArray(events) ? events : [events as NewEvent<any, string>];
      if (list.length === 0) return [];
      if (list.length > resolved.maxBatch) {
        throw new InvalidEventError('events', `${list.length} events in one call exceed maxBatch (${resolved.maxBatch}); split the call`);
      }
      const prepared: PreparedEvent[] = [];
      for (let i = 0; i < list.length; i++) {
        prepared.push(await prepareEvent(list[i]!, list.length === 1 ? 'event' : `events[${i}]`, resolved));
      }
      await resolved.store.insert(tx, prepared);
      return prepared.map((e) => e.id);
    },
  };
}

const encoder = new TextEncoder();

async function prepareEvent(event: NewEvent<any, string>, at: string, options: ResolvedOutboxOptions): Promise<PreparedEvent> {
  if (event === null || typeof event !== 'object') throw new InvalidEventError(at, 'is not an event object; create events with an event definition');
  const type = requireText(`${at}.type`, event.type);
  const aggregateType = requireText(`${at}.aggregateType`, event.aggregateType);
  const destination = requireText(`${at}.destination`, event.destination);
  if (!options.destinations.has(destination)) {
    throw new UnknownDestinationError(`${at}.destination`, destination, [...options.destinations]);
  }
  const rawAggregateId: unknown = event.aggregateId;
  const aggregateId = typeof rawAggregateId === 'number' && Number.isFinite(rawAggregateId) ? String(rawAggregateId) : requireText(`${at}.aggregateId`, rawAggregateId);
  const key = event.key === undefined ? defaultKey(aggregateType, aggregateId) : requireText(`${at}.key`, event.key);
  let payload: unknown = event.payload;
  if (event.schema) {
    let result = event.schema['~standard'].validate(payload);
    if (result instanceof Promise) result = await result;
    if (result.issues) {
      const issue = result.issues[0];
      const path = issue?.path?.map((p) => (typeof p === 'object' ? String(p.key) : String(p))).join('.') ?? '';
      throw new InvalidEventError(`${at}.payload${path ? '.' + path : ''}`, `failed ${type} schema validation: ${issue?.message ?? 'invalid'}`);
    }
    payload = result.value;
  }
  const payloadJson = serializePayload(`${at}.payload`, payload);
  const bytes = payloadJson.length * 3 <= options.maxPayloadBytes ? payloadJson.length : encoder.encode(payloadJson).length;
  if (bytes > options.maxPayloadBytes) throw new PayloadTooLargeError(`${at}.payload`, bytes, options.maxPayloadBytes);
  let id: string;
  if (event.id === undefined) id = uuidv7();
  else if (typeof event.id === 'string' && isUuid(event.id)) id = event.id.toLowerCase();
  else throw new InvalidEventError(`${at}.id`, 'must be a UUID string (leave it out to get a fresh UUIDv7)');
  const version = event.version ?? null;
  if (version !== null && (!Number.isSafeInteger(version) || version < 0)) {
    throw new InvalidEventError(`${at}.version`, `must be a non-negative integer, got ${String(version)}`);
  }
  const headers = event.headers ?? {};
  if (headers === null || typeof headers !== 'object' || Array.isArray(headers)) throw new InvalidEventError(`${at}.headers`, 'must be an object of string values');
  for (const [name, value] of Object.entries(headers)) {
    if (typeof value !== 'string') throw new InvalidEventError(`${at}.headers.${name}`, 'header values must be strings');
  }
  const occurredAt = event.occurredAt ?? new Date();
  if (!(occurredAt instanceof Date) || Number.isNaN(occurredAt.getTime())) throw new InvalidEventError(`${at}.occurredAt`, 'must be a valid Date');
  return { id, type, aggregateType, aggregateId, key, destination, payloadJson, headers, occurredAt, version };
}

function requireText(field: string, value: unknown): string {
  if (typeof value !== 'string' || value.length === 0) throw new InvalidEventError(field, 'must be a non-empty string');
  if (value.length > 1000) throw new InvalidEventError(field, 'must be at most 1000 characters');
  if (value.includes('\u0000')) throw new InvalidEventError(field, 'must not contain a NUL character');
  return value;
}
