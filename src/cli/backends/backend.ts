/**
 * The CLI's store seam: `txbox migrate`, `relay`, `status`, `parked` and
 * `replay` talk to one backend per store, chosen by the database URL's
 * scheme (postgres:// or postgresql://: PostgreSQL; mysql:// or mariadb://:
 * MySQL and MariaDB; firestore://: Google Cloud Firestore). Each backend opens and checks its connection with the
 * same messages and exit codes, migrates, builds the relay store, answers
 * status and runs the parked and replay actions. PostgreSQL-only parts (WAL,
 * schemas, circuits) stay in the commands, behind `backend.postgres`.
 */
import type { Logger } from '../../core/logger.ts';
import type { RelayStore } from '../../core/ports.ts';
import type { CliConfig } from '../config.ts';
import { CliError } from '../cli-error.ts';
import type { OpenDatabase } from '../database.ts';
import type { DestinationCircuit, OutboxStatus, ParkedEvent, ParkedSelector, ReplayFilter } from '../../stores/postgres/postgres-admin.ts';
import type { WalSlotStatus } from '../../stores/postgres/postgres-wal.ts';
import type { MysqlDestinationCircuit, MysqlOutboxStatus, MysqlParkedEvent } from '../../stores/mysql/mysql-admin.ts';
import type { DashboardInboxSource, DashboardOutboxSource } from '../../dashboard/dashboard-source.ts';
import type { FirestoreParkedEvent } from '../../stores/firestore/firestore-admin.ts';
import type { FirestoreNames } from '../../stores/firestore/firestore-names.ts';
import type { FirestoreOutboxStatus } from '../../stores/firestore/firestore-status.ts';
import { importOptional } from '../optional-import.ts';
import type { FirestoreLocation } from './firestore-url.ts';

export type StoreKind = 'postgres' | 'mysql' | 'firestore';

/** What `txbox status` shows: both add the relays' open circuits; PostgreSQL adds WAL slots. */
export type StatusReport =
  | { readonly store: 'postgres'; readonly status: OutboxStatus; readonly circuits: DestinationCircuit[]; readonly slots: WalSlotStatus[] }
  | { readonly store: 'mysql'; readonly status: MysqlOutboxStatus; readonly circuits: MysqlDestinationCircuit[] }
  | { readonly store: 'firestore'; readonly status: FirestoreOutboxStatus };

/** Parked events and replay, on either store. */
export interface CliAdmin {
  listParked(options: { destination?: string; limit: number }): Promise<(ParkedEvent | MysqlParkedEvent | FirestoreParkedEvent)[]>;
  retryParked(selector: ParkedSelector, actor: string): Promise<string[]>;
  skipParked(selector: ParkedSelector, actor: string): Promise<string[]>;
  discardParked(selector: ParkedSelector, actor: string): Promise<string[]>;
  replay(filter: ReplayFilter, actor: string, onProgress: (copied: number) => void): Promise<{ replayId: string; copied: number }>;
}

export interface RelayStoreSettings {
  readonly deleteOnPublish: boolean;
  /** PostgreSQL only: marks wait for their WAL flush (MySQL's follow the server's innodb_flush_log_at_trx_commit; Firestore's are durable). */
  readonly synchronousMarks?: boolean;
  readonly wake: 'notify' | 'wal';
  readonly logger: Logger;
}

export interface CliBackend {
  readonly store: StoreKind;
  /** The outbox table as SQL names it ("txbox"."outbox", `outbox`), for messages. */
  readonly outbox: string;
  /** PostgreSQL's connection and names, for its own parts (WAL, dashboard); undefined on MySQL. */
  readonly postgres: OpenDatabase | undefined;
  /** Firestore's project, database and collections, for its own parts (migrate's index advice); absent on the SQL stores. */
  readonly firestore?: FirestoreLocation & { readonly names: FirestoreNames };
  /** Applies the migrations not yet applied; returns their names. */
  migrate(): Promise<string[]>;
  relayStore(settings: RelayStoreSettings): RelayStore;
  status(): Promise<StatusReport>;
  admin(): CliAdmin;
  close(): Promise<void>;
  /** `txbox prune`: deletes published and skipped rows finished more than `olderThanMs` ago, `batchSize` per statement. Absent: the store has no such command. */
  prune?(olderThanMs: number, batchSize: number, onProgress: (deleted: number) => void): Promise<number>;
  /** `txbox inbox` and the dashboard's inbox: the inbox tables named `table` (validated: a bad name is a CliError naming --inbox-table). Absent: no inbox on this store. */
  inbox?(table: string): CliInbox;
  /** What `txbox dashboard` reads and acts on for the outbox. Absent: no dashboard on this store. */
  dashboard?(): DashboardOutboxSource;
}

/** The operations of `txbox inbox` on one store's inbox tables. */
export interface CliInbox {
  /** The inbox table as SQL names it, for messages. */
  readonly table: string;
  /** Applies the inbox migrations not yet applied (under the store's migration lock); returns their names. */
  migrate(): Promise<string[]>;
  /** Throws a CliError (exit 3) naming `txbox inbox migrate` when the inbox tables are missing or behind. */
  assertMigrated(): Promise<void>;
  admin(): CliInboxAdmin;
}

/** The inbox admin of a store: what the dashboard shows, plus retention. */
export interface CliInboxAdmin extends DashboardInboxSource {
  listDead(options: { consumer?: string; limit?: number }): ReturnType<DashboardInboxSource['listDead']>;
  listHeld(options: { consumer?: string; limit?: number }): ReturnType<DashboardInboxSource['listHeld']>;
  retryDead(selector: { ids: readonly string[] } | { all: true; consumer?: string }, actor: string): Promise<string[]>;
  retryHeld(selector: { ids: readonly string[] } | { all: true; consumer?: string }, actor: string): Promise<string[]>;
  discardDead(selector: { ids: readonly string[] } | { all: true; consumer?: string }, actor: string): Promise<string[]>;
  /** Deletes processed rows older than `olderThanMs`, `batchSize` per statement. */
  prune(olderThanMs: number, batchSize: number, onProgress: (deleted: number) => void): Promise<number>;
  /** Store-specific clean-up after `prune` (MySQL: the per-key lock rows of keys without open events), with what it removed, for the output. */
  pruneExtra?(batchSize: number, onProgress: (deleted: number) => void): Promise<{ readonly deleted: number; readonly what: string }>;
}

const MYSQL_SCHEMES = new Set(['mysql:', 'mariadb:']);

/** The store a database URL names by its scheme: mysql:// and mariadb:// are MySQL, firestore:// Firestore, anything else PostgreSQL (as before). */
export function storeOf(url: string | undefined): StoreKind {
  if (url === undefined) return 'postgres';
  const scheme = /^([a-z][a-z0-9+.-]*:)/i.exec(url.trim())?.[1]?.toLowerCase();
  if (scheme === 'firestore:') return 'firestore';
  return scheme !== undefined && MYSQL_SCHEMES.has(scheme) ? 'mysql' : 'postgres';
}

/**
 * Opens the configured database's backend and checks that it answers (and,
 * with `requireSchema`, that it is migrated). `applicationName` names the
 * connections where the store can (pg_stat_activity on PostgreSQL).
 */
export async function openBackend(config: CliConfig, logger: Logger, requireSchema: boolean, applicationName: string): Promise<CliBackend> {
  if (storeOf(config.databaseUrl) === 'mysql') {
    const { openMysqlBackend } = await import('./mysql-backend.ts');
    return openMysqlBackend(config, requireSchema);
  }
  if (storeOf(config.databaseUrl) === 'firestore') {
    // @google-cloud/firestore is loaded here, by the first firestore:// URL: a missing package is named with the command that installs it.
    const { openFirestoreBackend } = await importOptional('txbox on Firestore', () => import('./firestore-backend.ts'));
    return openFirestoreBackend(config);
  }
  const url = config.databaseUrl;
  if (url !== undefined && !/^postgres(ql)?:\/\//.test(url) && /^[a-z][a-z0-9+.-]*:\/\//i.test(url)) {
    throw new CliError(
      `${config.sources.databaseUrl}: must be a postgres:// or postgresql:// URL (PostgreSQL) a mysql:// or mariadb:// URL (MySQL, MariaDB), or firestore://PROJECT_ID[/DATABASE_ID] (Firestore), e.g. postgres://user@127.0.0.1:5432/app or mysql://user@127.0.0.1:3306/app`,
    );
  }
  const { openPostgresBackend } = await import('./postgres-backend.ts');
  return openPostgresBackend(config, logger, requireSchema, applicationName);
}

/** The SQL of `txbox migrate --print` for the configured store (no connection). */
export async function printMigrationsFor(config: CliConfig): Promise<string> {
  if (storeOf(config.databaseUrl) === 'mysql') {
    const { printMysql } = await import('./mysql-backend.ts');
    return printMysql(config);
  }
  if (storeOf(config.databaseUrl) === 'firestore') {
    const { printFirestore } = await import('./firestore-print.ts');
    return printFirestore(config);
  }
  const { printPostgres } = await import('./postgres-backend.ts');
  return printPostgres(config);
}

/**
 * `txbox inbox migrate --print` for the configured store (no connection): the SQL of the inbox table
 * `table` (default `inbox`), or on Firestore the inbox collection's `firestore.indexes.json` (default `txbox_inbox`).
 */
export async function printInboxMigrationsFor(config: CliConfig, tableFlag: string | undefined): Promise<string> {
  if (storeOf(config.databaseUrl) === 'firestore') {
    const { printFirestoreInbox } = await import('./firestore-print.ts');
    return printFirestoreInbox(tableFlag);
  }
  const table = tableFlag ?? 'inbox';
  if (storeOf(config.databaseUrl) === 'mysql') {
    const { printMysqlInbox } = await import('./mysql-backend.ts');
    return printMysqlInbox(table);
  }
  const { printPostgresInbox } = await import('./postgres-backend.ts');
  return printPostgresInbox(config, table);
}

/**
 * Refuses, on MySQL or Firestore, a setting that only PostgreSQL has (on
 * Firestore also --delete-on-publish), naming where it was set (`--wake`,
 * `TXBOX_SCHEMA`, the config file's field) and what to do.
 */
export function refusePostgresOnly(config: CliConfig, settings: readonly ('schema' | 'wake' | 'deleteOnPublish')[]): void {
  if (storeOf(config.databaseUrl) === 'firestore') return refuseOnFirestore(config, settings);
  if (storeOf(config.databaseUrl) !== 'mysql') return;
  const s = config.sources;
  for (const setting of settings) {
    if (setting === 'schema' && s.schema !== undefined) {
      throw new CliError(`${s.schema}: schemas are PostgreSQL's; on MySQL the tables live in the database the URL names (mysql://user@host:3306/DATABASE), and --table sets their name prefix`);
    }
    if (setting === 'wake' && s.wake !== undefined) {
      throw new CliError(`${s.wake}: the wake modes (LISTEN/NOTIFY, WAL) are PostgreSQL's; a relay on MySQL wakes by polling (tune it with --poll-interval-ms)`);
    }
  }
}

/** refusePostgresOnly on Firestore: the same settings, in Firestore's terms. */
function refuseOnFirestore(config: CliConfig, settings: readonly ('schema' | 'wake' | 'deleteOnPublish')[]): void {
  const s = config.sources;
  for (const setting of settings) {
    if (setting === 'schema' && s.schema !== undefined) {
      throw new CliError(`${s.schema}: schemas are PostgreSQL's; on Firestore the collections live in the project and database the URL names (firestore://PROJECT_ID/DATABASE_ID), and --table names the outbox collection (the prefix of the others)`);
    }
    if (setting === 'wake' && s.wake !== undefined) {
      throw new CliError(`${s.wake}: the wake modes (LISTEN/NOTIFY, WAL) are PostgreSQL's; a relay on Firestore wakes by a snapshot listener on the outbox, with polling as the fallback (tune it with --poll-interval-ms)`);
    }
    if (setting === 'deleteOnPublish' && config.relay.deleteOnPublish) {
      throw new CliError(`--delete-on-publish (or relay.deleteOnPublish in the config file): not supported on Firestore; published documents are kept and removed by retention (--keep-published, e.g. 1h)`);
    }
  }
}
