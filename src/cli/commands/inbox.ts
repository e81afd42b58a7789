import { userInfo } from 'node:os';
import { CliError } from '../cli-error.ts';
import type { Command } from '../command.ts';
import { openBackend, printInboxMigrationsFor, refusePostgresOnly } from '../backends/backend.ts';
import { Progress, fmt } from '../progress.ts';
import { parseDuration } from '../../core/duration.ts';
import { isUuid } from '../../core/uuid.ts';

export const inboxCommand: Command = {
  name: 'inbox',
  summary: 'the consumer side: migrate, status, dead events (list, retry, discard), held events (list, retry), prune',
  help: `Usage: txbox inbox migrate [--print]
       txbox inbox status [--json]
       txbox inbox dead list [--consumer C] [--limit N] [--json]
       txbox inbox dead retry   (--id ID ... | --all [--consumer C]) [--actor NAME]
       txbox inbox dead discard (--id ID ... | --all [--consumer C]) [--actor NAME]
       txbox inbox held list [--consumer C] [--limit N] [--json]
       txbox inbox held retry   (--id ID ... | --all [--consumer C]) [--actor NAME]
       txbox inbox prune --older-than DURATION [--batch-size N]

status   processed, failed, held, dead and retry counts per consumer
retry    marks dead (or held) events to run again; the consumer's inbox picks
         them up (inbox.start()); a held event whose gap is still open is
         held again
discard  deletes dead events (a later redelivery would run the handler again)
held     events waiting for an earlier version of their key (projection
         gap), with the reason (e.g. "version 24 ... waits for version 23")
prune    deletes processed rows older than DURATION, N rows per statement
         (default 5000): keep them longer than any broker may redeliver, or a
         late redelivery runs its handler again. On MySQL it also deletes the
         per-key lock rows (<table>_keys) of keys without open events

On MySQL or MariaDB (a mysql:// or mariadb:// database URL) the inbox tables
live in the URL's database; migrate takes the same GET_LOCK as txbox migrate.
On Firestore (a firestore:// URL) only migrate --print runs: it writes the
inbox collection's firestore.indexes.json (--inbox-table names the
collection, default txbox_inbox); FirestoreInboxAdmin does the rest.

Options:
  --inbox-table NAME   inbox table (default inbox), in --schema (PostgreSQL)
                       or the URL's database (MySQL)
  --batch-size N       rows per delete statement of prune (default 5000)`,
  positionals: ['ACTION', 'SUBACTION'],
  options: {
    'inbox-table': { type: 'string' },
    print: { type: 'boolean' },
    json: { type: 'boolean' },
    consumer: { type: 'string' },
    limit: { type: 'string' },
    id: { type: 'string', multiple: true },
    all: { type: 'boolean' },
    actor: { type: 'string' },
    'older-than': { type: 'string' },
    'batch-size': { type: 'string' },
  },
  async run({ flags, positionals, config, logger, out }) {
    const [action, sub] = positionals;
    const tableFlag = typeof flags['inbox-table'] === 'string' ? flags['inbox-table'] : undefined;
    const table = tableFlag ?? 'inbox';
    refusePostgresOnly(config, ['schema']);
    if (action === 'migrate' && flags.print) {
      out(await printInboxMigrationsFor(config, tableFlag));
      return 0;
    }
    if (!action || !['migrate', 'status', 'dead', 'held', 'prune'].includes(action)) throw new CliError('inbox: choose migrate, status, dead, held or prune (see txbox inbox --help)');
    if (action === 'dead' && !['list', 'retry', 'discard'].includes(sub ?? '')) throw new CliError('inbox dead: choose list, retry or discard');
    if (action === 'held' && !['list', 'retry'].includes(sub ?? '')) throw new CliError('inbox held: choose list or retry');
    if (action === 'prune' && typeof flags['older-than'] !== 'string') throw new CliError('inbox prune: --older-than is required (e.g. --older-than 7d)');
    const olderThanMs = action === 'prune' ? parseDuration(flags['older-than'] as string, '--older-than') : 0;
    const batch = flags['batch-size'] === undefined ? 5000 : Number(flags['batch-size']);
    if (!Number.isSafeInteger(batch) || batch <= 0) throw new CliError(`--batch-size ${String(flags['batch-size'])}: must be a positive whole number, e.g. --batch-size 5000`);
    let limit = 100;
    if (flags.limit !== undefined) {
      limit = Number(flags.limit);
      if (!Number.isSafeInteger(limit) || limit < 1) throw new CliError(`--limit: ${JSON.stringify(flags.limit)} is not a positive integer (e.g. --limit 100)`);
    }
    const backend = await openBackend(config, logger, false, 'txbox inbox');
    try {
      if (backend.inbox === undefined) {
        throw new CliError(
          backend.store === 'firestore'
            ? `${action} does not run on Firestore yet: FirestoreInboxAdmin of txbox/firestore lists, retries and discards dead and held events, counts them (status) and prunes; only migrate --print (the inbox collection's indexes) runs here`
            : `not available on ${backend.store}`,
        );
      }
      const inbox = backend.inbox(table);
      if (action === 'migrate') {
        const applied = await inbox.migrate();
        out(applied.length ? `applied ${applied.join(', ')} to ${inbox.table}` : `${inbox.table} is up to date`);
        return 0;
      }
      await inbox.assertMigrated();
      const admin = inbox.admin();
      if (action === 'status') {
        const rows = await admin.status();
        if (flags.json) out(JSON.stringify(rows, null, 2));
        else if (rows.length === 0) out(`inbox ${inbox.table}: no events received yet`);
        else {
          out(`inbox ${inbox.table}`);
          for (const r of rows) {
            out(`  ${r.consumer}: processed ${fmt(r.processed)} (${fmt(r.processedLastMinute)} in the last minute), failed ${fmt(r.failed)}, held ${fmt(r.held)}, dead ${fmt(r.dead)}, retry ${fmt(r.retry)}, last ${r.lastProcessedAt?.toISOString() ?? '-'}`);
          }
        }
        return 0;
      }
      if (action === 'prune') {
        const progress = new Progress();
        const deleted = await admin.prune(olderThanMs, batch, (n) => progress.update(`inbox prune: ${fmt(n)} processed rows deleted`));
        progress.done();
        out(`deleted ${fmt(deleted)} processed row(s)`);
        if (admin.pruneExtra) {
          const extra = await admin.pruneExtra(batch, (n) => progress.update(`inbox prune: ${fmt(n)} lock rows deleted`));
          progress.done();
          out(`deleted ${fmt(extra.deleted)} ${extra.what}`);
        }
        return 0;
      }
      const consumer = typeof flags.consumer === 'string' ? flags.consumer : undefined;
      if (sub === 'list' && action === 'held') {
        const rows = await admin.listHeld({ ...(consumer ? { consumer } : {}), limit });
        if (flags.json) out(JSON.stringify(rows, null, 2));
        else if (rows.length === 0) out('no held events');
        else for (const r of rows) out(`${r.id}  ${r.consumer}  ${r.type}  version=${r.version ?? '-'}  held since ${(r.heldAt ?? r.receivedAt).toISOString()}\n    ${r.lastError ?? ''}`);
        return 0;
      }
      if (sub === 'list') {
        const rows = await admin.listDead({ ...(consumer ? { consumer } : {}), limit });
        if (flags.json) out(JSON.stringify(rows, null, 2));
        else if (rows.length === 0) out('no dead events');
        else for (const r of rows) out(`${r.id}  ${r.consumer}  ${r.type}  attempts=${r.attempts}\n    ${r.lastError ?? ''}`);
        return 0;
      }
      const ids = (flags.id as string[] | undefined) ?? [];
      if (ids.length === 0 && !flags.all) throw new CliError(`inbox ${action} ${sub}: name events with --id ID or choose --all`);
      const bad = ids.find((id) => !isUuid(id));
      if (bad) throw new CliError(`--id: ${JSON.stringify(bad)} is not an event id (a UUID)`);
      const selector = ids.length > 0 ? { ids } : consumer ? { all: true as const, consumer } : { all: true as const };
      const actor = typeof flags.actor === 'string' ? flags.actor : userInfo().username;
      const changed =
        action === 'held' ? await admin.retryHeld(selector, actor) : sub === 'retry' ? await admin.retryDead(selector, actor) : await admin.discardDead(selector, actor);
      out(`${sub === 'retry' ? 'queued for retry' : 'discarded'}: ${changed.length} ${action} event(s)`);
      return ids.length > 0 && changed.length < ids.length ? 1 : 0;
    } finally {
      await backend.close();
    }
  },
};
