import type { Logger } from '../../core/logger.ts';
import type { PostgresConnection } from './postgres-connection.ts';
import type { PostgresNames } from './postgres-sql.ts';
import { openWalStream, type WalCommit, type WalStream } from './pg-wal-stream.ts';
import { bucketOfKeyBytes, pgHashBytes } from './postgres-bucket.ts';
import { ensurePublication, isReplicationPrivilegeProblem, PublicationMismatchError, walNames, walProblems, walSlotName } from './postgres-wal.ts';

export interface PostgresWalWakeOptions {
  readonly connection: PostgresConnection;
  readonly names: PostgresNames;
  readonly logger: Logger;
  /** Names the slot (reduced to what a slot name allows). */
  readonly relayId: () => string;
  /**
   * A commit inserted outbox rows in these buckets, with these seqs (same
   * order; null when not read), or (`null` buckets) rows in buckets not known,
   * or the stream (re)started and may have missed some.
   */
  readonly onWake: (buckets: readonly number[] | null, seqs?: readonly number[] | null) => void;
  /** Diagnostics (bench/wal.ts): each commit as the stream read it, before the wake-up. */
  readonly trace?: ((commit: WalCommit) => void) | undefined;
  /** The stream is not available (could not start, or was lost): wake another way until it is back. */
  readonly onFallback: () => void;
  /** First retry after a failure; doubles up to `retryMaxMs`. Defaults: 1000, 30000 ms. */
  readonly retryMinMs?: number;
  readonly retryMaxMs?: number;
}

/** How long slot creation may take before the store warns and LISTENs meanwhile. */
const START_WARN_MS = 5000;

/** Checked against the server's hashtext() before buckets are computed here: ASCII, 2-, 3- and 4-byte UTF-8, over 12 bytes. */
const HASH_PROBE = 'txbox-bucket-probe-\u00e9\u20ac\u{1f600}';

/**
 * Whether `bucketOfKeyBytes` gives the server's buckets for the bytes the stream
 * sends: a UTF-8 database and connection (the stream's bytes are then the
 * server's) whose hashtext() reads words as this code does (little-endian).
 */
async function bucketsComputable(connection: PostgresConnection): Promise<boolean> {
  // The replication connection is opened with the pool's settings, so it has this client_encoding too.
  const { rows } = await connection.query<{ enc: string; client: string }>(
    `SELECT current_setting('server_encoding') AS enc, current_setting('client_encoding') AS client`,
  );
  if (rows[0]?.enc !== 'UTF8' || rows[0].client !== 'UTF8') return false; // (the probe cannot even be sent to LATIN1)
  const probe = await connection.query<{ h: number }>('SELECT hashtext($1) AS h', [HASH_PROBE]);
  return probe.rows[0]?.h === (pgHashBytes(Buffer.from(HASH_PROBE, 'utf8')) | 0);
}

/**
 * Keeps one logical replication stream open for a relay store: checks the
 * prerequisites, creates the publication if missing, opens a temporary slot
 * and streams it; when that fails or the stream ends (slot dropped, walsender
 * terminated, server restart) it warns once, hands over to `onFallback` and
 * retries with a new slot. Never blocks a claim: the table stays the source of
 * truth, and a stream that is down only means slower wake-ups.
 */
export class PostgresWalWake {
  readonly #o: PostgresWalWakeOptions;
  #state: 'idle' | 'starting' | 'streaming' | 'fallback' | 'closed' = 'idle';
  #stream: WalStream | undefined;
  #slot: string | undefined;
  #connecting: Promise<void> | undefined;
  #retry: NodeJS.Timeout | undefined;
  #failures = 0;
  /** A warning was logged for the current outage. */
  #warned = false;
  /** Aborts an opening in progress at close(). */
  readonly #closing = new AbortController();

  constructor(options: PostgresWalWakeOptions) {
    this.#o = options;
  }

  get streaming(): boolean {
    return this.#state === 'streaming';
  }

  get state(): 'idle' | 'starting' | 'streaming' | 'fallback' | 'closed' {
    return this.#state;
  }

  /** The slot being streamed, if any. */
  get slot(): string | undefined {
    return this.#state === 'streaming' ? this.#slot : undefined;
  }

  /** Starts the stream in the background; does nothing when started already. */
  start(): void {
    if (this.#state !== 'idle') return;
    this.#state = 'starting';
    this.#connect();
    // Creating a slot waits for the transactions running on the server to end: a long
    // one (idle in transaction) delays the stream. Meanwhile LISTEN too, and say why.
    const slow = setTimeout(() => {
      if (this.#state !== 'starting') return;
      this.#o.logger.warn({ waitedMs: START_WARN_MS }, 'txbox relay: creating the replication slot waits for transactions open on the server to finish; waking by LISTEN/NOTIFY and polling meanwhile');
      this.#o.onFallback();
    }, START_WARN_MS);
    slow.unref?.();
  }

  #connect(): void {
    this.#connecting = this.#open().finally(() => {
      this.#connecting = undefined;
    });
  }

  async #open(): Promise<void> {
    const { connection, names, logger } = this.#o;
    // What the role seems to lack for streaming, said with whatever fails after the checks.
    let advice = '';
    try {
      const problems = await walProblems(connection);
      // The role's privilege alone does not stop the attempt: services grant replication in ways of their
      // own, which the query may not see. The server decides as the stream opens; its refusal carries the advice.
      const privilege = problems.filter(isReplicationPrivilegeProblem);
      if (problems.length > privilege.length) throw new Error(problems.join('; '));
      advice = privilege.map((p) => `; ${p}`).join('');
      try {
        await ensurePublication(connection, names);
      } catch (err) {
        if (err instanceof PublicationMismatchError) throw err;
        throw new Error(`could not create publication ${walNames(names).publication} (${(err as Error).message}): run txbox migrate --wake wal as the table's owner`);
      }
      const slot = walSlotName(walNames(names), this.#o.relayId());
      // Wake only the waiters of the committed rows' buckets when they can be computed here; else everyone.
      const routed = await bucketsComputable(connection);
      if (!routed) logger.info({}, 'txbox relay: WAL wake-ups cannot compute buckets on this server (not UTF-8, or another hashtext); every commit wakes every lane');
      const { onWake, trace } = this.#o;
      const stream = await openWalStream({
        client: connection.replicationConfig!() as never,
        slot,
        publication: walNames(names).publication,
        table: { schema: names.schema, name: names.table },
        onCommit: (commit) => {
          trace?.(commit);
          onWake(routed && commit.keys ? commit.keys.map((k) => bucketOfKeyBytes(k)) : null, commit.seqs.length === commit.keys?.length ? commit.seqs : null);
        },
        onEnd: (err) => this.#down(err),
        signal: this.#closing.signal,
      });
      if ((this.#state as string) === 'closed') {
        await stream.close();
        return;
      }
      this.#stream = stream;
      this.#slot = slot;
      this.#state = 'streaming';
      this.#failures = 0;
      if (this.#warned) logger.info({ slot }, 'txbox relay: WAL stream is back; waking from the replication slot again');
      else logger.info({ slot }, 'txbox relay: waking from the WAL (logical replication slot)');
      this.#warned = false;
      this.#o.onWake(null); // anything committed while not streaming
    } catch (err) {
      this.#down(advice === '' ? (err as Error) : new Error(`${(err as Error).message}${advice}`));
    }
  }

  #down(err: Error): void {
    if (this.#state === 'closed') return;
    this.#stream = undefined;
    this.#state = 'fallback';
    const delay = Math.min(this.#o.retryMaxMs ?? 30_000, (this.#o.retryMinMs ?? 1000) * 2 ** this.#failures++);
    if (!this.#warned) {
      this.#warned = true;
      this.#o.logger.warn(
        { err: err.message, slot: this.#slot, retryInMs: delay },
        'txbox relay: WAL wake-up unavailable; waking by LISTEN/NOTIFY and polling until it is back',
      );
    }
    this.#o.onFallback();
    this.#o.onWake(null); // commits may have been missed: look at the table
    clearTimeout(this.#retry);
    this.#retry = setTimeout(() => {
      if (this.#state === 'fallback') this.#connect();
    }, delay);
    this.#retry.unref?.();
  }

  async close(): Promise<void> {
    this.#state = 'closed';
    clearTimeout(this.#retry);
    this.#closing.abort();
    await this.#connecting?.catch(() => {});
    await this.#stream?.close();
    this.#stream = undefined;
  }
}
