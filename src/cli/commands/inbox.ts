import { userInfo } from 'node:os';
import { CliError } from '../cli-error.ts';
import type { Command } from '../command.ts';
import { openDatabase } from '../database.ts';
import { fmt } from '../progress.ts';
import { parseDuration } from '../../core/duration.ts';
import { isUuid } from '../../core/uuid.ts';
import { PostgresInboxAdmin } from '../../stores/postgres/postgres-inbox-admin.ts';
import { assertMigrated, postgresInboxMigrations } from '../../stores/postgres/postgres-migrations.ts';
import { migrateInbox } from '../../stores/postgres/postgres-migrations.ts';

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
       txbox inbox prune --older-than DURATION

status   processed, failed, held, dead and retry counts per consumer
retry    marks dead (or held) events to run again; the consumer's inbox picks
         them up (inbox.start()); a held event whose gap is still open is
         held again
discard  deletes dead events (a later redelivery would run the handler again)
held     events waiting for an earlier version of their key (projection
         gap), with the reason (e.g. "version 24 ... waits for version 23")
prune    deletes processed rows older than DURATION: keep them longer than any
         broker may redeliver, or a late redelivery runs its handler again

Options:
  --inbox-table NAME   inbox table (default inbox), in --schema`,
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
  },
  async run({ flags, positionals, config, logger, out }) {
    const [action, sub] = positionals;
    const table = typeof flags['inbox-table'] === 'string' ? flags['inbox-table'] : 'inbox';
    const inboxConfig = { ...config, table };
    if (action === 'migrate' && flags.print) {
      const { printMigrations } = await import('../../stores/postgres/postgres-migrations.ts');
      const { inboxNames } = await import('../../stores/postgres/postgres-inbox-store.ts');
      out(printMigrations(inboxNames({ schema: config.schema, table }), postgresInboxMigrations()));
      return 0;
    }
    if (!action || !['migrate', 'status', 'dead', 'held', 'prune'].includes(action)) throw new CliError('inbox: choose migrate, status, dead, held or prune (see txbox inbox --help)');
    if (action === 'dead' && !['list', 'retry', 'discard'].includes(sub ?? '')) throw new CliError('inbox dead: choose list, retry or discard');
    if (action === 'held' && !['list', 'retry'].includes(sub ?? '')) throw new CliError('inbox held: choose list or retry');
    if (action === 'prune' && typeof flags['older-than'] !== 'string') throw new CliError('inbox prune: --older-than is required (e.g. --older-than 7d)');
    const olderThanMs = action === 'prune' ? parseDuration(flags['older-than'] as string, '--older-than') : 0;
    let limit = 100;
    if (flags.limit !== undefined) {
      limit = Number(flags.limit);
      if (!Number.isSafeInteger(limit) || limit < 1) throw new CliError(`--limit: ${JSON.stringify(flags.limit)} is not a positive integer (e.g. --limit 100)`);
    }
    const db = await openDatabase(inboxConfig, logger, false, 'txbox inbox');
    try {
      if (action === 'migrate') {
        const applied = await migrateInbox(db.connection, db.names);
        out(applied.length ? `applied ${applied.join(', ')} to ${db.names.outbox}` : `${db.names.outbox} is up to date`);
        return 0;
      }
      await assertMigrated(db.connection, db.names, postgresInboxMigrations()).catch((err: Error) => {
        throw new CliError(err.message.replace('txbox migrate', 'txbox inbox migrate'), 3);
      });
      const admin = new PostgresInboxAdmin(db.connection, { schema: config.schema, table });
      if (action === 'status') {
        const rows = await admin.status();
        if (flags.json) out(JSON.stringify(rows, null, 2));
        else if (rows.length === 0) out(`inbox ${db.names.outbox}: no events received yet`);
        else {
          out(`inbox ${db.names.outbox}`);
          for (const r of rows) {
            out(`  ${r.consumer}: processed ${fmt(r.processed)} (${fmt(r.processedLastMinute)} in the last minute), failed ${fmt(r.failed)}, held ${fmt(r.held)}, dead ${fmt(r.dead)}, retry ${fmt(r.retry)}, last ${r.lastProcessedAt?.toISOString() ?? '-'}`);
          }
        }
        return 0;
      }
      if (action === 'prune') {
        out(`deleted ${fmt(await admin.prune(olderThanMs))} processed row(s)`);
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
      await db.connection.close();
    }
  },
};
