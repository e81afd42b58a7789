import type { DocumentReference, Transaction } from '@google-cloud/firestore';
import { HoldEvent } from '../../inbox/inbox.ts';
import { ConfigError, InvalidEventError } from '../../core/errors.ts';
import type { VersionedResult } from '../postgres/postgres-projection.ts';

export type { VersionedResult } from '../postgres/postgres-projection.ts';

export interface FirestoreVersionedWrite {
  /** The read-model document, e.g. `firestore.collection('stock_view').doc(event.aggregateId)`. */
  readonly document: DocumentReference;
  /** The event's version. */
  readonly version: number;
  /** Fields to write (merged into the document: fields not named here stay). */
  readonly values: Readonly<Record<string, unknown>>;
  /** Field holding the applied version (a top-level field name). Default: `version`. */
  readonly versionField?: string;
  /**
   * What to do when versions were skipped (incoming > stored + 1, or > 1 for a new document):
   * `apply` it anyway and report the gap (default), or `hold` the event in the inbox
   * until the missing ones arrived (throws HoldEvent: let it propagate out of the inbox handler).
   */
  readonly onGap?: 'apply' | 'hold';
}

/**
 * Writes a read-model document on Firestore only when the event's version is
 * newer than the stored one (docs/guarantees.md, invariant 9): the same
 * contract and results as `applyVersioned` of `txbox/postgres`. Run it with
 * the inbox handler's `tx` (a Firestore `Transaction`), before the handler's
 * other writes: it reads the document (Firestore reads before it writes).
 * A missing document, or a missing or null version field, counts as version
 * 0. Two transactions writing one document conflict, and Firestore runs one
 * of them again, which then reads the other's version: concurrent handlers
 * of one key serialize.
 *
 * @example
 * inbox.on(StockChanged, async (event, tx) => {
 *   await applyVersioned(tx, { document: stockView.doc(event.aggregateId), version: event.version!,
 *     values: { quantity: event.payload.quantity }, onGap: 'hold' });
 * });
 */
export async function applyVersioned(tx: Transaction, u: FirestoreVersionedWrite): Promise<VersionedResult> {
  if (!Number.isSafeInteger(u.version) || u.version < 1) throw new InvalidEventError('version', `must be a positive integer (versions count from 1 per aggregate), got ${String(u.version)}`);
  const doc = u.document as DocumentReference | undefined;
  if (!doc || typeof doc.path !== 'string' || typeof doc.collection !== 'function') {
    throw new ConfigError('document', 'must be a Firestore DocumentReference, e.g. firestore.collection("stock_view").doc(event.aggregateId)');
  }
  const field = u.versionField ?? 'version';
  if (typeof field !== 'string' || !/^[A-Za-z_][A-Za-z0-9_]{0,99}$/.test(field)) {
    throw new ConfigError('versionField', `${JSON.stringify(field)} is not a plain field name; use letters, digits and underscores, e.g. "version"`);
  }
  if (Object.prototype.hasOwnProperty.call(u.values, field)) throw new ConfigError('values', `must not set ${JSON.stringify(field)}: the version field is written from \`version\``);
  const snap = await tx.get(doc);
  const raw: unknown = snap.exists ? snap.get(field) : null;
  const stored = raw === null || raw === undefined ? null : Number(raw);
  if (stored !== null && !Number.isFinite(stored)) throw new ConfigError('versionField', `${doc.path} holds ${JSON.stringify(field)} = ${JSON.stringify(String(raw))}, not a number`);
  const base = stored ?? 0;
  if (u.version <= base) return { status: 'stale', stored: base };
  const expected = base + 1;
  const gap = u.version > expected;
  if (gap && u.onGap === 'hold') throw new HoldEvent(`version ${u.version} of ${doc.path} waits for version ${expected}`);
  tx.set(doc, { ...u.values, [field]: u.version }, { merge: true });
  return gap ? { status: 'gap', stored, missing: [expected, u.version - 1] } : { status: 'applied', previous: stored };
}
