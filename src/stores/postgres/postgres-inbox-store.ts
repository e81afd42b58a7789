import { withoutPayloadText, type OutboxEvent } from '../../core/envelope.ts';
import { InvalidEventError } from '../../core/errors.ts';
import { millisOption } from '../../core/duration.ts';
import { canonicalEventId, quoteId, storableText } from '../../core/inbound-event.ts';
import { InboxBatchError, type InboxStore, type RunBatchOptions } from '../../core/inbox-ports.ts';
import type { SqlExecutor } from '../../core/ports.ts';
import { boundedConnection, type PostgresConnection } from './postgres-connection.ts';
import { postgresNames, type PostgresNames } from './postgres-sql.ts';

export interface PostgresInboxStoreOptions {
  /** The database handle the inbox runs its transactions on (the consumer service's database). */
  readonly connection: PostgresConnection;
  /** Default: `txbox`. */
  readonly schema?: string;
  /** Default: `inbox`. */
  readonly table?: string;
  /**
   * The allowance for the store's own statements: each statement outside a
   * handler's transaction waits at most this long, and a handler's
   * transaction at most the handlers' timeout (the inbox's
   * `handlerTimeoutMs`) plus this. Past it the connection is dropped and the
   * call fails as an outage (retried), so that a database gone silent (a host
   * lost, a firewall that dropped the connections' state) holds no key for
   * TCP's ~15 minutes. Ignored by PGlite. Default: 30000 ms.
   */
  readonly statementTimeoutMs?: number;
}

/** Names of an inbox table (same rules as the outbox's). */
export function inboxNames(options: { schema?: string; table?: string } = {}): PostgresNames {
  return postgresNames({ schema: options.schema ?? 'txbox', table: options.table ?? 'inbox' });
}

/** The event as JSON, without `payloadJson` (the payload is in it already, parsed). */
function envelopeJson(e: OutboxEvent): string {
  return JSON.stringify(withoutPayloadText(e));
}

export function envelopeFromJson(v: unknown): OutboxEvent {
  const o = (typeof v === 'string' ? JSON.parse(v) : v) as OutboxEvent & { occurredAt: string };
  return { ...o, occurredAt: new Date(o.occurredAt) };
}

/**
 * The id as the uuid column prints it, which the claim compares with; throws
 * before any SQL for an id the table cannot hold (so nothing is marked).
 */
function storedId(id: string): string {
  const canonical = canonicalEventId(id);
  if (canonical === null) throw new InvalidEventError('id', `${quoteId(id)} is not a UUID; the inbox cannot store it`);
  return canonical;
}

/** The inbox table on PostgreSQL or PGlite. */
export class PostgresInboxStore implements InboxStore {
  readonly names: PostgresNames;
  readonly #db: PostgresConnection;
  readonly #timeoutMs: number;
  readonly #sql: { lock: string; claim: string; fail: string; hold: string; holdInTx: string; held: string; retries: string; recheck: string };
  /** The advisory lock space of this table's keys (the first of the two int4 keys). */
  readonly #lockSpace: string;

  constructor(options: PostgresInboxStoreOptions) {
    this.names = inboxNames(options);
    const timeoutMs = (this.#timeoutMs = millisOption('statementTimeoutMs', options.statementTimeoutMs, 30_000, 100));
    this.#db = boundedConnection(options.connection, timeoutMs);
    const t = this.names.outbox; // the inbox table itself
    const reopenable = `i.status IN ('failed', 'retry', 'held')`;
    this.#lockSpace = `txbox.inbox:${t}`;
    this.#sql = {
      // Serializes the transactions of one (consumer, key) of versioned events, in one order
      // (no deadlock between batches): the claim that follows sees every hold committed before
      // it, and a hold (written in its own transaction, see holdInTx) cannot commit between
      // an earlier version's look for held events and its commit.
      lock: `SELECT count(pg_advisory_xact_lock(hashtext($1::text), k)) AS n FROM (
          SELECT DISTINCT hashtext($2::text || '/' || key) AS k FROM unnest($3::text[]) AS key ORDER BY 1
        ) s`,
      // Records the ids as processed; a redelivered processed or dead id returns no row.
      // has_held: the key has events waiting for a version gap (usually none: an index probe).
      // Planned on every call, never prepared: a generic plan made while the table is empty
      // (just created, truncated or vacuumed) checks has_held with a sequential scan per row,
      // and each batch then slows down as the table grows (docs/performance-notes.md, finding 9).
      claim: `WITH input AS (
          SELECT * FROM jsonb_to_recordset($2::jsonb) AS x(n int, id uuid, type text, key text, version bigint)
        ), claimed AS (
          INSERT INTO ${t} AS i (consumer, event_id, type, key, version, status, attempts, processed_at)
          SELECT $1, id, type, key, version, 'processed', 1, now() FROM input ORDER BY n
          ON CONFLICT (consumer, event_id) DO UPDATE
            SET status = 'processed', attempts = i.attempts + 1, processed_at = now(), last_error = NULL, envelope = NULL
            WHERE ${reopenable}
          RETURNING i.event_id, i.key
        )
        SELECT c.event_id::text AS id, c.key,
          EXISTS (SELECT 1 FROM ${t} h WHERE h.consumer = $1 AND h.key = c.key AND h.status = 'held') AS has_held
        FROM claimed c`,
      fail: `INSERT INTO ${t} AS i (consumer, event_id, type, key, version, status, attempts, last_error, envelope)
        VALUES ($1, $2, $3, $4, $5, CASE WHEN $7::int <= 1 THEN 'dead' ELSE 'failed' END, 1, $6, $8::jsonb)
        ON CONFLICT (consumer, event_id) DO UPDATE
          SET attempts = i.attempts + 1, last_error = EXCLUDED.last_error, envelope = EXCLUDED.envelope,
              status = CASE WHEN i.attempts + 1 >= $7::int THEN 'dead' ELSE 'failed' END
          WHERE ${reopenable}
        RETURNING attempts, status`,
      hold: `INSERT INTO ${t} AS i (consumer, event_id, type, key, version, status, attempts, last_error, envelope, held_at)
        VALUES ($1, $2, $3, $4, $5, 'held', 0, $6, $7::jsonb, now())
        ON CONFLICT (consumer, event_id) DO UPDATE SET status = 'held', last_error = EXCLUDED.last_error, envelope = EXCLUDED.envelope, held_at = now()
          WHERE ${reopenable}`,
      // The claimed row turned held in the handler's own transaction (its writes rolled back to a savepoint).
      holdInTx: `UPDATE ${t} SET status = 'held', processed_at = NULL, last_error = $3, envelope = $4::jsonb, held_at = now()
        WHERE consumer = $1 AND event_id = $2`,
      // Keys with held events not looked at for $2 ms, oldest first, at most $3 rows' worth
      // (the held index); their held rows are stamped so the next look takes other keys.
      recheck: `WITH picked AS (
          SELECT DISTINCT key FROM (
            SELECT key FROM ${t} WHERE consumer = $1 AND status = 'held' AND (held_at IS NULL OR held_at < now() - $2 * interval '1 millisecond')
            ORDER BY held_at NULLS FIRST LIMIT $3
          ) s
        ), stamped AS (
          UPDATE ${t} i SET held_at = now() FROM picked WHERE i.consumer = $1 AND i.status = 'held' AND i.key = picked.key RETURNING i.key
        )
        SELECT DISTINCT key FROM stamped`,
      held: `SELECT envelope FROM ${t} WHERE consumer = $1 AND key = $2 AND status = 'held' ORDER BY version NULLS LAST, received_at LIMIT $3`,
      retries: `SELECT envelope FROM ${t} WHERE consumer = $1 AND status = 'retry' AND ($3::text[] IS NULL OR type = ANY($3)) ORDER BY key, version NULLS LAST, received_at LIMIT $2`,
    };
  }

  runBatch(consumer: string, events: readonly OutboxEvent[], handler: (tx: SqlExecutor, event: OutboxEvent) => Promise<void>, options: RunBatchOptions = {}) {
    const seen = new Set<string>();
    const input: { n: number; id: string; type: string; key: string; version: number | null }[] = [];
    // Ids compared in one form: the claim returns event_id::text (lower case, hyphenated).
    const ids = events.map((e) => storedId(e.id));
    for (let n = 0; n < events.length; n++) {
      const e = events[n]!;
      const id = ids[n]!;
      if (seen.has(id)) continue; // one row cannot be claimed twice in a statement; the repeat is a duplicate
      seen.add(id);
      input.push({ n, id, type: e.type, key: e.key, version: e.version });
    }
    const versionedKeys = [...new Set(input.filter((e) => e.version !== null && e.version !== undefined).map((e) => e.key))];
    const bound = options.handlersTimeoutMs === undefined ? undefined : options.handlersTimeoutMs + this.#timeoutMs;
    return this.#db.transaction(async (tx) => {
      if (versionedKeys.length > 0) await tx.query(this.#sql.lock, [this.#lockSpace, consumer, versionedKeys]);
      const { rows } = (await tx.query(this.#sql.claim, [consumer, JSON.stringify(input)])) as { rows: { id: string; key: string; has_held: boolean }[] };
      const claimed = new Set(rows.map((r) => r.id));
      const heldKeys = [...new Set(rows.filter((r) => r.has_held).map((r) => r.key))];
      const ran = events.map(() => false);
      const held = events.map(() => false);
      for (let i = 0; i < events.length; i++) {
        const e = events[i]!;
        if (!claimed.delete(ids[i]!)) continue;
        if (options.holdReason === undefined) {
          try {
            await handler(tx, e);
          } catch (err) {
            throw new InboxBatchError(i, err);
          }
          ran[i] = true;
          continue;
        }
        await tx.query('SAVEPOINT txbox_handler');
        try {
          await handler(tx, e);
          await tx.query('RELEASE SAVEPOINT txbox_handler');
          ran[i] = true;
        } catch (err) {
          const reason = options.holdReason(err);
          if (reason === null) throw new InboxBatchError(i, err);
          await tx.query('ROLLBACK TO SAVEPOINT txbox_handler');
          await tx.query(this.#sql.holdInTx, [consumer, ids[i], storableText(reason), envelopeJson({ ...e, id: ids[i]! })]);
          held[i] = true;
        }
      }
      return { ran, heldKeys, held };
    }, bound);
  }

  async recordFailure(consumer: string, event: OutboxEvent, error: string, maxAttempts: number) {
    const { rows } = await this.#db.query<{ attempts: number; status: string }>(this.#sql.fail, [
      consumer,
      storedId(event.id),
      event.type,
      event.key,
      event.version,
      storableText(error),
      maxAttempts,
      envelopeJson(event),
    ]);
    const row = rows[0];
    return row ? { attempts: row.attempts, dead: row.status === 'dead' } : { attempts: 0, dead: false };
  }

  async hold(consumer: string, event: OutboxEvent, reason: string): Promise<void> {
    await this.#db.query(this.#sql.hold, [consumer, storedId(event.id), event.type, event.key, event.version, storableText(reason), envelopeJson(event)]);
  }

  async recheckHeld(consumer: string, olderThanMs: number, limit: number): Promise<string[]> {
    const { rows } = await this.#db.query<{ key: string }>(this.#sql.recheck, [consumer, olderThanMs, limit]);
    return rows.map((r) => r.key);
  }

  async redrivable(consumer: string, limit: number, key?: string, types?: readonly string[]): Promise<OutboxEvent[]> {
    const { rows } =
      key === undefined
        ? await this.#db.query<{ envelope: unknown }>(this.#sql.retries, [consumer, limit, types ?? null])
        : await this.#db.query<{ envelope: unknown }>(this.#sql.held, [consumer, key, limit]);
    return rows.map((r) => envelopeFromJson(r.envelope));
  }
}
