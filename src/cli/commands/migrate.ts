import { CliError } from '../cli-error.ts';
import type { Command } from '../command.ts';
import { openBackend, printMigrationsFor, refusePostgresOnly } from '../backends/backend.ts';
import { ensurePublication, walNames, walProblems } from '../../stores/postgres/postgres-wal.ts';
import { INDEX_PURPOSES, gcloudIndexCommands } from '../../stores/firestore/firestore-indexes.ts';
import type { CliBackend } from '../backends/backend.ts';

export const migrateCommand: Command = {
  name: 'migrate',
  summary: 'create or upgrade the txbox tables (safe when several deploys run it at once)',
  help: `Usage: txbox migrate [--print] [--wake wal]

Applies the numbered migrations in one transaction under an advisory lock:
two deploys migrating at once apply each migration exactly once. On MySQL
and MariaDB (a mysql:// or mariadb:// database URL) they run under GET_LOCK,
statement by statement (MySQL commits DDL on its own), in the URL's database.

On Firestore (firestore://PROJECT_ID[/DATABASE_ID]) there are no tables: it
checks that the credentials may read and write the project's database,
creates the 256 bucket documents (relays would otherwise on their first
lease), and lists the composite indexes the queries need, which Firestore
does not create by itself: deploy them before the relays run (the emulator
needs none), with firebase (--print writes firestore.indexes.json) or the
gcloud commands it prints.

Options:
  --print   write the SQL to stdout instead, for your own migration tool
            (needs no database; a mysql:// or mariadb:// --database-url
            prints MySQL's; a firestore:// one prints firestore.indexes.json:
            txbox migrate --print > firestore.indexes.json &&
            firebase deploy --only firestore:indexes)
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
      if (backend.firestore !== undefined) {
        out(firestoreAdvice(backend, applied));
        return 0;
      }
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

/** What `migrate` did on Firestore, and the composite indexes the user must deploy (Firestore creates none by itself). */
function firestoreAdvice(backend: CliBackend, applied: readonly string[]): string {
  const fs = backend.firestore!;
  const lines = [
    `${backend.outbox}: read and write access checked; ${applied.length > 0 ? `created ${applied.join(', ')} in ${fs.names.buckets}` : `the bucket documents of ${fs.names.buckets} exist`}; no tables to create on Firestore`,
  ];
  if (fs.emulator !== undefined) {
    lines.push(`indexes: the emulator at ${fs.emulator} needs none; on Firestore itself deploy the ${INDEX_PURPOSES.length} composite indexes of \`txbox migrate --print\` first`);
    return lines.join('\n');
  }
  lines.push(
    `indexes: Firestore does not create composite indexes by itself, and without them the relays' and status' queries fail (FAILED_PRECONDITION). Deploy these ${INDEX_PURPOSES.length} before running relays:`,
    `  txbox migrate --print --database-url firestore://${fs.projectId}${fs.databaseId === '(default)' ? '' : `/${fs.databaseId}`} --table ${fs.names.collection} > firestore.indexes.json && firebase deploy --only firestore:indexes --project ${fs.projectId}`,
    '  or with gcloud (field exemptions of payload and headers are in the --print file only; they save index writes):',
    ...gcloudIndexCommands(fs.projectId, fs.databaseId, { collection: fs.names.collection }).map((c, i) => `  ${c}    # ${INDEX_PURPOSES[i]}`),
  );
  return lines.join('\n');
}
