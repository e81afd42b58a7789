import { defaultKey } from './envelope.ts';
import { ConfigError, InvalidEventError, NotInTransactionError, PayloadTooLargeError, UnknownDestinationError } from './errors.ts';
import type { EventDefinition, NewEvent } from './events.ts';
import { LONE_SURROGATE_MESSAGE, serializePayload, textProblem } from './json.ts';
import type { OutboxStore, PreparedEvent, SqlExecutor } from './ports.ts';
import type { StandardSchemaV1 } from './standard-schema.ts';
import { isUuid, uuidv7 } from './uuid.ts';
import { withActiveTraceContext } from './tracing.ts';

export interface OutboxOptions<Tx = SqlExecutor> {
  /** Where events are written, e.g. `new PostgresOutboxStore({ schema: 'txbox' })`. Required. Its transaction type is `enqueue`'s. */
  readonly store: OutboxStore<Tx>;
  /** The event definitions this outbox writes; their destinations are the known ones. Default: none. */
  readonly events?: readonly EventDefinition<string, any, any>[];
  /** Destinations allowed in addition to those of `events`. Default: none. */
  readonly destinations?: readonly string[];
  /**
   * Largest event accepted by `enqueue`, in bytes: the serialized payload plus
   * the headers (each name and value, UTF-8). Default: 1 MiB (1048576).
   */
  readonly maxPayloadBytes?: number;
  /** Largest number of events in one `enqueue` call. Default: 10000. */
  readonly maxBatch?: number;
  /**
   * Lets `enqueue` write outside a transaction (a pg Pool, a client before
   * BEGIN, a PGlite, Kysely, Knex or Drizzle database object): each event then
   * commits on its own, whatever happens to your business change. Default:
   * false, and such an `enqueue` throws NotInTransactionError before any SQL.
   */
  readonly allowAutocommit?: boolean;
}

export interface ResolvedOutboxOptions<Tx = SqlExecutor> {
  readonly store: OutboxStore<Tx>;
  readonly destinations: ReadonlySet<string>;
  readonly maxPayloadBytes: number;
  readonly maxBatch: number;
  readonly allowAutocommit: boolean;
}

const ONE_MIB = 1024 * 1024;

export function resolveOutboxOptions<Tx = SqlExecutor>(options: OutboxOptions<Tx>): ResolvedOutboxOptions<Tx> {
  if (options === null || typeof options !== 'object') throw new ConfigError('options', 'pass an options object');
  const store = options.store as OutboxStore<Tx> | undefined;
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
  const allowAutocommit = options.allowAutocommit ?? false;
  if (typeof allowAutocommit !== 'boolean') throw new ConfigError('allowAutocommit', `must be true or false, got ${String(allowAutocommit)}`);
  return Object.freeze({ store, destinations, maxPayloadBytes, maxBatch, allowAutocommit });
}

function positiveInt(field: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value <= 0) throw new ConfigError(field, `must be a positive integer, got ${String(value)}`);
  return value;
}

/**
 * The write side of txbox. Create one per outbox table and share it. `Tx`
 * is the store's transaction type (`SqlExecutor` for PostgreSQL and PGlite).
 */
export interface Outbox<Tx = SqlExecutor> {
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
  enqueue(tx: Tx, events: NewEvent<any, string> | readonly NewEvent<any, string>[]): Promise<string[]>;
  readonly options: ResolvedOutboxOptions<Tx>;
}

/**
 * Creates the write side of an outbox. See `Outbox.enqueue`. The transaction
 * type is inferred from the store, so a client of another database does not compile.
 */
export function createOutbox<Tx = SqlExecutor>(options: OutboxOptions<Tx>): Outbox<Tx> {
  const resolved = resolveOutboxOptions(options);
  return {
    options: resolved,
    async enqueue(tx, events) {
      if (tx === null || tx === undefined) throw new InvalidEventError('tx', `is not a transaction: pass the caller's client or transaction object, got ${String(tx)}`);
      const problem = resolved.store.checkTransaction?.(tx);
      if (problem?.kind === 'invalid') throw new InvalidEventError('tx', problem.message);
      if (problem?.kind === 'autocommit' && !resolved.allowAutocommit) {
        throw new NotInTransactionError(`${problem.message}; or create the outbox with allowAutocommit: true to write outside a transaction on purpose`);
      }
      const list: readonly NewEvent<any, string>[] = Array.isArray(events) ? events : [events as NewEvent<any, string>];
      if (list.length === 0) return [];
      if (list.length > resolved.maxBatch) {
        throw new InvalidEventError('events', `${list.length} events in one call exceed maxBatch (${resolved.maxBatch}); split the call`);
      }
      const prepared: PreparedEvent[] = [];
      for (let i = 0; i < list.length; i++) {
        // Synchronous unless a schema validates asynchronously: without an await before it, the
        // INSERT is sent in the caller's turn of the event loop, with the statements it pipelines with.
        const event = prepareEvent(list[i]!, list.length === 1 ? 'event' : `events[${i}]`, resolved);
        prepared.push(event instanceof Promise ? await event : event);
      }
      await resolved.store.insert(tx, prepared);
      return prepared.map((e) => e.id);
    },
  };
}

const encoder = new TextEncoder();

/** Validates one event and builds its row: synchronously, unless its schema's validation returns a Promise. */
function prepareEvent(event: NewEvent<any, string>, at: string, options: Pick<ResolvedOutboxOptions<unknown>, 'destinations' | 'maxPayloadBytes'>): PreparedEvent | Promise<PreparedEvent> {
  if (event === null || typeof event !== 'object') throw new InvalidEventError(at, 'is not an event object; create events with an event definition');
  const type = requireText(`${at}.type`, event.type);
  const aggregateType = requireText(`${at}.aggregateType`, event.aggregateType);
  const destination = requireText(`${at}.destination`, event.destination);
  if (!options.destinations.has(destination)) {
    throw new UnknownDestinationError(`${at}.destination`, destination, [...options.destinations]);
  }
  const rawAggregateId: unknown = event.aggregateId;
  if (typeof rawAggregateId !== 'string' && !(typeof rawAggregateId === 'number' && Number.isFinite(rawAggregateId))) {
    throw new InvalidEventError(`${at}.aggregateId`, `must be a non-empty string or a finite number (the id of what changed, e.g. the order id), got ${describe(rawAggregateId)}`);
  }
  const aggregateId = typeof rawAggregateId === 'number' ? String(rawAggregateId) : requireText(`${at}.aggregateId`, rawAggregateId);
  const key = event.key === undefined ? defaultKey(aggregateType, aggregateId) : requireText(`${at}.key`, event.key);
  checkKeySize(`${at}.key`, key, event.key === undefined);
  const fields = { type, aggregateType, aggregateId, key, destination };
  if (!event.schema) return finishEvent(event, at, options, fields, event.payload);
  const result = event.schema['~standard'].validate(event.payload);
  if (result instanceof Promise) return result.then((r) => finishEvent(event, at, options, fields, validated(r, at, type)));
  return finishEvent(event, at, options, fields, validated(result, at, type));
}

/** The payload a Standard Schema validation gave back, or the error naming the first issue's path. */
function validated(result: StandardSchemaV1.Result<unknown>, at: string, type: string): unknown {
  if (result.issues) {
    const issue = result.issues[0];
    const path = issue?.path?.map((p) => (typeof p === 'object' ? String(p.key) : String(p))).join('.') ?? '';
    throw new InvalidEventError(`${at}.payload${path ? '.' + path : ''}`, `failed ${type} schema validation: ${issue?.message ?? 'invalid'}`);
  }
  return result.value;
}

type EventFields = Pick<PreparedEvent, 'type' | 'aggregateType' | 'aggregateId' | 'key' | 'destination'>;

function finishEvent(event: NewEvent<any, string>, at: string, options: Pick<ResolvedOutboxOptions<unknown>, 'destinations' | 'maxPayloadBytes'>, fields: EventFields, payload: unknown): PreparedEvent {
  const payloadJson = serializePayload(`${at}.payload`, payload);
  // The active span's context joins the headers before the checks, so it is validated and counted in the size limit too.
  const rawHeaders = withActiveTraceContext(event.headers);
  // At most 3 UTF-8 bytes per UTF-16 unit: a payload that fits so needs no count, unless headers share the limit.
  const bytes = payloadJson.length * 3 <= options.maxPayloadBytes && isEmptyRecord(rawHeaders) ? payloadJson.length : encoder.encode(payloadJson).length;
  if (bytes > options.maxPayloadBytes) throw new PayloadTooLargeError(`${at}.payload`, bytes, options.maxPayloadBytes);
  const headers = checkHeaders(`${at}.headers`, rawHeaders, options.maxPayloadBytes - bytes, bytes, options.maxPayloadBytes);
  let id: string;
  if (event.id === undefined) id = uuidv7();
  else if (typeof event.id === 'string' && isUuid(event.id)) id = event.id.toLowerCase();
  else throw new InvalidEventError(`${at}.id`, `must be a UUID string, got ${typeof event.id === 'string' ? JSON.stringify(event.id.slice(0, 60)) : describe(event.id)} (leave it out to get a fresh UUIDv7)`);
  const version = event.version ?? null;
  if (version !== null && (!Number.isSafeInteger(version) || version < 0)) {
    throw new InvalidEventError(`${at}.version`, `must be a non-negative integer, got ${String(version)}`);
  }
  const occurredAt = event.occurredAt ?? new Date();
  if (!(occurredAt instanceof Date) || Number.isNaN(occurredAt.getTime())) throw new InvalidEventError(`${at}.occurredAt`, `must be a valid Date, got ${occurredAt instanceof Date ? 'an Invalid Date' : describe(occurredAt)}`);
  // Dates JavaScript holds but the stores cannot: year 0 and before, and 5-digit years, which the ISO text sent cannot carry.
  const year = occurredAt.getUTCFullYear();
  if (year < 1 || year > 9999) throw new InvalidEventError(`${at}.occurredAt`, `must be within the years 1 to 9999, got year ${year}`);
  return { id, type: fields.type, aggregateType: fields.aggregateType, aggregateId: fields.aggregateId, key: fields.key, destination: fields.destination, payloadJson, headers, occurredAt, version };
}

/**
 * The ordering key goes into the outbox's key indexes: PostgreSQL's btree
 * refuses an entry over about 2,700 bytes, inside the caller's transaction.
 * Keys are capped at 1,000 characters and 2,000 UTF-8 bytes, the default one
 * (`aggregateType:aggregateId`) included.
 */
function checkKeySize(field: string, key: string, isDefault: boolean): void {
  const from = isDefault ? ' (the default key, aggregateType:aggregateId; pass a shorter key, e.g. a hash of the aggregate id)' : '';
  if (key.length > 1000) throw new InvalidEventError(field, `must be at most 1000 characters, got ${key.length}${from}`);
  if (key.length * 3 > 2000) {
    const bytes = encoder.encode(key).length;
    if (bytes > 2000) throw new InvalidEventError(field, `must be at most 2000 bytes in UTF-8, got ${bytes}${from}`);
  }
}

function isEmptyRecord(o: unknown): boolean {
  if (o === undefined || o === null) return true;
  if (typeof o !== 'object') return false; // checkHeaders names what is wrong with it
  for (const _ in o) return false;
  return true;
}

function requireText(field: string, value: unknown): string {
  if (typeof value !== 'string' || value.length === 0) throw new InvalidEventError(field, `must be a non-empty string, got ${describe(value)}`);
  if (value.length > 1000) throw new InvalidEventError(field, `must be at most 1000 characters, got ${value.length}`);
  const problem = textProblem(value);
  if (problem === 'nul') throw new InvalidEventError(field, 'must not contain a NUL character (\\u0000), which PostgreSQL cannot store');
  if (problem === 'surrogate') throw new InvalidEventError(field, LONE_SURROGATE_MESSAGE);
  return value;
}

function describe(value: unknown): string {
  if (value === '') return 'an empty string';
  if (value === null || value === undefined) return String(value);
  return `a ${typeof value}`;
}

/** Most headers one event may carry. */
export const MAX_HEADERS = 100;
/** Header names: visible ASCII (no spaces, no control characters), 1 to 200 characters. */
const HEADER_NAME = /^[\x21-\x7e]{1,200}$/;
/** Control characters other than tab (CR and LF would split an HTTP header; NUL cannot be stored). */
const HEADER_VALUE_CONTROL = /[\u0000-\u0008\u000a-\u001f\u007f]/;

/**
 * Validates headers before any SQL: names are visible ASCII of 1-200
 * characters, values are strings without control characters (tab allowed) and
 * with well-formed Unicode, at most MAX_HEADERS of them, and their UTF-8 size
 * (names plus values) fits in what the payload left of maxPayloadBytes.
 */
function checkHeaders(field: string, raw: unknown, room: number, payloadBytes: number, limit: number): Readonly<Record<string, string>> {
  if (raw === undefined) return {};
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new InvalidEventError(field, `must be an object of string values, got ${Array.isArray(raw) ? 'an array' : describe(raw)}`);
  const entries = Object.entries(raw as Record<string, unknown>);
  if (entries.length > MAX_HEADERS) throw new InvalidEventError(field, `has ${entries.length} headers, over the limit of ${MAX_HEADERS}; put the data in the payload`);
  let bytes = 0;
  for (const [name, value] of entries) {
    if (name.length === 0) throw new InvalidEventError(field, 'has an empty header name; give every header a name');
    if (!HEADER_NAME.test(name)) {
      throw new InvalidEventError(
        field,
        `header name ${JSON.stringify(name)} is not allowed: names are 1 to 200 visible ASCII characters (letters, digits, punctuation; no spaces, control or non-ASCII characters), e.g. "traceparent"`,
      );
    }
    const at = `${field}.${name}`;
    if (typeof value !== 'string') throw new InvalidEventError(at, `header values must be strings, got ${describe(value)}`);
    const problem = textProblem(value);
    if (problem === 'nul') throw new InvalidEventError(at, 'must not contain a NUL character (\\u0000), which PostgreSQL cannot store');
    if (HEADER_VALUE_CONTROL.test(value)) throw new InvalidEventError(at, 'must not contain a control character (line breaks included; tab is allowed); encode the value, e.g. as base64 or JSON');
    if (problem === 'surrogate') throw new InvalidEventError(at, LONE_SURROGATE_MESSAGE);
    bytes += name.length + (value.length <= 64 && !/[^\x00-\x7f]/.test(value) ? value.length : encoder.encode(value).length);
    if (bytes > room) throw new PayloadTooLargeError(field, payloadBytes + headerBytes(entries), limit, 'headers');
  }
  return raw as Readonly<Record<string, string>>;
}

function headerBytes(entries: [string, unknown][]): number {
  let n = 0;
  for (const [name, value] of entries) n += name.length + (typeof value === 'string' ? encoder.encode(value).length : 0);
  return n;
}
