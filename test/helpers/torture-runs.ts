/** The 20,000-event `txbox torture` runs that CI makes per transport, with and without --inbox (test/e2e/torture.test.ts). */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { runCli } from './cli.ts';
import { DATABASE_URL } from './databases.ts';
import { assertClean } from './torture-summary.ts';

const EVENTS = '20000';
const KILLS = '20';

/** Registers the test of `txbox torture` on PostgreSQL over `transport`, 20,000 events and 20 relay kills, with --inbox or without. */
export function itTortureRun(transport: string, inbox: boolean): void {
  it(`PostgreSQL over ${transport}${inbox ? ' with --inbox' : ''}: ${EVENTS} events, ${KILLS} kills, nothing lost, phantom or reordered`, { timeout: 900_000 }, async () => {
    // --inbox: an 8-minute drain. Under load 20-37 the consumer processes apply slower than the producers commit,
    // and catching up took longer than the 2-minute default (a bound on liveness, not a check: every count is still
    // asserted, and a stall fails however long the bound; the report's 'applied in drain' line tells the two apart).
    const args = ['torture', '--database-url', DATABASE_URL, '--transport', transport, '--events', EVENTS, '--kills', KILLS, ...(inbox ? ['--inbox', '--drain-timeout', '8m'] : [])];
    const r = await runCli(args, {}, 890_000);
    // The lines that failed come first: CI shows only the head of a long message.
    const failed = r.stdout.split('\n').filter((l) => /FAILED|timed out|applied in drain/.test(l));
    assert.equal(r.code, 0, `txbox ${args.join(' ')} exited ${r.code}:\n${failed.join('\n')}\n--- summary ---\n${r.stdout}\n--- stderr (tail) ---\n${r.stderr.slice(-3000)}`);
    assertClean(r.stdout, inbox, EVENTS, KILLS);
  });
}
