import type { ParseArgsConfig } from 'node:util';
import type { Logger } from '../core/logger.ts';
import type { CliConfig } from './config.ts';

export interface CommandContext {
  readonly flags: Record<string, string | boolean | string[] | undefined>;
  readonly positionals: string[];
  readonly config: CliConfig;
  readonly logger: Logger;
  readonly out: (text: string) => void;
  /** Aborted on SIGINT/SIGTERM. */
  readonly signal: AbortSignal;
}

export interface Command {
  readonly name: string;
  readonly summary: string;
  /** Full --help text (without the global options, which main appends). */
  readonly help: string;
  readonly options: NonNullable<ParseArgsConfig['options']>;
  /** The positional arguments it takes, by name (e.g. ['ACTION']); default none. Any more are refused. */
  readonly positionals?: readonly string[];
  /**
   * It watches `signal` and stops cleanly (a relay, the dashboard, the demo,
   * torture). Otherwise the first SIGINT or SIGTERM ends the process at once:
   * a one-shot command's open transaction is rolled back by the server.
   */
  readonly stopsOnSignal?: boolean;
  /** Resolves with the exit code. */
  run(ctx: CommandContext): Promise<number>;
}

export const GLOBAL_OPTIONS = {
  help: { type: 'boolean', short: 'h' },
  config: { type: 'string' },
  'database-url': { type: 'string' },
  schema: { type: 'string' },
  table: { type: 'string' },
  'log-level': { type: 'string' },
} as const satisfies NonNullable<ParseArgsConfig['options']>;

export const GLOBAL_HELP = `Global options:
  --database-url URL   postgres:// (PostgreSQL) or mysql:// / mariadb:// (MySQL, MariaDB:
                       migrate, relay, status, parked, replay) URL (or TXBOX_DATABASE_URL);
                       firestore://PROJECT_ID[/DATABASE_ID] (Firestore: migrate, relay, status,
                       parked, replay, prune, demo; credentials from Application Default
                       Credentials, the emulator from FIRESTORE_EMULATOR_HOST)
  --schema NAME        schema of the txbox tables (default txbox; PostgreSQL only)
  --table NAME         outbox table (default outbox; on MySQL the tables' name prefix; on
                       Firestore the outbox collection, default txbox_outbox)
  --config FILE        JSON config file (default ./txbox.config.json if present)
  --log-level LEVEL    debug | info | warn | error | silent (default info)
  -h, --help           show help`;
