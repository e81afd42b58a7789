import { userInfo } from 'node:os';
import { CliError } from '../cli-error.ts';
import type { Command } from '../command.ts';
import { openBackend, refusePostgresOnly } from '../backends/backend.ts';
import { Progress, fmt } from '../progress.ts';
import type { ReplayFilter } from '../../stores/postgres/postgres-admin.ts';

export const replayCommand: Command = {
  name: 'replay',
  summary: 're-publish published events (by time range, key, type or destination) with their original ids',
  help: `Usage: txbox replay [--from TIME] [--to TIME] [--key KEY] [--type TYPE] [--destination D] [--actor NAME]

Copies matching published events back into the outbox, after whatever is
pending, in their original order and with their original ids, so consumers
with an inbox drop the ones they already applied. Only rows still retained
can be replayed (see --keep-published of txbox relay). At least one filter
is required. TIME is ISO 8601 (2026-11-22T10:00:00Z); --from is inclusive,
--to exclusive. Each copy carries the header txbox-replay-id.`,
  options: {
    from: { type: 'string' },
    to: { type: 'string' },
    key: { type: 'string' },
    type: { type: 'string' },
    destination: { type: 'string' },
    actor: { type: 'string' },
  },
  async run({ flags, config, logger, out }) {
    const filter: { -readonly [K in keyof ReplayFilter]: ReplayFilter[K] } = {};
    for (const f of ['from', 'to'] as const) {
      const v = flags[f];
      if (typeof v === 'string') {
        const d = new Date(v);
        if (Number.isNaN(d.getTime())) throw new CliError(`--${f}: ${JSON.stringify(v)} is not a date; use ISO 8601 like 2026-11-22T10:00:00Z`);
        filter[f] = d;
      }
    }
    for (const f of ['key', 'type', 'destination'] as const) if (typeof flags[f] === 'string') filter[f] = flags[f] as string;
    if (Object.keys(filter).length === 0) throw new CliError('replay: give at least one filter (--from, --to, --key, --type or --destination)');
    refusePostgresOnly(config, ['schema']);
    const backend = await openBackend(config, logger, true, 'txbox replay');
    const progress = new Progress();
    try {
      const admin = backend.admin();
      const actor = typeof flags.actor === 'string' ? flags.actor : userInfo().username;
      const { replayId, copied } = await admin.replay(filter, actor, (n) => progress.update(`replay: ${fmt(n)} events queued`));
      progress.done();
      out(`replay ${replayId}: ${fmt(copied)} event(s) queued for publishing`);
      return 0;
    } finally {
      await backend.close();
    }
  },
};
