/**
 * `txbox torture --inbox` over the cloud emulators, short: 1,500 events and 4
 * relay kills each, with consumer processes killed mid-handler or between
 * commit and ack. Over Google's Pub/Sub emulator the observer reads an
 * ordering subscription of the run's topic and the PubSubConsumer processes
 * a subscription of their own; over an SQS emulator (ElasticMQ) the
 * SqsConsumer processes read the relays' FIFO queue and their applied table
 * is the evidence. Each run asserts exit 0 and the summary's zero counts;
 * the address errors exit 2 naming the flag. The Pub/Sub run skips with a
 * clear message when the emulator is not installed.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { runCli } from '../helpers/cli.ts';
import { DATABASE_URL } from '../helpers/databases.ts';
import { freePort } from '../helpers/ports.ts';
import { EMULATOR_HOST, emulatorSkip } from '../helpers/pubsub.ts';
import { SQS_ENDPOINT } from '../helpers/sqs.ts';

const skipPubSub = await emulatorSkip();

/** The count on a summary line, e.g. `lost 0  ok` -> 0. */
function count(summary: string, label: string): number {
  const m = new RegExp(`^\\s*${label}\\s+([\\d,]+)`, 'm').exec(summary);
  assert.ok(m, `the summary has a "${label}" line:\n${summary}`);
  return Number(m[1]!.replace(/,/g, ''));
}

function assertClean(stdout: string): void {
  for (const label of ['lost', 'phantom', 'order violations', 'unreadable', 'applied twice', 'version order', 'projection']) assert.equal(count(stdout, label), 0, `${label}:\n${stdout}`);
  assert.ok(count(stdout, 'committed') >= 1500, stdout);
  const faults = /faults\s+(\d+) relay kills/.exec(stdout);
  assert.ok(faults && Number(faults[1]) >= 4, `at least 4 relay kills:\n${stdout}`);
  assert.match(stdout, /applied\s+[\d,]+ unique; missing 0 {2}ok; phantom 0 {2}ok/);
  assert.match(stdout, /inbox consumers\s+[1-9]\d* killed/);
  assert.match(stdout, /^ok: nothing lost/m);
}

describe('txbox torture over the cloud emulators', { timeout: 700_000 }, () => {
  it('PostgreSQL over Pub/Sub with --inbox: 1500 events, 4 kills, each event applied once, projections at their last version', { skip: skipPubSub, timeout: 300_000 }, async () => {
    const args = ['torture', '--database-url', DATABASE_URL, '--transport', 'pubsub', '--inbox', '--events', '1500', '--kills', '4', '--drain-timeout', '3m'];
    const r = await runCli(args, { PUBSUB_EMULATOR_HOST: EMULATOR_HOST }, 290_000);
    assert.equal(r.code, 0, `txbox ${args.join(' ')} exited ${r.code}:\n${r.stdout}\n${r.stderr.slice(-3000)}`);
    assert.match(r.stdout, /-> Google Pub\/Sub \(topic txbox-torture-[0-9a-f]+ on the emulator/);
    assertClean(r.stdout);
  });

  it('PostgreSQL over SQS with --inbox: 1500 events, 4 kills, each event applied once, projections at their last version', { timeout: 300_000 }, async () => {
    const args = ['torture', '--database-url', DATABASE_URL, '--transport', 'sqs', '--transport-url', SQS_ENDPOINT, '--inbox', '--events', '1500', '--kills', '4', '--drain-timeout', '3m'];
    const r = await runCli(args, {}, 290_000);
    assert.equal(r.code, 0, `txbox ${args.join(' ')} exited ${r.code}:\n${r.stdout}\n${r.stderr.slice(-3000)}`);
    assert.match(r.stdout, /-> Amazon SQS \(FIFO queue txbox-torture-[0-9a-f]+\.fifo at [^)]+\), read by 2 inbox consumer processes/);
    assertClean(r.stdout);
  });

  it('an emulator address it cannot use exits 2 naming --transport-url', { timeout: 180_000 }, async () => {
    const closed = await freePort();
    const cases: [string[], RegExp][] = [
      [['--transport', 'sqs', '--transport-url', `http://127.0.0.1:${closed}`], /--transport-url: cannot create queue txbox-torture-[0-9a-f]+\.fifo at http:\/\/127\.0\.0\.1:\d+ .*scripts\/sqs\/up\.sh/],
      [['--transport', 'pubsub', '--transport-url', 'nowhere'], /--transport-url: "nowhere" is not host:port of the Pub\/Sub emulator/],
    ];
    const results = await Promise.all(cases.map(([flags]) => runCli(['torture', '--database-url', DATABASE_URL, '--events', '10', '--kills', '0', ...flags], {}, 170_000)));
    results.forEach((r, i) => {
      assert.equal(r.code, 2, `${cases[i]![0].join(' ')}: ${r.stdout}\n${r.stderr}`);
      assert.match(r.stderr, cases[i]![1]);
    });
  });
});
