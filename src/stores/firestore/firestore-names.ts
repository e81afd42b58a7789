/**
 * Collection names of the Firestore backend, the bucket of a key, and the
 * outbox position. Names are validated (letters, digits, underscores), so
 * no configuration value can reach another path of the database.
 */
import { crc32 } from 'node:zlib';
import type { CollectionReference, Firestore, Timestamp } from '@google-cloud/firestore';
import { ConfigError } from '../../core/errors.ts';
import { checkIdentifier } from '../../core/identifiers.ts';

export interface FirestoreNamesOptions {
  /** The outbox collection (top level); the buckets, relays and audit collections take it as a prefix. Default: `txbox_outbox`. */
  readonly collection?: string;
}

export interface FirestoreNames {
  readonly collection: string;
  readonly outbox: string;
  readonly buckets: string;
  readonly relays: string;
  readonly audit: string;
}

/** Validates the names (`collection` named in the error). Firestore allows more, but these also read well in logs and URLs. */
export function firestoreNames(options: FirestoreNamesOptions = {}): FirestoreNames {
  const collection = checkIdentifier('collection', options.collection ?? 'txbox_outbox', 100);
  if (/^__.*__$/.test(collection)) throw new ConfigError('collection', `${JSON.stringify(collection)} is reserved by Firestore (names matching __.*__); choose another, e.g. "txbox_outbox"`);
  return Object.freeze({ collection, outbox: collection, buckets: `${collection}_buckets`, relays: `${collection}_relays`, audit: `${collection}_audit` });
}

/** The collections, bound to one Firestore instance. */
export interface FirestoreCollections {
  readonly outbox: CollectionReference;
  readonly buckets: CollectionReference;
  readonly relays: CollectionReference;
  readonly audit: CollectionReference;
}

export function collections(db: Firestore, names: FirestoreNames): FirestoreCollections {
  return { outbox: db.collection(names.outbox), buckets: db.collection(names.buckets), relays: db.collection(names.relays), audit: db.collection(names.audit) };
}

/** Buckets relays share (as on the SQL stores). */
export const BUCKETS = 256;

/** The bucket of a key: CRC-32 of its UTF-8 bytes, low 8 bits (the MySQL store's `CRC32(key) & 255`). */
export function bucketOf(key: string): number {
  return crc32(key) & 255;
}

/**
 * An event's place in outbox order: `ts`, its transaction's commit time
 * (a server timestamp), then the document id, a UUIDv7 made at `enqueue`
 * (increasing within a process, so the events of one transaction, and of
 * one process's transactions that commit in the same instant, keep the
 * order they were written in). Firestore orders a query by the same two.
 */
export interface Position {
  readonly ts: Timestamp;
  readonly docId: string;
}

export function comparePositions(a: Position, b: Position): number {
  return a.ts.seconds - b.ts.seconds || a.ts.nanoseconds - b.ts.nanoseconds || (a.docId < b.docId ? -1 : a.docId > b.docId ? 1 : 0);
}

/** Largest document Firestore stores (1 MiB less 4 bytes), and what the event's other fields and the field names may take of it. */
export const MAX_DOCUMENT_BYTES = 1_048_572;
export const DOCUMENT_OVERHEAD_BYTES = 16_384;
/**
 * What txbox writes in one commit at most: 9.5 MiB of Firestore's 10 MiB
 * per request (cloud.google.com/firestore/quotas, "Maximum API request
 * size"), the rest left to the caller's own writes in the same transaction
 * and to the request's framing.
 */
export const MAX_COMMIT_BYTES = 9_961_472;
/** Firestore queries consider only the first 1,500 bytes of a string's UTF-8 (firestore/docs/concepts/data-types): a longer key cannot be told from another with the same beginning. */
export const MAX_QUERIED_BYTES = 1_500;

/** A value's size as Firestore counts it (firestore/docs/storage-size): a string its UTF-8 bytes + 1, null and booleans 1, numbers, timestamps and sentinels 8, maps and arrays what they hold. */
function valueBytes(v: unknown): number {
  if (typeof v === 'string') return Buffer.byteLength(v, 'utf8') + 1;
  if (v === null || v === undefined || typeof v === 'boolean') return 1;
  if (Array.isArray(v)) return v.reduce((n: number, x) => n + valueBytes(x), 0);
  if (typeof v === 'object' && Object.getPrototypeOf(v) === Object.prototype) return fieldsBytes(v as Record<string, unknown>);
  return 8;
}

function fieldsBytes(data: Record<string, unknown>): number {
  let n = 0;
  for (const [k, v] of Object.entries(data)) n += Buffer.byteLength(k, 'utf8') + 1 + valueBytes(v);
  return n;
}

/** A document's size as Firestore counts it: its name (the path, + 16), its fields (names and values), + 32. */
export function documentBytes(path: string, data: Record<string, unknown>): number {
  return Buffer.byteLength(path, 'utf8') + 1 + 16 + fieldsBytes(data) + 32;
}

export interface FirestoreInboxNamesOptions {
  /** The inbox collection (top level); the per-key lock and audit collections take it as a prefix. Default: `txbox_inbox`. */
  readonly collection?: string;
}

export interface FirestoreInboxNames {
  readonly collection: string;
  readonly inbox: string;
  /** One document per (consumer, key) of versioned events: the per-key serialization (docs/stores/firestore.md#the-inbox). */
  readonly keys: string;
  readonly audit: string;
}

/** Validates the inbox's names (`collection` named in the error), as `firestoreNames` does the outbox's. */
export function firestoreInboxNames(options: FirestoreInboxNamesOptions = {}): FirestoreInboxNames {
  const collection = checkIdentifier('collection', options.collection ?? 'txbox_inbox', 100);
  if (/^__.*__$/.test(collection)) throw new ConfigError('collection', `${JSON.stringify(collection)} is reserved by Firestore (names matching __.*__); choose another, e.g. "txbox_inbox"`);
  return Object.freeze({ collection, inbox: collection, keys: `${collection}_keys`, audit: `${collection}_audit` });
}

/** Longest consumer name the Firestore inbox takes (it is part of a document id, at most 1,500 bytes). */
export const MAX_CONSUMER_LENGTH = 200;

/** Checks a consumer name (`consumer` named in the error). */
export function checkConsumer(consumer: unknown): string {
  if (typeof consumer !== 'string' || consumer.length === 0 || consumer.length > MAX_CONSUMER_LENGTH) {
    throw new ConfigError('consumer', `must be a name of 1 to ${MAX_CONSUMER_LENGTH} characters (part of the Firestore inbox's document ids), got ${typeof consumer === 'string' ? `${consumer.length} characters` : typeof consumer}`);
  }
  return consumer;
}

/**
 * The inbox document of (consumer, canonical event id): the consumer name
 * URI-encoded (no `/`, which Firestore reads as a path; `:` encoded too, so
 * the separator is unambiguous), `:`, the id.
 */
export function inboxDocId(consumer: string, eventId: string): string {
  return `${encodeURIComponent(consumer)}:${eventId}`;
}
