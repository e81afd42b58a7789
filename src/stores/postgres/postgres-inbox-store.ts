import type { OutboxEvent } from '../../core/envelope.ts';
import type { InboxStore } from '../../core/inbox-ports.ts';
import type { SqlExecutor } from '../../core/ports.ts';
import type { PostgresConnection } from './postgres-connection.ts';
import { postgresNames, type PostgresNames } from './postgres-sql.ts';

export interface PostgresInboxStoreOptions {
  /** The database handle the inbox runs its transactions on (the consumer service's database). */
  readonly connection: PostgresConnection;
  /** Default: `txbox`. */
  readonly schema?: string;
  /** Default: `inbox`. */
  readonly table?: string;
}

/** Names of an inbox table (same rules as the outbox's). */
export function inboxNames(options: { schema?: string; table?: string } = {}): PostgresNames {
  return postgresNames({ schema: options.schema ?? 'txbox', table: options.table ?? 'inbox' });
}

const envelopeJson = (e: OutboxEvent): string => JSON.stringify(e);

export function envelopeFromJson(v: unknown): OutboxEvent {
  const o = (typeof v === 'string' ? JSON.parse(v) : v) as OutboxEvent & { occurredAt: string };
  return { ...o, occurredAt: new Date(o.occurredAt) };
}

/** The inbox table on PostgreSQL or PGlite. */
export class PostgresInboxStore implements InboxStore {
  readonly names: PostgresNames;
  readonly #db: PostgresConnection;
  readonly #sql: { claim: string; fail: string; hold: string; held: string; retries: string };

  constructor(options: PostgresInboxStoreOptions) {
    this.names = inboxNames(options);
    this.#db = options.connection;
    const t = this.names.outbox; // the inbox table itself
    const reopenable = `i.status IN ('failed', 'retry', 'held')`;
    this.#sql = {
      // Records the id as processed; on a redelivery of a processed or dead id, returns no row.
      claim: `INSERT INTO ${t} AS i (consumer, event_id, type, key, version, status, attempts, processed_at)
        VALUES ($1, $2, $3, $4, $5, 'processed', 1, now())
        ON CONFLICT (consumer, event_id) DO UPDATE
          SET status = 'processed', attempts = i.attempts + 1, processed_at = now(), last_error = NULL, envelope = NULL
          WHERE ${reopenable}
        RETURNING 1`,
      fail: `INSERT INTO ${t} AS i (consumer, event_id, type, key, version, status, attempts, last_error, envelope)
        VALUES ($1, $2, $3, $4, $5, CASE WHEN $7::int <= 1 THEN 'dead' ELSE 'failed' END, 1, $6, $8::jsonb)
        ON CONFLICT (consumer, event_id) DO UPDATE
          SET attempts = i.attempts + 1, last_error = EXCLUDED.last_error, envelope = EXCLUDED.envelope,
              status = CASE WHEN i.attempts + 1 >= $7::int THEN 'dead' ELSE 'failed' END
          WHERE ${reopenable}
        RETURNING attempts, status`,
      hold: `INSERT INTO ${t} AS i (consumer, event_id, type, key, version, status, attempts, last_error, envelope)
        VALUES ($1, $2, $3, $4, $5, 'held', 0, $6, $7::jsonb)
        ON CONFLICT (consumer, event_id) DO UPDATE SET status = 'held', last_error = EXCLUDED.last_error, envelope = EXCLUDED.envelope
          WHERE ${reopenable}`,
      held: `SELECT envelope FROM ${t} WHERE consumer = $1 AND key = $2 AND status = 'held' ORDER BY version NULLS LAST, received_at LIMIT $3`,
      retries: `SELECT envelope FROM ${t} WHERE consumer = $1 AND status = 'retry' ORDER BY key, version NULLS LAST, received_at LIMIT $2`,
    };
  }

  runOnce(consumer: string, event: OutboxEvent, handler: (tx: SqlExecutor) => Promise<void>): Promise<boolean> {
    return this.#db.transaction(async (tx) => {
      const { rows } = await tx.query(this.#sql.claim, [consumer, event.id, event.type, event.key, event.version]);
      if (rows.length === 0) return false;
      await handler(tx);
      return true;
    });
  }

  async recordFailure(consumer: string, event: OutboxEvent, error: string, maxAttempts: number) {
    const { rows } = await this.#db.query<{ attempts: number; status: string }>(this.#sql.fail, [
      consumer,
      event.id,
      event.type,
      event.key,
      event.version,
      error,
      maxAttempts,
      envelopeJson(event),
    ]);
    const row = rows[0];
    return row ? { attempts: row.attempts, dead: row.status === 'dead' } : { attempts: 0, dead: false };
  }

  async hold(consumer: string, event: OutboxEvent, reason: string): Promise<void> {
    await this.#db.query(this.#sql.hold, [consumer, event.id, event.type, event.key, event.version, reason, envelopeJson(event)]);
  }

  async redrivable(consumer: string, limit: number, key?: string): Promise<OutboxEvent[]> {
    const { rows } =
      key === undefined
        ? await this.#db.query<{ envelope: unknown }>(this.#sql.retries, [consumer, limit])
        : await this.#db.query<{ envelope: unknown }>(this.#sql.held, [consumer, key, limit]);
    return rows.map((r) => envelopeFromJson(r.envelope));
  }
}
