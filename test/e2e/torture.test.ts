/**
 * `txbox torture` as CI runs it: the CLI as a subprocess, at 20,000 events
 * and 20 relay kills on PostgreSQL, over HTTP and over NATS JetStream, with
 * and without --inbox (four runs), each asserting exit code 0 and the
 * summary's zero counts; plus a small PGlite run and the flag errors. The
 * relays are real `txbox relay` processes killed with SIGKILL, paused with
 * SIGSTOP past their lease and cut off with pg_terminate_backend.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { runCli } from '../helpers/cli.ts';
import { DATABASE_URL } from '../helpers/databases.ts';

const EVENTS = '20000';
const KILLS = '20';

/** The count on a summary line, e.g. `lost 0  ok` -> 0. */
function count(summary: string, label: string): number {
  const m = new RegExp(`^\\s*${label}\\s+([\\d,]+)`, 'm').exec(summary);
  assert.ok(m, `the summary has a "${label}" line:\n${summary}`);
  return Number(m[1]!.replace(/,/g, ''));
}

function assertClean(stdout: string, inbox: boolean): void {
  for (const label of ['lost', 'phantom', 'order violations', 'signature failures', 'unreadable']) assert.equal(count(stdout, label), 0, `${label}:\n${stdout}`);
  assert.ok(count(stdout, 'committed') >= Number(EVENTS), stdout);
  const kills = /faults\s+(\d+) relay kills/.exec(stdout);
  assert.ok(kills && Number(kills[1]) >= Number(KILLS), `at least ${KILLS} kills:\n${stdout}`);
  if (inbox) {
    for (const label of ['applied twice', 'version order', 'projection']) assert.equal(count(stdout, label), 0, `${label}:\n${stdout}`);
    assert.match(stdout, /applied\s+[\d,]+ unique; missing 0 {2}ok; phantom 0 {2}ok/);
  }
  assert.match(stdout, /^ok: nothing lost/m);
}

describe('txbox torture', { timeout: 1_800_000 }, () => {
  for (const transport of ['http', 'nats']) {
    for (const inbox of [false, true]) {
      it(`PostgreSQL over ${transport}${inbox ? ' with --inbox' : ''}: ${EVENTS} events, ${KILLS} kills, nothing lost, phantom or reordered`, { timeout: 900_000 }, async () => {
        const args = ['torture', '--database-url', DATABASE_URL, '--transport', transport, '--events', EVENTS, '--kills', KILLS, ...(inbox ? ['--inbox'] : [])];
        const r = await runCli(args, {}, 890_000);
        assert.equal(r.code, 0, `txbox ${args.join(' ')} exited ${r.code}:\n${r.stdout}\n${r.stderr.slice(-3000)}`);
        assertClean(r.stdout, inbox);
      });
    }
  }

  it('runs on embedded PGlite with in-process relays killed by abort()', { timeout: 300_000 }, async () => {
    const r = await runCli(['torture', '--events', '1500', '--kills', '4', '--seed', '11'], {}, 290_000);
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr.slice(-3000)}`);
    assert.match(r.stdout, /embedded PGlite/);
    assert.equal(count(r.stdout, 'lost'), 0);
    assert.equal(count(r.stdout, 'order violations'), 0);
  });

  it('refuses bad flags with the flag and the fix, exit 2', async () => {
    const cases: [string[], RegExp][] = [
      [['--duration', '5'], /--duration: must be a duration with its unit, e\.g\. 90s or 2m/],
      [['--minutes', 'soon'], /--minutes: must be a positive number of minutes/],
      [['--minutes', '1', '--duration', '1m'], /give one of them/],
      [['--transport', 'carrier-pigeon'], /--transport: unknown "carrier-pigeon"; choose one of http, nats, redis, kafka, rabbitmq/],
      [['--events', '0'], /--events: must be an integer from 1/],
      [['--inbox'], /--inbox: needs PostgreSQL/],
    ];
    for (const [flags, message] of cases) {
      const r = await runCli(['torture', ...flags]);
      assert.equal(r.code, 2, `${flags.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, message);
    }
  });
});
