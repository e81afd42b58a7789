/**
 * A torture run killed from outside (kill -9 of the CLI: a test's timeout, a
 * CI step's limit) takes its relay and consumer processes with it
 * (src/cli/torture/exit-with-parent.ts): before, they kept publishing and
 * consuming beside whatever ran next.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { it } from 'node:test';
import { promisify } from 'node:util';
import pg from 'pg';
import { startCli } from '../helpers/cli.ts';
import { DATABASE_URL } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';

const childrenOf = async (pid: number): Promise<number[]> => {
  const { stdout } = await promisify(execFile)('pgrep', ['-P', String(pid)]).catch(() => ({ stdout: '' }));
  return stdout.split('\n').filter(Boolean).map(Number);
};
const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

it('kill -9 of txbox torture ends its relay processes within seconds (consumer processes too, test/e2e/torture.test.ts runs them)', { timeout: 180_000 }, async () => {
  const running = startCli(['torture', '--database-url', DATABASE_URL, '--transport', 'nats', '--events', '200000', '--kills', '0', '--relays', '3']);
  const cli = running.child.pid!;
  let children: number[] = [];
  try {
    // 3 relays, the run under way, and its faults over (--kills 0 still makes one pause and one terminated
    // session): a relay paused by SIGSTOP at the kill could not end before a SIGCONT (exit-with-parent.ts).
    // Over NATS a relay writes nothing while all is well, so no broken pipe ends it either.
    await waitFor('the pause and the termination done', () => /delivered [1-9].*pauses 1 \| terminated [1-9]/.test(running.stderr()), 90_000, 200);
    await new Promise((r) => setTimeout(r, 4000)); // the pause lasts the lease + 1 s (3 s)
    children = await childrenOf(cli);
    assert.ok(children.length >= 3, `the relay processes: ${children.join(', ')}`);
  } catch (err) {
    running.child.kill('SIGKILL');
    throw new Error(`${(err as Error).message}\n${running.stderr().slice(-2000)}`);
  }
  running.child.kill('SIGKILL');
  await running.exited;
  const left = (): number[] => children.filter(alive);
  let stillRunning: number[] = [];
  try {
    await waitFor('every child process gone', () => left().length === 0, 10_000, 100).catch(() => {
      stillRunning = left();
    });
  } finally {
    for (const pid of left()) process.kill(pid, 'SIGKILL');
    // The killed run could not drop its schema (dropped only now: relays that lose their table log, and a
    // relay writing to the dead parent's pipe dies of the broken pipe, which would hide what is tested here).
    const run = /txbox torture: run ([0-9a-f]+)/.exec(running.stderr())?.[1];
    if (run) {
      const client = new pg.Client({ connectionString: DATABASE_URL });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS "txbox_torture_${run}" CASCADE`).finally(() => client.end());
    }
  }
  assert.deepEqual(stillRunning, [], `still running 10 s after the torture process was killed (of ${children.join(', ')})`);
});
