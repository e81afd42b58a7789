import { HoldEvent } from '../../inbox/inbox.ts';
import { ConfigError, InvalidEventError } from '../../core/errors.ts';
import { checkIdentifier } from '../../core/identifiers.ts';
import { mysqlErrno } from '../../core/store-errors.ts';
import type { VersionedResult } from '../postgres/postgres-projection.ts';
import type { MysqlExecutor } from './mysql-connection.ts';
import { DUPLICATE_ENTRY } from './mysql-errors.ts';

export type { VersionedResult } from '../postgres/postgres-projection.ts';

export interface MysqlVersionedUpsert {
  /** The read-model table, optionally database-qualified (`app.stock_view`). Names are validated and quoted. The key columns must be its primary key or a unique key. */
  readonly table: string;
  /** Key column(s) and values of the row, e.g. `{ order_id: event.aggregateId }`. */
  readonly id: Readonly<Record<string, unknown>>;
  /** The event's version. */
  readonly version: number;
  /** Other columns to write. Plain objects and arrays are written as JSON text (mysql2 would expand them into SQL lists). */
  readonly values: Readonly<Record<string, unknown>>;
  /** Column holding the applied version. Default: `version`. */
  readonly versionColumn?: string;
  /**
   * What to do when versions were skipped (incoming > stored + 1, or > 1 for a new row):
   * `apply` it anyway and report the gap (default), or `hold` the event in the inbox
   * until the missing ones arrived (throws HoldEvent: let it propagate out of the inbox handler).
   */
  readonly onGap?: 'apply' | 'hold';
}

const tick = (name: string): string => `\`${name}\``;

const ident = (field: string, name: string): string => {
  const parts = name.split('.');
  if (parts.length > 2) throw new ConfigError(field, 'must be `table` or `database.table`');
  return parts.map((p) => tick(checkIdentifier(field, p, 64))).join('.');
};

/** A value as mysql2's `query` should see it: objects other than Date and Buffer go as JSON text, bigint as its decimal text. */
function sqlValue(v: unknown): unknown {
  if (v === undefined) return null;
  if (typeof v === 'bigint') return v.toString();
  if (v === null || typeof v !== 'object' || v instanceof Date || Buffer.isBuffer(v)) return v;
  return JSON.stringify(v);
}

/**
 * Upserts a read-model row on MySQL or MariaDB only when the event's version
 * is newer than the stored one (docs/guarantees.md, invariant 9): the same
 * contract and results as `applyVersioned` of `txbox/postgres`. Run it with
 * the inbox handler's `tx`. The row is locked (`SELECT ... FOR UPDATE`) while
 * deciding, so concurrent handlers of one key serialize; a new row inserted
 * by another transaction meanwhile is read again and decided on.
 *
 * @example
 * inbox.on(StockChanged, async (event, tx) => {
 *   await applyVersioned(tx, { table: 'stock_view', id: { sku: event.aggregateId }, version: event.version!,
 *     values: { quantity: event.payload.quantity }, onGap: 'hold' });
 * });
 */
export async function applyVersioned(tx: MysqlExecutor, u: MysqlVersionedUpsert): Promise<VersionedResult> {
  if (!Number.isSafeInteger(u.version) || u.version < 1) throw new InvalidEventError('version', `must be a positive integer (versions count from 1 per aggregate), got ${String(u.version)}`);
  const table = ident('table', u.table);
  const vcol = tick(checkIdentifier('versionColumn', u.versionColumn ?? 'version', 64));
  const idCols = Object.keys(u.id);
  if (idCols.length === 0) throw new ConfigError('id', 'name at least one key column');
  const valueCols = Object.keys(u.values);
  const q = (c: string, field: string): string => tick(checkIdentifier(field, c, 64));
  const hold = u.onGap === 'hold';
  const where = idCols.map((c) => `${q(c, 'id')} = ?`).join(' AND ');
  const idValues = idCols.map((c) => sqlValue(u.id[c]));
  const values = valueCols.map((c) => sqlValue(u.values[c]));
  for (let attempt = 1; ; attempt++) {
    const [rows] = (await tx.query(`SELECT CAST(${vcol} AS CHAR) AS v FROM ${table} WHERE ${where} FOR UPDATE`, idValues)) as unknown as [{ v: string | null }[]];
    const exists = rows.length > 0;
    const stored = exists && rows[0]!.v !== null ? Number(rows[0]!.v) : null;
    const base = stored ?? 0;
    if (u.version <= base) return { status: 'stale', stored: base };
    const expected = base + 1;
    const gap = u.version > expected;
    if (gap && hold) throw new HoldEvent(`version ${u.version} of ${u.table} ${JSON.stringify(u.id)} waits for version ${expected}`);
    if (exists) {
      const sets = [...valueCols.map((c) => `${q(c, 'values')} = ?`), `${vcol} = ?`].join(', ');
      await tx.query(`UPDATE ${table} SET ${sets} WHERE ${where}`, [...values, u.version, ...idValues]);
    } else {
      const cols = [...idCols.map((c) => q(c, 'id')), ...valueCols.map((c) => q(c, 'values')), vcol];
      try {
        await tx.query(`INSERT INTO ${table} (${cols.join(', ')}) VALUES (${cols.map(() => '?').join(', ')})`, [...idValues, ...values, u.version]);
      } catch (err) {
        // Another transaction inserted the row after our look found none (READ COMMITTED has no
        // gap lock): look again, now that its row exists (the locking read waits for its commit).
        if (mysqlErrno(err) === DUPLICATE_ENTRY && attempt < 3) continue;
        throw err;
      }
    }
    return gap ? { status: 'gap', stored, missing: [expected, u.version - 1] } : { status: 'applied', previous: stored };
  }
}
