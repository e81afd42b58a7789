// pg is loaded when a stream opens, not with this module: txbox/pglite re-exports the
// relay store, which must import without pg installed.
import type pg from 'pg';
import { performance } from 'node:perf_hooks';
import { thrownText } from '../../core/error-text.ts';
import { destroySocket, endOrAbandon } from './pg-sockets.ts';

/**
 * One logical replication stream over node-postgres (`replication: 'database'`):
 * creates a TEMPORARY `pgoutput` slot on its own connection, streams the
 * publication from it and calls `onCommit` once per committed transaction that
 * inserted into a published table (PostgreSQL 15 does not send empty
 * transactions), with the `seq` and the `key` bytes of the rows it inserted
 * (two columns read by name from each row; nothing else is parsed). It confirms what it received promptly (at most every
 * `confirmEveryMs`, and at once when the server asks), including the keepalives'
 * positions, so the slot does not hold back WAL written to other tables while
 * the outbox is idle. A temporary slot is dropped by the server when this
 * connection ends, also when the process is killed.
 *
 * Hand-written rather than `pg-logical-replication`: that library opens its own
 * connection for START_REPLICATION (a TEMPORARY slot must be created on the same
 * session), sends one status update per message, does not answer the server's
 * reply requests, and parses every row, which a wake-up does not need.
 */
export interface WalStreamOptions {
  /** Connection settings (a `pg` Pool's options); `replication` is added. */
  readonly client: pg.ClientConfig;
  readonly slot: string;
  readonly publication: string;
  readonly onCommit: (commit: WalCommit) => void;
  /** The stream ended (connection lost, slot dropped, server restart); not called after `close()`. */
  readonly onEnd: (err: Error) => void;
  /** Default: 100 ms. */
  readonly confirmEveryMs?: number;
  /** The rows of one transaction kept for `onCommit`; past it `keys` is null. Default: MAX_ROWS_PER_COMMIT. */
  readonly maxRowsPerCommit?: number;
  /**
   * The table whose inserts count (the outbox). Rows of other tables of the
   * publication are skipped, and a transaction with none of this table's rows
   * calls no `onCommit`. Default: every table of the publication.
   */
  readonly table?: { readonly schema: string; readonly name: string };
  /** Aborts the opening (creating a slot waits for the transactions open on the server). */
  readonly signal?: AbortSignal;
  /**
   * After this long without a byte from the server the stream asks it for a
   * keepalive; after twice this long it is ended as lost (`onEnd`): a server
   * or network gone silent would otherwise leave it deaf until TCP gives up
   * (about 15 minutes). Default: 10000 ms.
   */
  readonly silenceMs?: number;
}

/** One committed transaction that inserted outbox rows, as the stream read it. */
export interface WalCommit {
  /**
   * The `key` column of each inserted row, as the bytes the server sent (the
   * connection's client encoding, UTF-8), or `null` when a row's key could not
   * be read (no such column, or a row in another form): wake every waiter then.
   */
  readonly keys: readonly Uint8Array[] | null;
  /** The `seq` column of each inserted row; empty when not read (also when `keys` is null). */
  readonly seqs: readonly number[];
  /** The server's commit time, epoch milliseconds. */
  readonly commitTimeMs: number;
}

export interface WalStream {
  /** The last position confirmed to the server (text form, e.g. `0/16B3748`). */
  confirmedLsn(): string;
  /** Commits received. */
  commits(): number;
  close(): Promise<void>;
}

/**
 * The rows of one transaction the stream keeps (key and seq) until its Commit
 * arrives. A transaction that inserts more (a backfill, an `INSERT ... SELECT`)
 * is announced with `keys: null`: every lane wakes and runs its ordinary
 * claim, which serves a backlog better than claims by seq would, and the
 * stream's memory stays bounded whatever the transaction's size (one
 * transaction of a million rows took its process from 86-92 to 348-372 MB before;
 * bench/wal-large-commit.ts).
 */
export const MAX_ROWS_PER_COMMIT = 1000;

/** Byte 0 of a CopyData message, and byte 0 of a pgoutput message. */
const XLOG_DATA = 0x77; // 'w'
const KEEPALIVE = 0x6b; // 'k'
const COMMIT = 0x43; // 'C'
const BEGIN = 0x42; // 'B'
const RELATION = 0x52; // 'R'
const INSERT = 0x49; // 'I'
const TEXT = 0x74; // 't': a column sent as text

/** Where the `seq` and `key` columns are in a relation's rows (-1: absent); `skip`: not the table whose rows count. */
interface Columns {
  readonly seq: number;
  readonly key: number;
  readonly skip: boolean;
}

/** Relation: relid(4), namespace\0, name\0, replica identity(1), ncols(2), then per column flags(1), name\0, type(4), typmod(4). */
function relationColumns(m: Buffer, table: WalStreamOptions['table']): [number, Columns] {
  const relid = m.readUInt32BE(1);
  const schemaEnd = m.indexOf(0, 5);
  const nameEnd = m.indexOf(0, schemaEnd + 1);
  // The namespace and name as the server spells them (unquoted), in the connection's encoding (UTF-8).
  const skip = table !== undefined && (m.toString('utf8', 5, schemaEnd) !== table.schema || m.toString('utf8', schemaEnd + 1, nameEnd) !== table.name);
  let i = nameEnd + 1;
  i += 1;
  const n = m.readUInt16BE(i);
  i += 2;
  let seq = -1;
  let key = -1;
  for (let c = 0; c < n; c++) {
    const end = m.indexOf(0, i + 1);
    const name = m.toString('utf8', i + 1, end);
    if (name === 'seq') seq = c;
    else if (name === 'key') key = c;
    i = end + 1 + 8;
  }
  return [relid, { seq, key, skip }];
}

/**
 * Insert (proto 1): relid(4), 'N', then TupleData: ncols(2), per column a kind
 * byte ('n' null, 'u' unchanged, 't' text: length(4), bytes). Returns false
 * when the row is not in the expected form.
 */
function readInsert(m: Buffer, cols: Columns | undefined, keys: Uint8Array[], seqs: number[]): boolean {
  if (!cols || cols.key < 0 || m[5] !== 0x4e) return false;
  const n = m.readUInt16BE(6);
  const last = Math.max(cols.key, cols.seq);
  let i = 8;
  let gotKey = false;
  for (let c = 0; c < n && c <= last; c++) {
    const kind = m[i];
    if (kind !== TEXT) {
      if (c === cols.key) return false;
      i += 1;
      continue;
    }
    const len = m.readUInt32BE(i + 1);
    const start = i + 5;
    if (c === cols.key) {
      // A copy: pg's parser reuses its buffer for the messages that follow.
      keys.push(Uint8Array.prototype.slice.call(m, start, start + len));
      gotKey = true;
    } else if (c === cols.seq) seqs.push(Number(m.toString('latin1', start, start + len)));
    i = start + len;
  }
  return gotKey;
}

/** Microseconds between 1970-01-01 and 2000-01-01 (the protocol's epoch). */
const PG_EPOCH_US = 946_684_800_000_000n;

export function lsnText(lsn: bigint): string {
  return `${(lsn >> 32n).toString(16).toUpperCase()}/${(lsn & 0xffffffffn).toString(16).toUpperCase()}`;
}

/** Opens the connection, creates the temporary slot and starts streaming; rejects if any step fails. */
export async function openWalStream(options: WalStreamOptions): Promise<WalStream> {
  const { default: pgModule } = await import('pg');
  const client = new pgModule.Client({ ...options.client, replication: 'database' } as pg.ClientConfig);
  const confirmEveryMs = options.confirmEveryMs ?? 100;
  const maxRows = options.maxRowsPerCommit ?? MAX_ROWS_PER_COMMIT;
  let received = 0n;
  let confirmed = 0n;
  let commits = 0;
  let closed = false;
  let ended = false;
  let timer: NodeJS.Timeout | undefined;
  const connection = (client as unknown as { connection: { on(e: string, f: (m: { chunk: Buffer }) => void): void; sendCopyFromChunk(b: Buffer): void } }).connection;

  const confirm = (reply = false): void => {
    clearTimeout(timer);
    timer = undefined;
    if (closed || ended) return;
    const status = Buffer.alloc(34);
    status[0] = 0x72; // 'r': standby status update
    status.writeBigUInt64BE(received, 1); // written
    status.writeBigUInt64BE(received, 9); // flushed: what the slot may release
    status.writeBigUInt64BE(received, 17); // applied
    status.writeBigInt64BE(BigInt(Date.now()) * 1000n - PG_EPOCH_US, 25);
    status[33] = reply ? 1 : 0;
    connection.sendCopyFromChunk(status);
    confirmed = received;
  };
  const advance = (lsn: bigint): void => {
    if (lsn <= received) return;
    received = lsn;
    timer ??= setTimeout(() => confirm(), confirmEveryMs);
  };
  // Until the opening returns, an end is the opening's failure (it rejects), not onEnd's.
  let opening = true;
  let endedWhileOpening: Error | undefined;
  let heardAt = performance.now();
  let watch: NodeJS.Timeout | undefined;
  const end = (err: Error): void => {
    if (ended) return;
    ended = true;
    clearTimeout(timer);
    clearInterval(watch);
    if (opening) endedWhileOpening = err;
    else if (!closed) options.onEnd(err);
    client.end().catch(() => {});
  };

  client.on('error', (err) => end(err));
  client.on('end', () => end(new Error('replication connection closed')));
  const relations = new Map<number, Columns>();
  // The rows of the transaction being received; `keys` null once one could not be read.
  let keys: Uint8Array[] | null = [];
  let seqs: number[] = [];
  connection.on('copyData', ({ chunk }) => {
    heardAt = performance.now();
    // This runs in the socket's data handler: anything thrown here (a message cut short, a callback's
    // error) would be an uncaught exception. It ends the stream instead, and the relay falls back.
    try {
      onCopyData(chunk);
    } catch (err) {
      end(new Error(`unreadable pgoutput data (${thrownText(err)}): the replication stream is ended`));
    }
  });
  const onCopyData = (chunk: Buffer): void => {
    if (chunk[0] === XLOG_DATA) {
      // w, dataStart(8), walEnd(8), sendTime(8), then the pgoutput message.
      const kind = chunk[25];
      if (kind === INSERT) {
        if (keys === null) return;
        const cols = relations.get(chunk.readUInt32BE(26));
        if (cols?.skip) return; // another table of the publication
        if (keys.length >= maxRows || !readInsert(chunk.subarray(25), cols, keys, seqs)) {
          // Too many rows to keep, or one not readable: the commit wakes every lane.
          keys = null;
          seqs = [];
        }
      } else if (kind === COMMIT) {
        commits++;
        // Commit: flags(1), commit lsn(8), end lsn(8), timestamp(8).
        const commitTimeMs = Number(chunk.readBigInt64BE(26 + 17) + PG_EPOCH_US) / 1000;
        const commit: WalCommit = { keys, seqs, commitTimeMs };
        keys = [];
        seqs = [];
        // keys empty: only rows of other tables of the publication (PostgreSQL 15 sends no empty transactions).
        if (commit.keys === null || commit.keys.length > 0) options.onCommit(commit);
        advance(chunk.readBigUInt64BE(26 + 9));
      } else if (kind === BEGIN) {
        keys = [];
        seqs = [];
      } else if (kind === RELATION) {
        const [relid, cols] = relationColumns(chunk.subarray(25), options.table);
        relations.set(relid, cols);
      }
    } else if (chunk[0] === KEEPALIVE) {
      // k, walEnd(8), sendTime(8), reply requested(1). Nothing of ours is pending
      // (we act on commits only), so everything up to walEnd can be released.
      advance(chunk.readBigUInt64BE(1));
      if (chunk[17] === 1) confirm();
    }
  };

  // An abort ends the connection and rejects the opening itself: pg's connect() never settles when
  // end() is called before the socket has connected, and a close() waiting for it would wait forever.
  let onAbort: (() => void) | undefined;
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => {
      client.end().catch(() => {});
      reject(new Error('the opening of the replication stream was aborted'));
    };
  });
  aborted.catch(() => {});
  const abort = (): void => onAbort!();
  options.signal?.addEventListener('abort', abort, { once: true });
  try {
    options.signal?.throwIfAborted();
    await Promise.race([client.connect(), aborted]);
    await Promise.race([client.query(`CREATE_REPLICATION_SLOT "${options.slot}" TEMPORARY LOGICAL pgoutput NOEXPORT_SNAPSHOT`), aborted]);
    options.signal?.throwIfAborted();
    // The connection ended right after the slot was made (a FATAL in the same read): no stream to return.
    if (endedWhileOpening !== undefined) throw endedWhileOpening;
  } catch (err) {
    ended = true;
    await client.end().catch(() => {});
    throw err;
  } finally {
    options.signal?.removeEventListener('abort', abort);
  }
  opening = false;
  const publication = options.publication.replaceAll('"', '""').replaceAll("'", "''");
  // Resolves only when the stream ends; errors arrive through 'error' as well.
  client.query(`START_REPLICATION SLOT "${options.slot}" LOGICAL 0/0 (proto_version '1', publication_names '"${publication}"')`).then(
    () => end(new Error('replication stream ended')),
    (err: Error) => end(err),
  );
  // The server sends keepalives on its own only every wal_sender_timeout / 2 (30 s by default); a
  // reply request gets one at once. No answer to it: the connection is gone (its socket destroyed:
  // end() would wait for a goodbye that never comes).
  const silenceMs = options.silenceMs ?? 10_000;
  heardAt = performance.now();
  watch = setInterval(() => {
    const quietMs = performance.now() - heardAt;
    if (quietMs >= 2 * silenceMs) {
      end(new Error(`the replication connection sent nothing for ${Math.round(quietMs)} ms, not even an answer to a keepalive request`));
      destroySocket(client);
    } else if (quietMs >= silenceMs) confirm(true);
  }, Math.max(10, Math.floor(silenceMs / 2)));
  watch.unref();
  return {
    confirmedLsn: () => lsnText(confirmed),
    commits: () => commits,
    async close() {
      if (closed) return;
      closed = true;
      clearTimeout(timer);
      clearInterval(watch);
      ended = true;
      // A silent server never answers the goodbye: its socket is destroyed after a short wait.
      await endOrAbandon(client);
    },
  };
}

