import { CliError } from '../cli-error.ts';
import type { Command } from '../command.ts';
import { openBackend, printMigrationsFor, refusePostgresOnly } from '../backends/backend.ts';
import { ensurePublication, walNames, walProblems } from '../../stores/postgres/postgres-wal.ts';

export const migrateCommand: Command = {
  name: 'migrate',
  summary: 'create or upgrade the txbox tables (safe when several deploys run it at once)',
  help: `Usage: txbox migrate [--print] [--wake wal]

Applies the numbered migrations in one transaction under an advisory lock:
two deploys migrating at once apply each migration exactly once. On MySQL
and MariaDB (a mysql:// or mariadb:// database URL) they run under GET_LOCK,
statement by statement (MySQL commits DDL on its own), in the URL's database.

Options:
  --print   write the SQL to stdout instead, for your own migration tool
            (needs no database; a mysql:// or mariadb:// --database-url
            prints MySQL's)
  --wake wal  also prepare the WAL wake mode (txbox relay --wake wal): create
            the outbox's publication (inserts only), then check wal_level, the
            REPLICATION attribute and free slots, and say what is missing
            (exit code 1 if anything is; PostgreSQL only)`,
  options: { print: { type: 'boolean' }, wake: { type: 'string' } },
  async run({ flags, config, logger, out }) {
    refusePostgresOnly(config, ['schema', 'wake']);
    if (flags.print) {
      out(await printMigrationsFor(config));
      return 0;
    }
    const wake = flags.wake;
    if (wake !== undefined && wake !== 'wal' && wake !== 'notify') throw new CliError(`--wake ${String(wake)}: choose wal (prepare the WAL wake mode) or notify (nothing to prepare)`);
    const backend = await openBackend(config, logger, false, 'txbox migrate');
    try {
      const applied = await backend.migrate();
      out(applied.length ? `applied ${applied.join(', ')} to ${backend.outbox}` : `${backend.outbox} is up to date`);
      const db = backend.postgres;
      if (wake !== 'wal' || db === undefined) return 0;
      const created = await ensurePublication(db.connection, db.names);
      out(`publication "${walNames(db.names).publication}" ${created ? 'created' : 'exists'} (inserts into ${db.names.outbox})`);
      const problems = await walProblems(db.connection);
      for (const p of problems) out(`WAL wake mode: missing: ${p}`);
      if (problems.length === 0) out('WAL wake mode: ready (txbox relay --wake wal)');
      return problems.length === 0 ? 0 : 1;
    } finally {
      await backend.close();
    }
  },
};
