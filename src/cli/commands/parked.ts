import { userInfo } from 'node:os';
import { CliError } from '../cli-error.ts';
import type { Command } from '../command.ts';
import { openBackend, refusePostgresOnly } from '../backends/backend.ts';
import type { ParkedSelector } from '../../stores/postgres/postgres-admin.ts';
import { isUuid } from '../../core/uuid.ts';

export const parkedCommand: Command = {
  name: 'parked',
  summary: 'list, retry, skip or discard parked (dead-lettered) events',
  help: `Usage: txbox parked list [--destination D] [--limit N] [--json]
       txbox parked retry   (--id ID ... | --all [--destination D]) [--actor NAME]
       txbox parked skip    (--id ID ... | --all [--destination D]) [--actor NAME]
       txbox parked discard (--id ID ... | --all [--destination D]) [--actor NAME]

retry    makes the events pending again with a fresh attempt count
skip     marks them skipped: never published, no longer holding their key
discard  deletes them
Every change is written to the audit table with the actor (default: OS user).
On MySQL, which records no park time, list shows each event's occurredAt
(occurred=...) instead of parked=..., and --json has "parkedAt": null.`,
  positionals: ['ACTION'],
  options: {
    destination: { type: 'string' },
    limit: { type: 'string' },
    json: { type: 'boolean' },
    id: { type: 'string', multiple: true },
    all: { type: 'boolean' },
    actor: { type: 'string' },
  },
  async run({ flags, positionals, config, logger, out }) {
    const action = positionals[0];
    if (!action || !['list', 'retry', 'skip', 'discard'].includes(action)) {
      throw new CliError('parked: choose an action: list, retry, skip or discard (see txbox parked --help)');
    }
    const destination = typeof flags.destination === 'string' ? flags.destination : undefined;
    let selector: ParkedSelector | undefined;
    if (action !== 'list') {
      const ids = (flags.id as string[] | undefined) ?? [];
      if (ids.length > 0 && flags.all) throw new CliError('parked: give --id or --all, not both');
      if (ids.length === 0 && !flags.all) throw new CliError(`parked ${action}: name the events with --id ID (repeatable) or choose --all`);
      const bad = ids.find((id) => !isUuid(id));
      if (bad) throw new CliError(`--id: ${JSON.stringify(bad)} is not an event id (a UUID)`);
      selector = ids.length > 0 ? { ids } : destination ? { all: true, destination } : { all: true };
    }
    const limit = flags.limit === undefined ? 100 : Number(flags.limit);
    if (!Number.isSafeInteger(limit) || limit <= 0) throw new CliError(`--limit ${String(flags.limit)}: must be a positive whole number, e.g. --limit 50`);
    refusePostgresOnly(config, ['schema']);
    const backend = await openBackend(config, logger, true, 'txbox parked');
    try {
      const admin = backend.admin();
      if (action === 'list') {
        const rows = await admin.listParked({ ...(destination ? { destination } : {}), limit });
        if (flags.json) out(JSON.stringify(rows, null, 2));
        else if (rows.length === 0) out('no parked events');
        else {
          for (const r of rows) {
            const when = r.parkedAt !== null ? `parked=${r.parkedAt.toISOString()}` : `occurred=${r.occurredAt.toISOString()}`;
            out(`${r.id}  ${r.type}  dest=${r.destination}  key=${r.key}  attempts=${r.attempts}  ${when}\n    ${r.lastError ?? ''}`);
          }
        }
        return 0;
      }
      const actor = typeof flags.actor === 'string' ? flags.actor : safeUser();
      const run = { retry: admin.retryParked, skip: admin.skipParked, discard: admin.discardParked }[action as 'retry'];
      const changed = await run.call(admin, selector!, actor);
      const verb = { retry: 'retried', skip: 'skipped', discard: 'discarded' }[action as 'retry'];
      out(`${verb} ${changed.length} parked event(s)`);
      if (selector && 'ids' in selector) {
        const missing = selector.ids.filter((id) => !changed.includes(id.toLowerCase()));
        if (missing.length > 0) {
          out(`not parked (or unknown): ${missing.join(', ')}`);
          return 1;
        }
      }
      return 0;
    } finally {
      await backend.close();
    }
  },
};

function safeUser(): string {
  try {
    return userInfo().username;
  } catch {
    return 'unknown';
  }
}
