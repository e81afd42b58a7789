import { createHash, randomUUID } from 'node:crypto';
import { withoutPayloadText, type OutboxEvent } from '../../core/envelope.ts';
import { ConfigError, InvalidEventError } from '../../core/errors.ts';
import { canonicalEventId, quoteId, storableText } from '../../core/inbound-event.ts';
import { InboxBatchError, type InboxStore, type RunBatchOptions } from '../../core/inbox-ports.ts';
import { millisOption } from '../../core/duration.ts';
import { boundedMysqlConnection, type MysqlConnection, type MysqlExecutor } from './mysql-connection.ts';
import { deadlockRetry } from './mysql-errors.ts';
import { mysqlInboxNames, NOW, type MysqlInboxNames } from './mysql-sql.ts';

export interface MysqlInboxStoreOptions {
  /** The database handle the inbox runs its transactions on (the consumer service's database): `mysqlConnection(...)`. Required. */
  readonly connection: MysqlConnection;
  /** Database holding the tables. Default: the connection's current database. */
  readonly database?: string;
  /** Default: `inbox`. */
  readonly table?: string;
  /**
   * The allowance for the store's own statements: each statement outside a
   * handler's transaction waits at most this long, and a handler's
   * transaction at most the handlers' timeout (the inbox's
   * `handlerTimeoutMs`) plus this; past it the connection is destroyed and
   * the call fails as an outage (retried). Default: 30000 ms.
   */
  readonly statementTimeoutMs?: number;
}

/** Longest consumer name the table holds (`consumer VARCHAR(200)`). */
const MAX_CONSUMER_LENGTH = 200;

/** Statuses a new delivery (or an operator retry) may run again. */
const REOPENABLE = `status IN ('failed', 'retry', 'held')`;
/** REOPENABLE, and the row met is the inserted event's own (VALUES(): MariaDB has no row alias; MySQL 8 accepts it with a deprecation note). */
const OWN_REOPENABLE = `event_id = VALUES(event_id) AND ${REOPENABLE}`;

/**
 * ON DUPLICATE KEY UPDATE fires on any unique key, not only the primary key:
 * an index a user added to the inbox table could send an event's insert to
 * another event's row. The updates are guarded by `event_id` so that no other
 * row changes, and an event left without a row of its own is refused with
 * this error: ER_DUP_ENTRY (1062), a deterministic store error, so the inbox
 * dead-letters it after a bounded number of tries instead of calling it a
 * duplicate.
 */
function divertedError(table: string, id: string): Error {
  const message = `the inbox row of event ${id} was not written: another unique key of ${table} matched it; an inbox table must have no unique key but its primary key`;
  return Object.assign(new Error(message), { errno: 1062, sqlState: '23000', sqlMessage: message });
}

/** The event as JSON, without `payloadJson` (the payload is in it already, parsed). */
function envelopeJson(e: OutboxEvent): string {
  return JSON.stringify(withoutPayloadText(e));
}

/** An envelope read back (LONGTEXT: a string; a JSON column on MySQL 8 would arrive parsed). */
export function envelopeFromMysql(v: unknown): OutboxEvent {
  const o = (typeof v === 'string' ? JSON.parse(v) : v) as OutboxEvent & { occurredAt: string };
  return { ...o, occurredAt: new Date(o.occurredAt) };
}

/** The id as the table stores it (lower case, hyphenated); throws before any SQL for an id that is not a UUID (so nothing is marked). */
function storedId(id: string): string {
  const canonical = canonicalEventId(id);
  if (canonical === null) throw new InvalidEventError('id', `${quoteId(id)} is not a UUID; the inbox cannot store it`);
  return canonical;
}

function checkConsumer(consumer: string): void {
  if (typeof consumer !== 'string' || consumer.length === 0 || consumer.length > MAX_CONSUMER_LENGTH) {
    throw new ConfigError('consumer', `must be a name of 1 to ${MAX_CONSUMER_LENGTH} characters (the MySQL inbox's consumer column), got ${typeof consumer === 'string' ? `${consumer.length} characters` : typeof consumer}`);
  }
}

/** The lock row of (consumer, key): the first 4 bytes of SHA-256 (as PostgreSQL's int4 advisory key; a collision only serializes two keys). `MysqlInboxAdmin.pruneKeys` uses it too. */
export function keySlot(consumer: string, key: string): number {
  return createHash('sha256').update(`${consumer}/${key}`).digest().readUInt32BE(0);
}

const marks = (k: number): string => Array.from({ length: k }, () => '?').join(', ');

async function rowsOf<R>(tx: MysqlExecutor, sql: string, values: unknown[]): Promise<R[]> {
  const [rows] = await tx.query(sql, values);
  return rows as R[];
}

/**
 * The inbox table on MySQL 8 or MariaDB 10.6+: the same port as
 * `PostgresInboxStore`. Each batch is one transaction on a connection of
 * `connection`: the (consumer, event id) rows are marked processed and the
 * handlers write through the same `mysql2` connection, so both commit or
 * neither does. A transaction InnoDB picks as a deadlock victim (errno 1213)
 * is run again from the start, handlers included (it was rolled back).
 *
 * @example
 * const inbox = createInbox({ store: new MysqlInboxStore({ connection }), consumer: 'billing' });
 * inbox.on(OrderCreated, async (event, tx) => { await tx.query('INSERT INTO invoices (order_id) VALUES (?)', [event.aggregateId]); });
 */
export class MysqlInboxStore implements InboxStore<MysqlExecutor> {
  readonly names: MysqlInboxNames;
  readonly #db: MysqlConnection;
  readonly #handlerDb: MysqlConnection;
  readonly #timeoutMs: number;

  constructor(options: MysqlInboxStoreOptions) {
    if (!options?.connection) throw new ConfigError('connection', 'pass a MysqlConnection: connection: await mysqlConnection({ uri }) or mysqlConnection({ pool })');
    this.names = mysqlInboxNames(options);
    const timeoutMs = (this.#timeoutMs = millisOption('statementTimeoutMs', options.statementTimeoutMs, 30_000, 100));
    // The store's own statements and transactions; a handler's transaction gets its own bound (runBatch).
    this.#db = boundedMysqlConnection(options.connection, timeoutMs);
    this.#handlerDb = options.connection;
  }

  runBatch(consumer: string, events: readonly OutboxEvent[], handler: (tx: MysqlExecutor, event: OutboxEvent) => Promise<void>, options: RunBatchOptions = {}) {
    checkConsumer(consumer);
    const t = this.names.inbox;
    const seen = new Set<string>();
    const input: { id: string; e: OutboxEvent }[] = [];
    // Ids compared in one form: the table holds the canonical spelling.
    const ids = events.map((e) => storedId(e.id));
    for (let n = 0; n < events.length; n++) {
      const id = ids[n]!;
      if (seen.has(id)) continue; // one row cannot be claimed twice in a statement; the repeat is a duplicate
      seen.add(id);
      input.push({ id, e: events[n]! });
    }
    const slots = [...new Set(input.filter(({ e }) => e.version !== null && e.version !== undefined).map(({ e }) => keySlot(consumer, e.key)))].sort((a, b) => a - b);
    const bound = options.handlersTimeoutMs === undefined ? undefined : options.handlersTimeoutMs + this.#timeoutMs;
    return deadlockRetry(() =>
      this.#handlerDb.transaction(async (tx) => {
        // Serializes the transactions of one (consumer, key) of versioned events, in one order
        // (slot order; a deadlock is retried): the claim that follows sees every hold committed
        // before it, and a hold cannot commit between an earlier version's look for held
        // events and its commit.
        if (slots.length > 0) await tx.query(`INSERT INTO ${this.names.keys} (slot) VALUES ${slots.map(() => '(?)').join(', ')} ON DUPLICATE KEY UPDATE slot = slot`, slots);
        const claim = randomUUID();
        if (input.length > 0) {
          const params: unknown[] = [];
          for (const { id, e } of input) params.push(consumer, id, e.type, e.key, e.version ?? null, claim);
          // Records the ids as processed and stamps the rows this transaction claimed (new, or
          // reopenable) with `claim`; a processed or dead id keeps its row. Assignments run left
          // to right, so status changes last and the conditions before it see the old one.
          await tx.query(
            `INSERT INTO ${t} (consumer, event_id, type, \`key\`, version, status, attempts, received_at, processed_at, claim)
             VALUES ${input.map(() => `(?, ?, ?, ?, ?, 'processed', 1, ${NOW}, ${NOW}, ?)`).join(', ')}
             ON DUPLICATE KEY UPDATE
               attempts = IF(${OWN_REOPENABLE}, attempts + 1, attempts),
               processed_at = IF(${OWN_REOPENABLE}, ${NOW}, processed_at),
               last_error = IF(${OWN_REOPENABLE}, NULL, last_error),
               envelope = IF(${OWN_REOPENABLE}, NULL, envelope),
               claim = IF(${OWN_REOPENABLE}, ?, claim),
               status = IF(${OWN_REOPENABLE}, 'processed', status)`,
            [...params, claim],
          );
        }
        // The rows of these ids: claimed now (claim = ours), or processed/dead before. has_held: the
        // key has events waiting for a version gap (usually none: an index probe).
        const found =
          input.length === 0
            ? []
            : await rowsOf<{ event_id: string; key: string; mine: number | string; has_held: number | string }>(
                tx,
                `SELECT c.event_id, c.\`key\`, c.claim <=> ? AS mine,
                   c.claim <=> ? AND EXISTS (SELECT 1 FROM ${t} h WHERE h.consumer = c.consumer AND h.\`key\` = c.\`key\` AND h.status = 'held') AS has_held
                 FROM ${t} c WHERE c.consumer = ? AND c.event_id IN (${marks(input.length)})`,
                [claim, claim, consumer, ...input.map((i) => i.id)],
              );
        if (found.length < input.length) {
          const present = new Set(found.map((r) => r.event_id));
          throw divertedError(t, input.find((i) => !present.has(i.id))!.id);
        }
        const rows = found.filter((r) => Number(r.mine) === 1);
        const claimed = new Set(rows.map((r) => r.event_id));
        const heldKeys = [...new Set(rows.filter((r) => Number(r.has_held) === 1).map((r) => r.key))];
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
            // The claimed row turns held in the handler's own transaction (its writes rolled back to the savepoint).
            await tx.query(`UPDATE ${t} SET status = 'held', processed_at = NULL, last_error = ?, envelope = ?, held_at = ${NOW} WHERE consumer = ? AND event_id = ?`, [
              storableText(reason),
              envelopeJson({ ...e, id: ids[i]! }),
              consumer,
              ids[i],
            ]);
            held[i] = true;
          }
        }
        return { ran, heldKeys, held };
      }, bound),
    );
  }

  async recordFailure(consumer: string, event: OutboxEvent, error: string, maxAttempts: number) {
    checkConsumer(consumer);
    const id = storedId(event.id);
    const t = this.names.inbox;
    return deadlockRetry(() =>
      this.#db.transaction(async (tx) => {
        const claim = randomUUID();
        const text = storableText(error);
        const envelope = envelopeJson(event);
        // Assignments run left to right: status changes after the conditions that read it, and
        // attempts counts only when this statement reopened the row (its claim is ours now).
        await tx.query(
          `INSERT INTO ${t} (consumer, event_id, type, \`key\`, version, status, attempts, last_error, envelope, received_at, claim)
           VALUES (?, ?, ?, ?, ?, IF(? <= 1, 'dead', 'failed'), 1, ?, ?, ${NOW}, ?)
           ON DUPLICATE KEY UPDATE
             last_error = IF(${OWN_REOPENABLE}, ?, last_error),
             envelope = IF(${OWN_REOPENABLE}, ?, envelope),
             claim = IF(${OWN_REOPENABLE}, ?, claim),
             status = IF(${OWN_REOPENABLE}, IF(attempts + 1 >= ?, 'dead', 'failed'), status),
             attempts = IF(claim <=> ?, attempts + 1, attempts)`,
          [consumer, id, event.type, event.key, event.version ?? null, maxAttempts, text, envelope, claim, text, envelope, claim, maxAttempts, claim],
        );
        const [row] = await rowsOf<{ attempts: number | string; status: string; mine: number | string }>(tx, `SELECT attempts, status, claim <=> ? AS mine FROM ${t} WHERE consumer = ? AND event_id = ?`, [
          claim,
          consumer,
          id,
        ]);
        if (!row) throw divertedError(t, id);
        // Not ours: processed or dead already (a redelivery raced this failure); nothing recorded.
        return Number(row.mine) === 1 ? { attempts: Number(row.attempts), dead: row.status === 'dead' } : { attempts: 0, dead: false };
      }),
    );
  }

  async hold(consumer: string, event: OutboxEvent, reason: string): Promise<void> {
    checkConsumer(consumer);
    const t = this.names.inbox;
    const text = storableText(reason);
    const envelope = envelopeJson(event);
    const id = storedId(event.id);
    await deadlockRetry(() =>
      this.#db.transaction(async (tx) => {
        await tx.query(
          `INSERT INTO ${t} (consumer, event_id, type, \`key\`, version, status, attempts, last_error, envelope, received_at, held_at)
           VALUES (?, ?, ?, ?, ?, 'held', 0, ?, ?, ${NOW}, ${NOW})
           ON DUPLICATE KEY UPDATE
             last_error = IF(${OWN_REOPENABLE}, ?, last_error),
             envelope = IF(${OWN_REOPENABLE}, ?, envelope),
             held_at = IF(${OWN_REOPENABLE}, ${NOW}, held_at),
             status = IF(${OWN_REOPENABLE}, 'held', status)`,
          [consumer, id, event.type, event.key, event.version ?? null, text, envelope, text, envelope],
        );
        const [row] = await rowsOf<{ n: number }>(tx, `SELECT 1 AS n FROM ${t} WHERE consumer = ? AND event_id = ?`, [consumer, id]);
        if (!row) throw divertedError(t, id);
      }),
    );
  }

  async recheckHeld(consumer: string, olderThanMs: number, limit: number): Promise<string[]> {
    const t = this.names.inbox;
    return deadlockRetry(() =>
      this.#db.transaction(async (tx) => {
        // Keys with held events not looked at for olderThanMs, oldest first (NULL first), at most
        // `limit` rows' worth; their held rows are stamped so the next look takes other keys.
        const picked = await rowsOf<{ key: string }>(
          tx,
          `SELECT \`key\` FROM ${t} WHERE consumer = ? AND status = 'held' AND (held_at IS NULL OR held_at < ${NOW} - INTERVAL ? MICROSECOND)
           ORDER BY held_at LIMIT ? FOR UPDATE SKIP LOCKED`,
          [consumer, Math.round(olderThanMs * 1000), limit],
        );
        const keys = [...new Set(picked.map((r) => r.key))];
        if (keys.length === 0) return [];
        await tx.query(`UPDATE ${t} SET held_at = ${NOW} WHERE consumer = ? AND status = 'held' AND \`key\` IN (${marks(keys.length)})`, [consumer, ...keys]);
        return keys;
      }),
    );
  }

  async redrivable(consumer: string, limit: number, key?: string, types?: readonly string[]): Promise<OutboxEvent[]> {
    const t = this.names.inbox;
    let rows: { envelope: unknown }[];
    if (key === undefined) {
      if (types?.length === 0) return [];
      const ofTypes = types === undefined ? '' : ` AND type IN (${marks(types.length)})`;
      rows = await this.#db.query<{ envelope: unknown }>(
        `SELECT envelope FROM ${t} WHERE consumer = ? AND status = 'retry'${ofTypes} ORDER BY \`key\`, version IS NULL, version, received_at LIMIT ?`,
        [consumer, ...(types ?? []), limit],
      );
    } else {
      rows = await this.#db.query<{ envelope: unknown }>(
        `SELECT envelope FROM ${t} WHERE consumer = ? AND \`key\` = ? AND status = 'held' ORDER BY version IS NULL, version, received_at LIMIT ?`,
        [consumer, key, limit],
      );
    }
    return rows.map((r) => envelopeFromMysql(r.envelope));
  }
}
