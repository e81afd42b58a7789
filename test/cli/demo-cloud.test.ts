/**
 * `txbox demo --transport pubsub|sqs`: the demo through Google's Pub/Sub
 * emulator (a topic and an ordering subscription of the run) and through an
 * SQS emulator (ElasticMQ: a FIFO queue of the run), verified end to end
 * (nothing lost, nothing phantom, per-key order, the projection), with what
 * it created removed afterwards; and the address errors, exit 2 naming where
 * the address came from. The Pub/Sub cases skip with a clear message when
 * the emulator is not installed.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { GetQueueUrlCommand } from '@aws-sdk/client-sqs';
import { runCli, type CliResult } from '../helpers/cli.ts';
import { DATABASE_URL } from '../helpers/databases.ts';
import { freePort } from '../helpers/ports.ts';
import { EMULATOR_HOST, emulatorSkip } from '../helpers/pubsub.ts';
import { sqsClient, SQS_ENDPOINT } from '../helpers/sqs.ts';
import { PubSub } from '@google-cloud/pubsub';

const skipPubSub = await emulatorSkip();

/** A client of the demo's project on the emulator (the demo uses project txbox-demo). */
function adminClientFor(projectId: string): PubSub {
  const at = EMULATOR_HOST.lastIndexOf(':');
  return new PubSub({ projectId, apiEndpoint: EMULATOR_HOST, servicePath: EMULATOR_HOST.slice(0, at), port: Number(EMULATOR_HOST.slice(at + 1)), emulatorMode: true, universeDomain: 'googleapis.com' } as ConstructorParameters<typeof PubSub>[0]);
}

function assertVerified(r: CliResult, what: string): void {
  assert.equal(r.code, 0, `${what} exited ${r.code}:\n${r.stdout}\n${r.stderr.slice(-2000)}`);
  for (const line of [/lost\s+0\s+ok/, /phantom\s+0\s+ok/, /order violations\s+0\s+ok/, /projection of [\d,]+ orders: 0\s+ok mismatched, 0 phantom/]) assert.match(r.stdout, line, what);
  assert.match(r.stdout, /events committed\s+300\b/, what);
}

describe('txbox demo over the cloud emulators', () => {
  it('--transport pubsub: verified through the emulator (relay crashes included); its topic and subscription are deleted after', { skip: skipPubSub, timeout: 200_000 }, async () => {
    const r = await runCli(['demo', '--transport', 'pubsub', '--events', '300', '--crash-relay-every', '300ms', '--database-url', DATABASE_URL], { PUBSUB_EMULATOR_HOST: EMULATOR_HOST }, 190_000);
    assertVerified(r, 'demo over pubsub');
    const topic = /Google Pub\/Sub \(topic (txbox-demo-[0-9a-f]+) on the emulator at /.exec(r.stdout)?.[1];
    assert.ok(topic, r.stdout);
    assert.ok(Number(/relay restarts\s+(\d+)/.exec(r.stdout)?.[1]) > 0, r.stdout);
    const admin = adminClientFor('txbox-demo');
    try {
      assert.equal((await admin.topic(topic).exists())[0], false, 'the topic is deleted');
      assert.equal((await admin.subscription(topic).exists())[0], false, 'the subscription is deleted');
    } finally {
      await admin.close();
    }
  });

  it('--transport sqs: verified through a FIFO queue of ElasticMQ, which is deleted after', { timeout: 200_000 }, async () => {
    const r = await runCli(['demo', '--transport', 'sqs', '--transport-url', SQS_ENDPOINT, '--events', '300'], {}, 190_000);
    assertVerified(r, 'demo over sqs');
    const queue = /Amazon SQS \(FIFO queue (txbox-demo-[0-9a-f]+\.fifo) at /.exec(r.stdout)?.[1];
    assert.ok(queue, r.stdout);
    const client = sqsClient();
    try {
      await assert.rejects(client.send(new GetQueueUrlCommand({ QueueName: queue })), /exist/i, 'the queue is deleted');
    } finally {
      client.destroy();
    }
  });

  it('an emulator that does not answer, or a malformed address, exits 2 naming --transport-url or PUBSUB_EMULATOR_HOST', { timeout: 180_000 }, async () => {
    const closed = await freePort();
    const cases: [string[], Record<string, string>, RegExp][] = [
      [['--transport', 'sqs', '--transport-url', `http://127.0.0.1:${closed}`], {}, new RegExp(`--transport-url: cannot create queue txbox-demo-[0-9a-f]+\\.fifo at http://127\\.0\\.0\\.1:${closed} .*scripts/sqs/up\\.sh`)],
      [['--transport', 'sqs', '--transport-url', 'ftp://127.0.0.1'], {}, /--transport-url: uses ftp:; only http: and https: are supported/],
      [['--transport', 'pubsub', '--transport-url', 'not-an-address'], {}, /--transport-url: "not-an-address" is not host:port of the Pub\/Sub emulator/],
    ];
    if (!skipPubSub) {
      cases.push(
        [['--transport', 'pubsub', '--transport-url', `127.0.0.1:${closed}`], {}, new RegExp(`--transport-url: cannot reach the Pub/Sub emulator at 127\\.0\\.0\\.1:${closed} .*scripts/pubsub/up\\.sh`)],
        [['--transport', 'pubsub'], { PUBSUB_EMULATOR_HOST: `127.0.0.1:${closed}` }, /PUBSUB_EMULATOR_HOST: cannot reach the Pub\/Sub emulator at 127\.0\.0\.1:\d+ .*or point PUBSUB_EMULATOR_HOST at it/],
      );
    }
    // On PostgreSQL rather than PGlite: the address is checked after the database is open, and PGlite's start is the slower one under load.
    const results = await Promise.all(cases.map(([flags, env]) => runCli(['demo', '--events', '10', '--database-url', DATABASE_URL, ...flags], env, 170_000)));
    results.forEach((r, i) => {
      const [flags, , message] = cases[i]!;
      assert.equal(r.code, 2, `${flags.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, message);
    });
  });
});
