/**
 * `txbox migrate|relay|status|parked|replay` on Google's Firestore emulator
 * (scripts/firestore/up.sh), as a user runs them: a subprocess whose
 * firestore://PROJECT_ID URL picks the Firestore backend, with
 * FIRESTORE_EMULATOR_HOST set. Each test uses a project of its own on the
 * emulator (so nothing is shared with other files or tests), deleted after.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { userInfo } from 'node:os';
import { Firestore, Timestamp } from '@google-cloud/firestore';
import { createOutbox, defineEvent, payloadType, type NewEvent } from 'txbox';
import { FirestoreOutboxStore, FirestoreRelayStore } from '../../src/stores/firestore/index.ts';
import { FIRESTORE_HOST, firestoreSkip } from '../helpers/firestore.ts';
import { runCli, startCli, type CliResult } from '../helpers/cli.ts';
import { freePort } from '../helpers/ports.ts';
import { startReceiver } from '../helpers/receiver.ts';
import { waitFor } from '../helpers/wait.ts';

const Placed = defineEvent({ type: 'OrderPlaced', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ n: number }>() });
const Shipped = defineEvent({ type: 'ItemShipped', aggregateType: 'Item', destination: 'items', payload: payloadType<{ n: number }>() });

const skip = await firestoreSkip();
const open: { db: Firestore; project: string }[] = [];

/** A project of its own on the emulator, its firestore:// URL, and a client on it. */
function freshProject(): { db: Firestore; project: string; url: string } {
  process.env.FIRESTORE_EMULATOR_HOST ??= FIRESTORE_HOST;
  process.env.METADATA_SERVER_DETECTION ??= 'none';
  const project = `txbox-fscli-${randomBytes(4).toString('hex')}`;
  const db = new Firestore({ projectId: project });
  open.push({ db, project });
  return { db, project, url: `firestore://${project}` };
}

function envFor(url: string, extra: Record<string, string> = {}): Record<string, string> {
  return { TXBOX_DATABASE_URL: url, FIRESTORE_EMULATOR_HOST: FIRESTORE_HOST, TXBOX_LOG_LEVEL: 'warn', ...extra };
}

function expectExit(r: CliResult, code: number, what: string): void {
  assert.equal(r.code, code, `${what}: exit ${r.code} (signal ${r.signal})\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`);
}

async function enqueue(db: Firestore, events: NewEvent<{ n: number }>[], collection = 'txbox_outbox'): Promise<string[]> {
  const outbox = createOutbox({ store: new FirestoreOutboxStore({ firestore: db, collection }), events: [Placed, Shipped] });
  const batch = db.batch();
  const ids = await outbox.enqueue(batch, events);
  await batch.commit();
  return ids;
}

const events = (def: typeof Placed | typeof Shipped, count: number, from = 0): NewEvent<{ n: number }>[] =>
  Array.from({ length: count }, (_, i) => def({ aggregateId: `a${from + i}`, payload: { n: from + i } }));

/** The event documents of `ids`, by event id (the first document of each: replays add more with the same event id). */
async function docsOf(db: Firestore, ids: readonly string[], collection = 'txbox_outbox') {
  const all = await db.collection(collection).get();
  return new Map(ids.map((id) => [id, all.docs.find((d) => d.get('id') === id)]));
}

async function setState(db: Firestore, ids: readonly string[], change: Record<string, unknown>): Promise<void> {
  const docs = await docsOf(db, ids);
  const batch = db.batch();
  for (const id of ids) batch.update(docs.get(id)!.ref, change);
  await batch.commit();
}

describe('txbox CLI on Firestore (emulator)', { concurrency: true, timeout: 300_000, skip }, () => {
  before(() => {
    process.env.FIRESTORE_EMULATOR_HOST ??= FIRESTORE_HOST;
  });
  after(async () => {
    for (const { db, project } of open) {
      await db.terminate();
      await (await fetch(`http://${FIRESTORE_HOST}/emulator/v1/projects/${project}/databases/(default)/documents`, { method: 'DELETE' })).arrayBuffer();
    }
  });

  it('`txbox migrate` checks access and creates the bucket documents once, and says what to deploy; `--print` writes firestore.indexes.json without a connection', async () => {
    const { db, url, project } = freshProject();
    const first = await runCli(['migrate'], envFor(url));
    expectExit(first, 0, 'migrate');
    assert.match(first.stdout, new RegExp(`^txbox_outbox \\(project ${project}, database \\(default\\) on the emulator at [\\d.:]+\\): read and write access checked; created 256 bucket documents in txbox_outbox_buckets`, 'm'));
    assert.match(first.stdout, /indexes: the emulator at .* needs none; on Firestore itself deploy the 8 composite indexes of `txbox migrate --print` first/);
    const buckets = await db.collection('txbox_outbox_buckets').get();
    assert.equal(buckets.size, 256);
    assert.deepEqual(buckets.docs.find((d) => d.id === '7')!.data(), { owner: null, token: 0, leaseUntil: null });
    const again = await runCli(['migrate', '--table', 'txbox_outbox'], envFor(url));
    expectExit(again, 0, 'migrate again');
    assert.match(again.stdout, /the bucket documents of txbox_outbox_buckets exist/);

    // --print: no emulator, no credentials, no connection: the URL's scheme alone picks Firestore's index file.
    const print = await runCli(['migrate', '--print', '--table', 'shop_outbox'], { TXBOX_DATABASE_URL: 'firestore://nowhere-project', FIRESTORE_EMULATOR_HOST: '' });
    expectExit(print, 0, 'migrate --print on firestore://');
    const file = JSON.parse(print.stdout) as { indexes: { collectionGroup: string; queryScope: string; fields: { fieldPath: string; order: string }[] }[]; fieldOverrides: { collectionGroup: string; fieldPath: string; indexes: unknown[] }[] };
    assert.equal(file.indexes.length, 8);
    assert.ok(file.indexes.every((i) => i.collectionGroup === 'shop_outbox' && i.queryScope === 'COLLECTION' && i.fields[0]!.fieldPath === 'state'));
    const shapes = file.indexes.map((i) => i.fields.map((f) => `${f.fieldPath}${f.order === 'DESCENDING' ? ' desc' : ''}`).join(','));
    assert.ok(shapes.includes('state,bucket,ts') && shapes.includes('state,ts desc') && shapes.includes('state,destination,nextAttemptAt'), shapes.join(' | '));
    assert.deepEqual(file.fieldOverrides.map((o) => [o.collectionGroup, o.fieldPath, o.indexes.length]), [['shop_outbox', 'payload', 0], ['shop_outbox', 'headers', 0]]);
  });

  it('bad URLs, PostgreSQL-only settings and commands, and bad names are refused naming the setting; an unreachable emulator exits 3', async () => {
    const { url } = freshProject();
    const relayArgs = ['relay', '--transport', 'http', '--unsigned', '--endpoint', 'orders=http://127.0.0.1:1/x'];
    const [noProject, badProject, withPassword, badDatabase, withPort, schema, wake, deleteOnPublish, badTable, wal, unreachable] = await Promise.all([
      runCli(['status'], envFor('firestore://')),
      runCli(['status', '--database-url', 'firestore://My_Project'], envFor(url)),
      runCli(['status'], envFor('firestore://app:supersecret@proj')),
      runCli(['status'], envFor(`${url}/Bad_Db`)),
      runCli(['status'], envFor('firestore://proj:8086')),
      runCli(['status', '--schema', 'billing'], envFor(url)),
      runCli([...relayArgs, '--wake', 'wal'], envFor(url)),
      runCli([...relayArgs, '--delete-on-publish'], envFor(url)),
      runCli(['status', '--table', 'x;drop'], envFor(url)),
      runCli(['wal', 'check'], envFor(url)),
      // The message comes after 10 s; the client's retrying read then holds the process for about as long again (more on a loaded machine).
      runCli(['status'], envFor(url, { FIRESTORE_EMULATOR_HOST: '127.0.0.1:1' }), 150_000),
    ]);
    expectExit(noProject, 2, 'firestore:// without a project');
    assert.match(noProject.stderr, /TXBOX_DATABASE_URL: names no project; give firestore:\/\/PROJECT_ID or firestore:\/\/PROJECT_ID\/DATABASE_ID/);
    expectExit(badProject, 2, 'a bad project id');
    assert.match(badProject.stderr, /--database-url: "My_Project" is not a project id/);
    expectExit(withPassword, 2, 'credentials in the URL');
    assert.match(withPassword.stderr, /a firestore:\/\/ URL carries no credentials; they come from GOOGLE_APPLICATION_CREDENTIALS/);
    assert.doesNotMatch(withPassword.stderr + withPassword.stdout, /supersecret/);
    expectExit(badDatabase, 2, 'a bad database id');
    assert.match(badDatabase.stderr, /"Bad_Db" is not a database id/);
    expectExit(withPort, 2, 'a port in the URL');
    assert.match(withPort.stderr, /the emulator's address goes in FIRESTORE_EMULATOR_HOST/);
    expectExit(schema, 2, '--schema on Firestore');
    assert.match(schema.stderr, /--schema: schemas are PostgreSQL's; on Firestore the collections live in the project and database the URL names/);
    expectExit(wake, 2, '--wake on Firestore');
    assert.match(wake.stderr, /--wake: the wake modes .* are PostgreSQL's; a relay on Firestore wakes by a snapshot listener/);
    expectExit(deleteOnPublish, 2, '--delete-on-publish on Firestore');
    assert.match(deleteOnPublish.stderr, /--delete-on-publish .*not supported on Firestore/);
    expectExit(badTable, 2, 'a bad collection name');
    assert.match(badTable.stderr, /--table: "x;drop" is not a valid name/);
    expectExit(wal, 2, 'wal on Firestore');
    assert.match(wal.stderr, /TXBOX_DATABASE_URL is a Firestore URL: this command runs on PostgreSQL only/);
    expectExit(unreachable, 3, 'an emulator that does not answer');
    assert.match(unreachable.stderr, /cannot reach the Firestore emulator at 127\.0\.0\.1:1 \(FIRESTORE_EMULATOR_HOST\): no answer within 10 s; start it \(scripts\/firestore\/up\.sh\)/);
    assert.doesNotMatch(unreachable.stderr, /at .*\.js:\d+/, 'one line, no stack trace');
  });

  it('`txbox relay` on Firestore delivers to an HTTP endpoint, wakes by its listener, feeds the metric gauges, and stops on SIGTERM releasing its leases', async () => {
    const { db, url } = freshProject();
    const receiver = await startReceiver();
    try {
      const early = await enqueue(db, events(Shipped, 20));
      // A parked event of another destination: the gauges count it, the relay leaves it.
      const [parked] = await enqueue(db, [Placed({ aggregateId: 'p1', payload: { n: 1 } })]);
      await setState(db, [parked!], { state: 'parked', attempts: 12, lastError: 'HTTP 400' });
      const port = await freePort();
      const relay = startCli(
        ['relay', '--transport', 'http', '--endpoint', `items=${receiver.url}/items`, '--poll-interval-ms', '30000', '--relay-id', 'relay-fs-e2e', '--metrics-port', String(port)],
        envFor(url, { TXBOX_WEBHOOK_SECRET: receiver.secret, TXBOX_LOG_LEVEL: 'info' }),
      );
      try {
        await waitFor('the ready line', () => /txbox relay ready: relay=relay-fs-e2e buckets=\d+ transport=http/.test(relay.stdout()), 90_000);
        assert.match(relay.stderr(), /"msg":"txbox relay: Firestore store: idle relays wake by a snapshot listener on the newest pending event, and by polling","store":"firestore"/);
        await waitFor('the first events delivered', () => early.every((id) => receiver.arrivals.some((a) => a.id === id)), 30_000);
        // Written after the relay went idle, with a 30 s poll: only the listener can wake it in time.
        await new Promise((r) => setTimeout(r, 500));
        const late = await enqueue(db, events(Shipped, 3, 100));
        await waitFor('late events delivered by the listener (the poll is 30 s)', () => late.every((id) => receiver.arrivals.some((a) => a.id === id)), 20_000);
        await waitFor('every event marked published', async () => (await db.collection('txbox_outbox').where('state', '==', 'published').count().get()).data().count === 23, 30_000);
        const held = await db.collection('txbox_outbox_buckets').where('owner', '==', 'relay-fs-e2e').count().get();
        assert.ok(held.data().count > 0, 'the running relay holds leases');
        const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
        assert.match(metrics, /^txbox_relay_relays_alive 1$/m);
        assert.match(metrics, /^txbox_relay_parked\{destination="orders"\} 1$/m);
        assert.match(metrics, /^txbox_relay_backlog\{destination="orders"\} 0$/m);
      } finally {
        relay.child.kill('SIGTERM');
        expectExit(await relay.exited, 0, 'relay after SIGTERM');
      }
      assert.equal(new Set(receiver.arrivals.map((a) => a.id)).size, 23);
      const owned = await db.collection('txbox_outbox_buckets').where('owner', '!=', null).count().get();
      assert.equal(owned.data().count, 0, 'leases released');
      const me = await db.collection('txbox_outbox_relays').doc('relay-fs-e2e').get();
      // Marked left, or (once the relay store deletes the heartbeat of a relay that stopped cleanly) gone: either way not alive.
      assert.ok(!me.exists || me.get('leftAt') instanceof Timestamp, `a gracefully stopped relay is marked left or removed: ${JSON.stringify(me.data())}`);
    } finally {
      await receiver.close();
    }
  });

  it('`txbox status` and `status --json` on Firestore: backlog per destination, backing off, oldest pending, parked, behind parked, relays, collection; the gauges agree', async () => {
    const { db, url } = freshProject();
    const placed = await enqueue(db, events(Placed, 6));
    const shipped = await enqueue(db, events(Shipped, 5));
    const [behind] = await enqueue(db, [Shipped({ aggregateId: 'a0', payload: { n: 99 } })]); // after the parked items a0
    // orders: 2 pending (one 5 minutes old, one backing off), 3 published, 1 parked; items: 4 pending (1 behind a parked one), 2 parked.
    await setState(db, placed.slice(0, 3), { state: 'published', doneAt: Timestamp.now() });
    await setState(db, [placed[3]!, ...shipped.slice(0, 2)], { state: 'parked', attempts: 3, lastError: 'HTTP 400' });
    await setState(db, [placed[4]!], { ts: Timestamp.fromMillis(Date.now() - 300_000) });
    await setState(db, [placed[5]!], { nextAttemptAt: Timestamp.fromMillis(Date.now() + 600_000), attempts: 1 });
    const relays = db.collection('txbox_outbox_relays');
    // A long TTL and lease: on a loaded machine the setup alone can take longer than the usual 30 s.
    await relays.doc('relay-alive').set({ host: 'host-a', pid: 4242, inFlight: 2, publishedTotal: 3, ratePerMinute: 3, ttlMs: 900_000, heartbeatAt: Timestamp.now(), leftAt: null });
    await relays.doc('relay-gone').set({ host: 'host-b', pid: 7, inFlight: 5, publishedTotal: 9, ratePerMinute: 0, ttlMs: 30_000, heartbeatAt: Timestamp.fromMillis(Date.now() - 600_000), leftAt: null });
    await relays.doc('relay-left').set({ host: 'host-c', pid: 8, inFlight: 0, publishedTotal: 1, ratePerMinute: 0, ttlMs: 30_000, heartbeatAt: Timestamp.fromMillis(Date.now() - 120_000), leftAt: Timestamp.fromMillis(Date.now() - 60_000) });
    const batch = db.batch();
    for (let b = 0; b < 5; b++) batch.set(db.collection('txbox_outbox_buckets').doc(String(b)), { owner: 'relay-alive', token: 1, leaseUntil: Timestamp.fromMillis(Date.now() + 900_000) });
    batch.set(db.collection('txbox_outbox_buckets').doc('9'), { owner: 'relay-gone', token: 1, leaseUntil: Timestamp.fromMillis(Date.now() - 60_000) });
    await batch.commit();
    assert.ok(behind);

    const [text, json] = await Promise.all([runCli(['status'], envFor(url)), runCli(['status', '--json'], envFor(url))]);
    expectExit(text, 0, 'status');
    expectExit(json, 0, 'status --json');
    assert.match(text.stdout, /^outbox txbox_outbox \(project txbox-fscli-[0-9a-f]+, database \(default\) on the emulator at [\d.:]+\)$/m);
    assert.match(text.stdout, /pending 6 +in flight 2 +parked 3 +published last minute 3/);
    assert.match(text.stdout, /^items\s+4\s+0\s+2\s+1\s+[\d.]+s$/m, text.stdout);
    assert.match(text.stdout, /^orders\s+2\s+1\s+1\s+0\s+[5-7]\.\dm$/m, `oldest pending of orders is about 5 minutes (more on a loaded machine):\n${text.stdout}`);
    assert.match(text.stdout, /^relay-alive\s+alive, heartbeat [\d.]+s ago\s+5\s+2\s+3$/m, text.stdout);
    assert.match(text.stdout, /^relay-gone\s+expired (9|10|11)\.\dm ago\s+0\s+-\s+-$/m, text.stdout);
    assert.match(text.stdout, /^relay-left\s+left [\d.]+s ago\s+0\s+-\s+-$/m, text.stdout);
    assert.match(text.stdout, /^collection txbox_outbox: 12 documents/m);
    assert.doesNotMatch(text.stdout, /autovacuum|replication slot|destinations down|InnoDB/, 'no SQL-only lines');

    const status = JSON.parse(json.stdout) as {
      destinations: { destination: string; pending: number; parked: number; backingOff: number; blockedByParked: number; oldestPendingSeconds: number | null }[];
      relays: { relayId: string; host: string; pid: number; alive: boolean; state: string; buckets: number }[];
      collection: { name: string; documents: number };
      inFlight: number;
      publishedLastMinute: number;
    };
    const byDest = new Map(status.destinations.map((d) => [d.destination, d]));
    assert.deepEqual([...byDest.keys()], ['items', 'orders']);
    const o = byDest.get('orders')!;
    const i = byDest.get('items')!;
    assert.deepEqual([o.pending, o.backingOff, o.parked, o.blockedByParked, i.pending, i.backingOff, i.parked, i.blockedByParked], [2, 1, 1, 0, 4, 0, 2, 1]);
    assert.ok(o.oldestPendingSeconds! >= 299 && o.oldestPendingSeconds! < 480, `oldest pending ${o.oldestPendingSeconds}`);
    assert.deepEqual(
      status.relays.map((r) => [r.relayId, r.host, r.pid, r.alive, r.state, r.buckets]),
      [['relay-alive', 'host-a', 4242, true, 'alive', 5], ['relay-gone', 'host-b', 7, false, 'expired', 0], ['relay-left', 'host-c', 8, false, 'left', 0]],
    );
    assert.deepEqual(status.collection, { name: 'txbox_outbox', documents: 12 });
    assert.equal(status.publishedLastMinute, 3);
    assert.equal(status.inFlight, 2);

    // The relay's metric gauges read the same counts.
    const gauges = await new FirestoreRelayStore({ firestore: db }).outboxGauges();
    assert.equal(gauges.relaysAlive, 1);
    assert.deepEqual(
      gauges.destinations.map((d) => [d.destination, d.pending, d.parked, d.oldestPendingSeconds >= 299]),
      [['items', 4, 2, false], ['orders', 2, 1, true]],
    );
  });

  it('`txbox prune` deletes published and skipped events older than --older-than on Firestore, in batches, never pending or parked ones', async () => {
    const { db, url } = freshProject();
    const ids = await enqueue(db, events(Placed, 9));
    const old = Timestamp.fromMillis(Date.now() - 3 * 3_600_000);
    await setState(db, ids.slice(0, 4), { state: 'published', doneAt: old });
    await setState(db, ids.slice(4, 5), { state: 'skipped', doneAt: old });
    await setState(db, ids.slice(5, 6), { state: 'published', doneAt: Timestamp.now() });
    await setState(db, ids.slice(6, 7), { state: 'parked', parkedAt: old });
    const prune = await runCli(['prune', '--older-than', '1h', '--batch-size', '2'], envFor(url));
    expectExit(prune, 0, 'prune');
    assert.match(prune.stdout, /deleted 5 row\(s\)/);
    const left = (await db.collection('txbox_outbox').get()).docs.map((d) => [d.get('id'), d.get('state')]).sort();
    assert.deepEqual(left, [[ids[5], 'published'], [ids[6], 'parked'], [ids[7], 'pending'], [ids[8], 'pending']].sort());
    // txbox inbox on Firestore: the inbox collection's indexes, nothing else yet.
    const inbox = await runCli(['inbox', 'migrate', '--print', '--inbox-table', 'shop_inbox'], envFor(url));
    expectExit(inbox, 0, 'inbox migrate --print on Firestore');
    const indexes = JSON.parse(inbox.stdout) as { indexes: { collectionGroup: string }[]; fieldOverrides: { fieldPath: string }[] };
    assert.ok(indexes.indexes.length > 0 && indexes.indexes.every((i) => i.collectionGroup === 'shop_inbox'));
    assert.deepEqual(indexes.fieldOverrides.map((f) => f.fieldPath), ['envelope']);
    const badName = await runCli(['inbox', 'migrate', '--print', '--inbox-table', 'bad name'], envFor(url));
    expectExit(badName, 2, 'a bad collection name');
    assert.match(badName.stderr, /--inbox-table/);
    const status = await runCli(['inbox', 'status'], envFor(url));
    expectExit(status, 2, 'inbox status on Firestore');
    assert.match(status.stderr, /Firestore/);
  });

  it('`txbox parked` lists, retries, skips and discards on Firestore with an audit trail; `txbox replay` re-queues published events with their ids', async () => {
    const { db, url } = freshProject();
    const [a, b, c, d] = await enqueue(db, events(Placed, 4));
    const [pending] = await enqueue(db, events(Shipped, 1, 50));
    const shipped = await enqueue(db, events(Shipped, 2));
    await setState(db, [a!, b!, c!, d!], { state: 'parked', attempts: 3, lastError: 'HTTP 422 Unprocessable Entity: total must be positive', parkedAt: Timestamp.now() });
    await setState(db, shipped, { state: 'published', doneAt: Timestamp.now() });
    const unknown = randomUUID();

    const [list, listJson, notParked, noSelector] = await Promise.all([
      runCli(['parked', 'list'], envFor(url)),
      runCli(['parked', 'list', '--json', '--destination', 'orders', '--limit', '3'], envFor(url)),
      runCli(['parked', 'retry', '--id', pending!, '--id', unknown], envFor(url)),
      runCli(['parked', 'retry'], envFor(url)),
    ]);
    expectExit(list, 0, 'parked list');
    for (const id of [a, b, c, d]) assert.ok(list.stdout.includes(id!), `list shows ${id}:\n${list.stdout}`);
    assert.ok(!list.stdout.includes(pending!), 'list does not show the pending event');
    assert.match(list.stdout, /dest=orders {2}key=Order:a0 {2}attempts=3 {2}parked=\d{4}-\d\d-\d\dT[\d:.]+Z\n {4}HTTP 422 Unprocessable Entity: total must be positive/);
    expectExit(listJson, 0, 'parked list --json');
    const parsed = JSON.parse(listJson.stdout) as { id: string; lastError: string; destination: string; parkedAt: string }[];
    assert.deepEqual(parsed.map((p) => p.id), [a, b, c], '--limit, oldest first');
    assert.ok(parsed.every((p) => p.destination === 'orders' && /HTTP 422/.test(p.lastError) && typeof p.parkedAt === 'string'));
    expectExit(notParked, 1, 'parked retry of ids that are not parked');
    assert.ok((notParked.stdout + notParked.stderr).includes(unknown), notParked.stdout);
    expectExit(noSelector, 2, 'parked retry without --id or --all');

    const [retry, discard] = await Promise.all([
      runCli(['parked', 'retry', '--id', a!, '--actor', 'alice'], envFor(url)),
      runCli(['parked', 'discard', '--id', b!.toUpperCase(), '--actor', 'bob'], envFor(url)),
    ]);
    expectExit(retry, 0, 'parked retry --id');
    assert.match(retry.stdout, /retried 1 parked event/);
    expectExit(discard, 0, 'parked discard --id (upper case)');
    assert.match(discard.stdout, /discarded 1 parked event/);
    const skipAll = await runCli(['parked', 'skip', '--all', '--destination', 'orders'], envFor(url));
    expectExit(skipAll, 0, 'parked skip --all --destination');
    assert.match(skipAll.stdout, /skipped 2 parked event/);

    const docs = await docsOf(db, [a!, b!, c!, d!]);
    assert.deepEqual([docs.get(a!)!.get('state'), docs.get(a!)!.get('attempts')], ['pending', 0]);
    assert.equal(docs.get(b!), undefined, 'the discarded document is deleted');
    assert.equal(docs.get(c!)!.get('state'), 'skipped');
    assert.equal(docs.get(d!)!.get('state'), 'skipped');
    const audit = (await db.collection('txbox_outbox_audit').get()).docs.map((x) => x.data());
    const me = userInfo().username;
    assert.deepEqual(
      audit.map((r) => [r.action, r.eventId, r.actor]).sort(),
      [['retry', a, 'alice'], ['discard', b, 'bob'], ['skip', c, me], ['skip', d, me]].sort(),
    );
    assert.ok(audit.every((r) => /HTTP 422/.test(r.detail ?? '')), 'the audit keeps the last error');

    // replay: the published items come back pending, same ids, original order, with the header; --from/--to by occurredAt.
    const [replay, none] = await Promise.all([
      runCli(['replay', '--destination', 'items', '--from', '2000-01-01T00:00:00Z', '--actor', 'carol'], envFor(url)),
      runCli(['replay', '--type', 'ItemShipped', '--to', '2000-01-01T00:00:00Z'], envFor(url)),
    ]);
    expectExit(replay, 0, 'replay --destination --from');
    const replayId = /replay ([0-9a-f-]{36}): 2 event\(s\) queued/.exec(replay.stdout)?.[1];
    assert.ok(replayId, replay.stdout);
    expectExit(none, 0, 'replay matching nothing');
    assert.match(none.stdout, /: 0 event\(s\) queued/);
    const copies = (await db.collection('txbox_outbox').where('replayId', '==', replayId).get()).docs.sort((x, y) => (x.id < y.id ? -1 : 1));
    assert.deepEqual(
      copies.map((x) => [x.get('id'), x.get('state'), x.get('headers')['txbox-replay-id']]),
      shipped.map((id) => [id, 'pending', replayId]),
    );
    const replayAudit = (await db.collection('txbox_outbox_audit').where('action', '==', 'replay').get()).docs.map((x) => x.data());
    assert.deepEqual(replayAudit.map((r) => r.actor).sort(), ['carol', me].sort());
    const started = (await db.collection('txbox_outbox_audit').where('action', '==', 'replay-start').get()).docs.map((x) => x.data());
    assert.deepEqual(started.map((r) => r.actor).sort(), ['carol', me].sort(), 'each start is audited too');
  });
});
