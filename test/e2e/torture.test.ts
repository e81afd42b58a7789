/**
 * `txbox torture` as CI runs it: the CLI as a subprocess, at 20,000 events
 * and 20 relay kills on PostgreSQL, over HTTP and over NATS JetStream, with
 * and without --inbox (four runs, one after another), each asserting exit
 * code 0 and the summary's zero counts; plus a small PGlite run and the flag
 * errors. The relays are real `txbox relay` processes killed with
 * SIGKILL, paused with SIGSTOP past their lease and cut off with
 * pg_terminate_backend. The Kafka and RabbitMQ runs are torture-brokers.test.ts,
 * the WAL wake mode's torture-wal.test.ts, the cloud emulators'
 * torture-cloud.test.ts. This file takes 8-14 minutes on a loaded 2-core
 * machine: scripts/test.sh gives each file 20 minutes.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { runCli } from '../helpers/cli.ts';
import { DATABASE_URL } from '../helpers/databases.ts';
import { count } from '../helpers/torture-summary.ts';
import { itTortureRun } from '../helpers/torture-runs.ts';

describe('txbox torture', { timeout: 1_800_000 }, () => {
  // One after another, never two at once: two 20,000-event runs side by side (each with its relays, consumers
  // and producers) left an --inbox run short of its drain timeout on this 2-core machine.
  itTortureRun('http', false);
  itTortureRun('http', true);
  itTortureRun('nats', false);
  itTortureRun('nats', true);

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
      [['--wake', 'wal'], /--wake wal: needs PostgreSQL with wal_level=logical/],
      [['--wake', 'listen', '--database-url', DATABASE_URL], /--wake listen: choose notify .* or wal/],
    ];
    for (const [flags, message] of cases) {
      const r = await runCli(['torture', ...flags]);
      assert.equal(r.code, 2, `${flags.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, message);
    }
  });
});

