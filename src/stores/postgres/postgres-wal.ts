/**
 * The WAL wake mode's names, prerequisite checks and slot administration: the
 * publication on the outbox table, txbox's replication slots, their lag.
 * The statements run on an ordinary connection; the stream itself is in
 * pg-wal-stream.ts.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { PostgresConnection } from './postgres-connection.ts';
import type { PostgresNames } from './postgres-sql.ts';

export interface WalNames {
  /** The publication on the outbox table (inserts only), unquoted. */
  readonly publication: string;
  /** Every slot of this outbox table starts with it: `txbox_<8 hex of schema.table>_`. */
  readonly slotPrefix: string;
}

export function walNames(n: PostgresNames): WalNames {
  const hash = createHash('sha1').update(`${n.schema}.${n.table}`).digest('hex').slice(0, 8);
  const readable = `txbox_${n.schema}_${n.table}`;
  return { publication: readable.length <= 63 ? readable : `txbox_${hash}`, slotPrefix: `txbox_${hash}_` };
}

/**
 * A new slot name for one relay: the prefix, the relay id reduced to what a slot
 * name allows (lower-case letters, digits, underscores) and 6 random hex digits,
 * so a relay restarted under the same id never meets its predecessor's slot.
 */
export function walSlotName(names: WalNames, relayId: string): string {
  const room = 63 - names.slotPrefix.length - 7;
  const id = relayId.toLowerCase().replace(/[^a-z0-9_]/g, '_').slice(0, room);
  return `${names.slotPrefix}${id}_${randomBytes(3).toString('hex')}`;
}

function quoteLiteralIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/**
 * Managed services that grant replication through membership of a role of
 * theirs instead of the REPLICATION attribute: Amazon RDS and Aurora
 * (rds_replication, which rds_superuser includes; the last two are AWS's own;
 * their master user cannot give the attribute) and Neon (neon_superuser). A role
 * of one of these names on another server only makes the check pass; the
 * server itself decides when the stream opens (a refusal falls back, with its
 * reason in the warning).
 */
const MANAGED_REPLICATION_ROLES = ['rds_superuser', 'rds_replication', 'rdsadmin', 'rdsrepladmin', 'neon_superuser'].map((r) => `'${r}'`).join(', ');

/**
 * Whether a problem `walProblems` found is the role's replication privilege:
 * the one a query cannot be sure of (a service may grant it in a way of its
 * own), so a relay still tries the stream and lets the server decide.
 */
export function isReplicationPrivilegeProblem(problem: string): boolean {
  return problem.includes(NO_REPLICATION);
}

/** The words of walProblems' privilege problem (`isReplicationPrivilegeProblem` looks for them). */
const NO_REPLICATION = 'has no REPLICATION attribute';

/**
 * What keeps the WAL wake mode from working on this database and connection,
 * each as a sentence naming the fix; empty when nothing does. The publication
 * is not checked here (see `ensurePublication`).
 */
export async function walProblems(db: PostgresConnection): Promise<string[]> {
  if (!db.replicationConfig) {
    return ['this database handle cannot open a replication connection (PGlite or a custom connection): use pgConnection over a PostgreSQL server'];
  }
  const { rows } = await db.query<{ wal_level: string; role: string; replication: boolean; slots_max: number; slots_used: number; senders_max: number }>(
    `SELECT current_setting('wal_level') AS wal_level, current_user AS role,
            (SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user)
              OR EXISTS (SELECT 1 FROM pg_roles g WHERE g.rolname IN (${MANAGED_REPLICATION_ROLES}) AND pg_has_role(current_user, g.oid, 'MEMBER')) AS replication,
            current_setting('max_replication_slots')::int AS slots_max,
            (SELECT count(*)::int FROM pg_replication_slots) AS slots_used,
            current_setting('max_wal_senders')::int AS senders_max`,
  );
  const r = rows[0]!;
  const problems: string[] = [];
  if (r.wal_level !== 'logical') {
    problems.push(`wal_level is '${r.wal_level}', logical decoding needs 'logical': run ALTER SYSTEM SET wal_level = logical (or set it in postgresql.conf) and restart PostgreSQL`);
  }
  if (!r.replication) {
    problems.push(`role ${r.role} ${NO_REPLICATION}: run ALTER ROLE ${quoteLiteralIdent(r.role)} REPLICATION (as a superuser; on Amazon RDS or Aurora: GRANT rds_replication TO ${quoteLiteralIdent(r.role)})`);
  }
  if (r.slots_used >= r.slots_max) {
    problems.push(`all ${r.slots_max} replication slots are in use: raise max_replication_slots (restart) or drop unused ones (txbox wal drop-slots)`);
  }
  if (r.senders_max === 0) problems.push('max_wal_senders is 0: set it to at least the number of relays (restart)');
  return problems;
}

/** A publication of the outbox's name exists and does not stream its inserts (`ensurePublication`); the message names the fix. */
export class PublicationMismatchError extends Error {
  override readonly name = 'PublicationMismatchError';
}

/**
 * Creates the outbox table's publication (inserts only) unless it exists.
 * Needs to own the table (run `txbox migrate --wake wal` as the owner). Returns
 * whether it created it.
 */
export async function ensurePublication(db: PostgresConnection, names: PostgresNames): Promise<boolean> {
  const { publication } = walNames(names);
  const { rows } = await db.query<{ inserts: boolean; covers: boolean }>(
    `SELECT p.pubinsert AS inserts,
            EXISTS (SELECT 1 FROM pg_publication_tables t WHERE t.pubname = p.pubname AND t.schemaname = $2 AND t.tablename = $3) AS covers
     FROM pg_publication p WHERE p.pubname = $1`,
    [publication, names.schema, names.table],
  );
  const found = rows[0];
  if (found !== undefined) {
    // A publication of this name that does not stream the outbox's inserts (made by hand, or for another
    // table whose name collides) would leave the relay with nothing to hear: say so rather than stream it.
    if (!found.inserts || !found.covers) {
      throw new PublicationMismatchError(
        `publication ${publication} exists but does not publish inserts into ${names.outbox}: ` +
          (found.covers
            ? `run ALTER PUBLICATION ${quoteLiteralIdent(publication)} SET (publish = 'insert')`
            : `run ALTER PUBLICATION ${quoteLiteralIdent(publication)} ADD TABLE ${names.outbox}, or drop it and run txbox migrate --wake wal`),
      );
    }
    return false;
  }
  try {
    await db.query(`CREATE PUBLICATION ${quoteLiteralIdent(publication)} FOR TABLE ${names.outbox} WITH (publish = 'insert')`);
    return true;
  } catch (err) {
    if ((err as { code?: string }).code === '42710') return false; // another relay created it just now
    throw err;
  }
}

/** Drops the outbox table's publication, if any (tests, and leaving WAL mode for good). */
export async function dropPublication(db: PostgresConnection, names: PostgresNames): Promise<void> {
  await db.query(`DROP PUBLICATION IF EXISTS ${quoteLiteralIdent(walNames(names).publication)}`);
}

/** One replication slot of this outbox table, from pg_replication_slots. */
export interface WalSlotStatus {
  readonly slot: string;
  readonly active: boolean;
  readonly temporary: boolean;
  /** Backend holding it (the relay's walsender), if active. */
  readonly activePid: number | null;
  /** WAL the slot retains past what its reader confirmed: pg_current_wal_lsn() - confirmed_flush_lsn. */
  readonly lagBytes: number;
  /** Seconds since the reader last reported (pg_stat_replication.reply_time); null when inactive. */
  readonly lastReplySeconds: number | null;
  /** 'reserved', 'extended', 'unreserved' or 'lost' (max_slot_wal_keep_size exceeded). */
  readonly walStatus: string | null;
}

/** The slots of this outbox table (by name prefix), with their lag. */
export async function walSlots(db: PostgresConnection, names: PostgresNames, slot?: string): Promise<WalSlotStatus[]> {
  const { rows } = await db.query<{
    slot_name: string;
    active: boolean;
    temporary: boolean;
    active_pid: number | null;
    lag_bytes: string | null;
    reply_age: number | null;
    wal_status: string | null;
  }>(
    `SELECT s.slot_name, s.active, s.temporary, s.active_pid,
            pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn)::bigint AS lag_bytes,
            extract(epoch FROM now() - r.reply_time)::float8 AS reply_age, s.wal_status
     FROM pg_replication_slots s LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid
     WHERE s.database = current_database() AND left(s.slot_name, length($1)) = $1 AND ($2::text IS NULL OR s.slot_name = $2)
     ORDER BY s.slot_name`,
    [walNames(names).slotPrefix, slot ?? null],
  );
  return rows.map((r) => ({
    slot: r.slot_name,
    active: r.active,
    temporary: r.temporary,
    activePid: r.active_pid,
    lagBytes: Math.max(0, Number(r.lag_bytes ?? 0)),
    lastReplySeconds: r.reply_age,
    walStatus: r.wal_status,
  }));
}

/**
 * Drops this outbox table's inactive slots (left by a relay that could not drop
 * its own, or made by hand). With `active`, also ends the relays' replication
 * connections first, which drops their temporary slots; those relays poll and
 * make a new slot. Returns the names dropped.
 */
export async function dropWalSlots(db: PostgresConnection, names: PostgresNames, options: { active?: boolean } = {}): Promise<string[]> {
  const dropped: string[] = [];
  for (const s of await walSlots(db, names)) {
    // A temporary slot is inactive for a moment while its relay starts streaming; it goes with its session.
    if (s.temporary && !s.active && !options.active) continue;
    if (s.active) {
      if (!options.active || s.activePid === null) continue;
      await db.query('SELECT pg_terminate_backend($1)', [s.activePid]);
      if (s.temporary) {
        dropped.push(s.slot);
        continue;
      }
    }
    try {
      await db.query('SELECT pg_drop_replication_slot($1)', [s.slot]);
      dropped.push(s.slot);
    } catch (err) {
      // 42704: gone already (a temporary slot whose session just ended); 55006: active again.
      const code = (err as { code?: string }).code;
      if (code !== '42704' && code !== '55006') throw err;
    }
  }
  return dropped;
}
