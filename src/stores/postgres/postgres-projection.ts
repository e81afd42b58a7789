import { HoldEvent } from '../../inbox/inbox.ts';
import { ConfigError, InvalidEventError } from '../../core/errors.ts';
import { checkIdentifier, quoteIdent } from '../../core/identifiers.ts';
import type { SqlExecutor } from '../../core/ports.ts';
import { queryPrepared } from './prepared.ts';

export interface VersionedUpsert {
  /** The read-model table, optionally schema-qualified (`app.stock_view`). Names are validated and quoted. */
  readonly table: string;
  /** Key column(s) and values of the row, e.g. `{ order_id: event.aggregateId }`. */
  readonly id: Readonly<Record<string, unknown>>;
  /** The event's version. */
  readonly version: number;
  /** Other columns to write. */
  readonly values: Readonly<Record<string, unknown>>;
  /** Column holding the applied version. Default: `version`. */
  readonly versionColumn?: string;
  /**
   * What to do when versions were skipped (incoming > stored + 1, or > 1 for a new row):
   * `apply` it anyway and report the gap (default), or `hold` the event in the inbox
   * until the missing ones arrived (throws HoldEvent, which must roll the transaction
   * back: let it propagate out of the inbox handler).
   */
  readonly onGap?: 'apply' | 'hold';
  /**
   * Run the upsert as a named prepared statement when `tx` is a node-postgres
   * client: one per table and column set, parsed and planned once per
   * connection. Turn off behind a pooler that cannot keep prepared statements.
   * Default: true.
   */
  readonly prepare?: boolean;
}

/**
 * What `applyVersioned` did. A stored NULL version means "never versioned"
 * and counts as version 0: version 1 applies to it (`previous: null`), a
 * later one is a gap from 1 (or is held).
 */
export type VersionedResult =
  /** Written. `previous`: the stored version, null for a new row or a row never versioned. */
  | { readonly status: 'applied'; readonly previous: number | null }
  /** The row already has this version or a newer one: nothing written. */
  | { readonly status: 'stale'; readonly stored: number }
  /** Applied although versions between `stored` and the event's were never seen. */
  | { readonly status: 'gap'; readonly stored: number | null; readonly missing: readonly [number, number] };

const ident = (field: string, name: string): string => {
  const parts = name.split('.');
  if (parts.length > 2) throw new ConfigError(field, 'must be `table` or `schema.table`');
  return parts.map((p) => quoteIdent(checkIdentifier(field, p))).join('.');
};

/**
 * Upserts a read-model row only when the event's version is newer than the
 * stored one (docs/guarantees.md, invariant 9). Run it with the inbox handler's `tx`.
 * The row is locked while deciding, so concurrent handlers of one key serialize.
 *
 * @example
 * inbox.on(StockChanged, async (event, tx) => {
 *   const r = await applyVersioned(tx, { table: 'stock_view', id: { sku: event.aggregateId }, version: event.version!,
 *     values: { quantity: event.payload.quantity }, onGap: 'hold' });
 * });
 */
export async function applyVersioned(tx: SqlExecutor, u: VersionedUpsert): Promise<VersionedResult> {
  if (!Number.isSafeInteger(u.version) || u.version < 1) throw new InvalidEventError('version', `must be a positive integer (versions count from 1 per aggregate), got ${String(u.version)}`);
  const table = ident('table', u.table);
  const vcol = quoteIdent(checkIdentifier('versionColumn', u.versionColumn ?? 'version'));
  const idCols = Object.keys(u.id);
  if (idCols.length === 0) throw new ConfigError('id', 'name at least one key column');
  const valueCols = Object.keys(u.values);
  const q = (c: string, field: string): string => quoteIdent(checkIdentifier(field, c));
  const hold = u.onGap === 'hold';
  const cols = [...idCols, ...valueCols];
  const params: unknown[] = [...idCols.map((c) => u.id[c]), ...valueCols.map((c) => u.values[c]), u.version, hold];
  const v = `$${cols.length + 1}::bigint`;
  const holdParam = `$${cols.length + 2}::boolean`;
  const where = idCols.map((c, i) => `${q(c, 'id')} = $${i + 1}`).join(' AND ');
  const insertCols = [...cols.map((c) => q(c, 'values')), vcol].join(', ');
  const selectValues = [...cols.map((_, i) => `$${i + 1}`), v].join(', ');
  const updates = [...valueCols.map((c) => `${q(c, 'values')} = EXCLUDED.${q(c, 'values')}`), `${vcol} = EXCLUDED.${vcol}`].join(', ');
  // One round trip: lock and read the stored version, then write only if newer
  // (and, when holding gaps, only if it is the very next version). A held gap on
  // a new row is inserted here and undone by the rollback that HoldEvent causes.
  const { rows } = await queryPrepared(
    tx,
    `WITH prev AS (SELECT ${vcol} AS v FROM ${table} WHERE ${where} FOR UPDATE),
     up AS (
       INSERT INTO ${table} AS t (${insertCols}) VALUES (${selectValues})
       ON CONFLICT (${idCols.map((c) => q(c, 'id')).join(', ')}) DO UPDATE SET ${updates}
         WHERE COALESCE(t.${vcol}, 0) < EXCLUDED.${vcol} AND (NOT ${holdParam} OR COALESCE(t.${vcol}, 0) = EXCLUDED.${vcol} - 1)
       RETURNING 1
     )
     SELECT (SELECT v FROM prev)::text AS stored, (SELECT count(*) FROM up)::int AS written`,
    params,
    u.prepare ?? true,
  );
  const row = rows[0] as { stored: string | null; written: number };
  let stored = row.stored === null ? null : Number(row.stored);
  if (row.written === 0 && stored === null) {
    // Nothing was written although no version was seen: the row was inserted by another
    // transaction after the lock (no row to lock then). Decide on what it holds now.
    const { rows: now } = await tx.query(`SELECT ${vcol}::text AS v FROM ${table} WHERE ${where}`, idCols.map((c) => u.id[c]));
    const v = (now[0] as { v: string | null } | undefined)?.v ?? null;
    stored = v === null ? null : Number(v);
  }
  return decide(u, stored, row.written > 0, hold);
}

/**
 * What happened, from the stored version (null: no row, or a row never
 * versioned, which counts as version 0) and whether the upsert wrote.
 */
function decide(u: VersionedUpsert, stored: number | null, written: boolean, hold: boolean): VersionedResult {
  const base = stored ?? 0;
  if (!written && u.version <= base) return { status: 'stale', stored: base };
  const expected = base + 1;
  const gap = u.version > expected;
  if (gap && hold) {
    throw new HoldEvent(`version ${u.version} of ${u.table} ${JSON.stringify(u.id)} waits for version ${expected}`);
  }
  if (!written) {
    // Unreachable by the statement's own conditions; say so rather than claim a write.
    throw new Error(`applyVersioned: ${u.table} ${JSON.stringify(u.id)} version ${u.version} was not written (stored ${String(stored)})`);
  }
  return gap ? { status: 'gap', stored, missing: [expected, u.version - 1] } : { status: 'applied', previous: stored };
}
