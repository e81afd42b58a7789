/**
 * `txbox relay --transport pubsub`: the CLI builds the Pub/Sub transport from
 * the config file (project, topics) and the environment (PUBSUB_EMULATOR_HOST),
 * publishes to the emulator, and refuses an address it cannot use.
 * Skips with a clear message when the emulator is not installed.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { createOutbox, defineEvent, payloadType } from 'txbox';
import { PostgresOutboxStore } from 'txbox/postgres';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';
import { runCli, startCli } from '../helpers/cli.ts';
import { adminClient, EMULATOR_HOST, emulatorSkip, PROJECT } from '../helpers/pubsub.ts';
import { waitFor } from '../helpers/wait.ts';

const skip = await emulatorSkip();

describe('txbox relay --transport pubsub', { skip }, () => {
  let db: TestDb;
  const run = randomBytes(4).toString('hex');
  const topic = `cli-orders-${run}`;
  const subscription = `cli-orders-sub-${run}`;
  const admin = adminClient();

  before(async () => {
    db = await openDb('postgres');
    await admin.createTopic(topic);
    await admin.topic(topic).createSubscription(subscription, { enableMessageOrdering: true });
  });
  after(async () => {
    await admin.subscription(subscription).delete().catch(() => {});
    await admin.topic(topic).delete().catch(() => {});
    await admin.close();
    await db.close();
  });

  it('publishes an enqueued event to the topic named in the config file, with its id and key as attributes', async () => {
    const OrderPlaced = defineEvent({ type: 'OrderPlaced', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ total: number }>() });
    const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [OrderPlaced] });
    let id = '';
    await db.transaction(async (tx) => {
      [id] = (await outbox.enqueue(tx, OrderPlaced({ aggregateId: 'o-1', payload: { total: 12 } }))) as [string];
    });

    const dir = mkdtempSync(join(tmpdir(), 'txbox-pubsub-cli-'));
    const config = join(dir, 'txbox.config.json');
    writeFileSync(config, JSON.stringify({ transport: { type: 'pubsub', projectId: PROJECT, topics: { orders: topic } } }));
    const received: { id: string | undefined; key: string | undefined; body: string }[] = [];
    const sub = admin.subscription(subscription);
    sub.on('message', (m) => {
      received.push({ id: m.attributes['txbox-id'], key: m.attributes['txbox-key'], body: m.data.toString() });
      m.ack();
    });
    const relay = startCli(['relay', '--config', config, '--relay-id', `cli-pubsub-${run}`], {
      TXBOX_DATABASE_URL: DATABASE_URL,
      TXBOX_SCHEMA: db.schema,
      TXBOX_LOG_LEVEL: 'warn',
      PUBSUB_EMULATOR_HOST: EMULATOR_HOST,
    });
    try {
      await waitFor('the ready line', () => /^txbox relay ready: /m.test(relay.stdout()), 60_000);
      assert.match(relay.stdout(), /transport=pubsub$/m);
      await waitFor('the message in the subscription', () => received.length >= 1, 60_000);
      assert.equal(received[0]!.id, id);
      assert.equal(received[0]!.key, 'Order:o-1');
      assert.deepEqual(JSON.parse(received[0]!.body), { total: 12 });
    } finally {
      await sub.close();
      relay.child.kill('SIGTERM');
      const exit = await relay.exited;
      assert.equal(exit.code, 0, `relay exit: ${exit.stderr}`);
    }
  });

  it('refuses --transport-url with a message that says where the address comes from', async () => {
    const result = await runCli(['relay', '--transport', 'pubsub', '--transport-url', 'localhost:8085'], {
      TXBOX_DATABASE_URL: DATABASE_URL,
      TXBOX_SCHEMA: db.schema,
    });
    assert.equal(result.code, 2, result.stderr);
    assert.match(result.stderr, /pubsub transport takes no address; set PUBSUB_EMULATOR_HOST/);
  });
});
