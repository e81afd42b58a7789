/**
 * `txbox dashboard` in a real browser (issue 13 item 5): Debian's chromium
 * driven by playwright-core against the CLI as a subprocess and the real
 * PostgreSQL. A backlog on two destinations and an event parked by a
 * receiver that answered 400; the test logs in with the token, reads the
 * numbers and the parked event (key, error, attempts), clicks Retry, runs a
 * relay to the receiver (which now accepts) and sees the event delivered and
 * the live view update without a reload. Skip and Discard, through their
 * confirm dialogs. Then the inbox's dead and held events, each retried from
 * the page.
 *
 * With TXBOX_DASHBOARD_SCREENSHOTS=1 it writes docs/images/dashboard-*.png
 * (the screenshots docs/operations.md shows).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { createInbox, createOutbox, createRelay, defineEvent, payloadType, uuidv7, type OutboxEvent } from 'txbox';
import { HttpTransport } from 'txbox/http';
import { PostgresInboxStore, PostgresOutboxStore, PostgresRelayStore, inboxNames, migrateInbox } from 'txbox/postgres';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';
import { startCli, type RunningCli } from '../helpers/cli.ts';
import { waitFor } from '../helpers/wait.ts';

const Placed = defineEvent({ type: 'OrderPlaced', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ poison?: boolean; n: number }>() });
const Shipped = defineEvent({ type: 'ItemShipped', aggregateType: 'Item', destination: 'items', payload: payloadType<{ n: number }>() });
const TOKEN = 'dashboard-test-token-0123456789abcdef';
const SHOTS = process.env.TXBOX_DASHBOARD_SCREENSHOTS === '1' ? fileURLToPath(new URL('../../docs/images/', import.meta.url)) : null;

/** The chromium the flags of the brief are for: CHROMIUM_PATH, else the one on PATH (scripts/tools.sh installs Debian's). */
function chromiumPath(): string {
  if (process.env.CHROMIUM_PATH) return process.env.CHROMIUM_PATH;
  for (const p of ['/usr/bin/chromium', '/usr/bin/chromium-browser']) if (existsSync(p)) return p;
  return execFileSync('which', ['chromium'], { encoding: 'utf8' }).trim();
}

/** A webhook endpoint that records what it got and answers 400 to events whose payload says poison, while `rejectPoison`. */
async function startEndpoint(): Promise<{ url: string; received: { id: string; poison: boolean }[]; rejectPoison: boolean; server: Server }> {
  const state = { url: '', received: [] as { id: string; poison: boolean }[], rejectPoison: true, server: null as unknown as Server };
  state.server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      const envelope = JSON.parse(body) as { id: string; data?: { poison?: boolean }; payload?: { poison?: boolean } };
      const poison = Boolean((envelope.data ?? envelope.payload)?.poison);
      if (poison && state.rejectPoison) {
        res.writeHead(400, { 'content-type': 'text/plain' }).end('order total is negative');
        return;
      }
      state.received.push({ id: envelope.id, poison });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => state.server.listen(0, '127.0.0.1', resolve));
  state.url = `http://127.0.0.1:${(state.server.address() as AddressInfo).port}`;
  return state;
}

const inboxEvent = (n: number): OutboxEvent => ({
  id: uuidv7(),
  type: 'StockChanged',
  aggregateType: 'Sku',
  aggregateId: `sku-${n}`,
  key: `Sku:sku-${n}`,
  destination: 'stock',
  payload: { n },
  headers: {},
  occurredAt: new Date(),
  version: n,
});

describe('txbox dashboard in chromium', { timeout: 120_000 }, () => {
  let db: TestDb;
  let endpoint: Awaited<ReturnType<typeof startEndpoint>>;
  let dashboard: RunningCli;
  let baseUrl: string;
  let context: BrowserContext;
  let page: Page;
  let profile: string;

  const text = (selector: string): Promise<string> => page.locator(selector).first().innerText();
  const waitText = (what: string, selector: string, expected: string | RegExp): Promise<void> =>
    waitFor(what, async () => {
      const t = await page.locator(selector).first().innerText({ timeout: 1000 }).catch(() => '');
      return typeof expected === 'string' ? t.trim() === expected : expected.test(t);
    }, 30_000, 100);
  const shot = async (name: string): Promise<void> => {
    if (SHOTS === null) return;
    mkdirSync(SHOTS, { recursive: true });
    await page.screenshot({ path: join(SHOTS, `dashboard-${name}.png`), fullPage: true });
  };

  before(async () => {
    db = await openDb('postgres');
    await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
    endpoint = await startEndpoint();
    dashboard = startCli(['dashboard', '--port', '0', '--sample-every', '500ms'], { TXBOX_DATABASE_URL: DATABASE_URL, TXBOX_SCHEMA: db.schema, TXBOX_DASHBOARD_TOKEN: TOKEN, TXBOX_LOG_LEVEL: 'warn' });
    await waitFor('the dashboard listens', () => /http:\/\/\S+\//.test(dashboard.stdout()) || dashboard.child.exitCode !== null, 30_000);
    baseUrl = /(http:\/\/\S+\/)/.exec(dashboard.stdout())?.[1] ?? assert.fail(`the dashboard did not start:\n${dashboard.stderr()}`);
    profile = mkdtempSync(join(tmpdir(), 'txbox-chromium-'));
    context = await chromium.launchPersistentContext(profile, {
      executablePath: chromiumPath(),
      headless: true,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
      viewport: { width: 1280, height: 900 },
    });
    page = context.pages()[0] ?? (await context.newPage());
  });

  after(async () => {
    await context?.close();
    if (profile) rmSync(profile, { recursive: true, force: true });
    if (dashboard && dashboard.child.exitCode === null) {
      dashboard.child.kill('SIGTERM');
      await dashboard.exited;
    }
    await new Promise<void>((resolve) => endpoint?.server.close(() => resolve()));
    await db?.close();
  });

  it('shows the backlog and a parked event; Retry from the page gets it delivered and the live view follows without a reload', async () => {
    const store = new PostgresOutboxStore({ schema: db.schema });
    const outbox = createOutbox({ store, events: [Placed, Shipped] });
    const relayStore = new PostgresRelayStore({ schema: db.schema, connection: db.connection });
    const relay = () =>
      createRelay({
        store: relayStore,
        transport: new HttpTransport({ endpoints: { orders: `${endpoint.url}/orders`, items: `${endpoint.url}/items` }, allowUnsigned: true }),
        pollIntervalMs: 50,
        leaseTtlMs: 3000,
        retry: { baseDelayMs: 20, maxDelayMs: 100, maxAttempts: 3 },
      });
    // The poison event is parked by a relay whose receiver answers 400.
    const [poisonId] = await db.transaction((tx) => outbox.enqueue(tx, [Placed({ aggregateId: 'poison', payload: { poison: true, n: 0 } })]));
    const first = relay();
    await first.start();
    await waitFor('the poison event parked', async () => (await db.query(`SELECT 1 FROM "${db.schema}".outbox WHERE state = 'parked'`)).length === 1);
    await first.stop();
    // The backlog: 3 orders (one behind the parked event, same key) and 2 items, no relay running.
    await db.transaction((tx) =>
      outbox.enqueue(tx, [
        Placed({ aggregateId: 1, payload: { n: 1 } }),
        Placed({ aggregateId: 2, payload: { n: 2 } }),
        Placed({ aggregateId: 'poison', payload: { n: 3 } }),
        Shipped({ aggregateId: 1, payload: { n: 1 } }),
        Shipped({ aggregateId: 2, payload: { n: 2 } }),
      ]),
    );

    const response = await page.goto(baseUrl);
    assert.match(page.url(), /\/login$/, 'without a session the page sends the browser to the login form');
    assert.equal(response?.status(), 200);
    await shot('login');
    await page.fill('#token', TOKEN);
    await page.click('button[type=submit]');
    await page.waitForURL(baseUrl, { timeout: 10_000 }).catch(async (err: Error) => assert.fail(`${err.message}\nat ${page.url()}:\n${await page.content()}`));
    await waitText('pending total', '[data-total="pending"] .value', '5');
    assert.equal((await text('[data-total="parked"] .value')).trim(), '1');
    assert.equal((await text('#destinations tr[data-destination="orders"] td:nth-child(2)')).trim(), '3');
    assert.equal((await text('#destinations tr[data-destination="items"] td:nth-child(2)')).trim(), '2');
    assert.equal((await text('#destinations tr[data-destination="orders"] td:nth-child(5)')).trim(), '1', 'one order waits behind the parked event');
    const row = `#parked tr[data-id="${poisonId}"]`;
    assert.equal((await text(`${row} td.key`)).trim(), 'Order:poison');
    assert.match(await text(`${row} td.error-text`), /400/);
    assert.equal((await text(`${row} td.attempts`)).trim(), '1');
    assert.equal(await page.locator('#parked pre').count(), 0, 'no payloads without --show-payloads');
    await waitFor('the backlog chart has its series', async () => (await page.locator('#chart-backlog polyline').count()) === 2);
    await page.evaluate(() => ((globalThis as unknown as { marker: number }).marker = 42));
    await shot('overview');

    await page.click(`${row} button[data-action="retry"]`);
    await waitText('the notice', '#notice', /retried 1 event/);
    await waitText('parked 0', '[data-total="parked"] .value', '0');
    assert.equal(await page.locator(row).count(), 0);
    await waitText('pending 6', '[data-total="pending"] .value', '6');
    const [audit] = await db.query<{ action: string; actor: string }>(`SELECT action, actor FROM "${db.schema}".outbox_audit WHERE event_id = $1`, [poisonId]);
    assert.deepEqual(audit, { action: 'retry', actor: 'dashboard:token@127.0.0.1' });

    endpoint.rejectPoison = false;
    const second = relay();
    await second.start();
    try {
      await waitFor('every event delivered', () => endpoint.received.length === 6, 30_000);
      assert.ok(endpoint.received.some((r) => r.id === poisonId), 'the retried event reached the receiver');
      await waitText('the live view shows the backlog drained', '[data-total="pending"] .value', '0');
      await waitText('the live view shows the relay', '#relays td.state-alive', /alive/);
      await waitFor('the rate chart shows deliveries', async () => (await page.locator('#chart-rate polyline').count()) >= 1);
      assert.equal(await page.evaluate(() => (globalThis as unknown as { marker?: number }).marker), 42, 'the page was not reloaded');
      assert.match(await text('#live'), /live, updated/);
      await shot('drained');
    } finally {
      await second.stop();
    }
  });

  it('Skip and Discard ask first: dismissed, nothing changes; accepted, the event is skipped or discarded and audited', async () => {
    const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Placed] });
    const [skipId, discardId] = await db.transaction((tx) => outbox.enqueue(tx, [Placed({ aggregateId: 'skip-me', payload: { n: 1 } }), Placed({ aggregateId: 'drop-me', payload: { n: 2 } })]));
    await db.query(`UPDATE "${db.schema}".outbox SET state = 'parked', attempts = 5, last_error = 'HTTP 422', parked_at = now() WHERE id = ANY($1::uuid[])`, [[skipId, discardId]]);
    await waitText('two parked', '[data-total="parked"] .value', '2');
    page.once('dialog', (d) => void d.dismiss());
    await page.click(`#parked tr[data-id="${discardId}"] button[data-action="discard"]`);
    // A dismissed confirm sends nothing: the next action's answer (accepted below) would show an earlier discard in the audit.
    assert.equal(await page.locator(`#parked tr[data-id="${discardId}"]`).count(), 1, 'dismissed: still listed');
    page.once('dialog', (d) => void d.accept());
    await page.click(`#parked tr[data-id="${discardId}"] button[data-action="discard"]`);
    await waitText('one parked', '[data-total="parked"] .value', '1');
    page.once('dialog', (d) => void d.accept());
    await page.click(`#parked tr[data-id="${skipId}"] button[data-action="skip"]`);
    await waitText('none parked', '[data-total="parked"] .value', '0');
    const rows = await db.query<{ id: string; state: string }>(`SELECT id, state FROM "${db.schema}".outbox WHERE id = ANY($1::uuid[])`, [[skipId, discardId]]);
    assert.deepEqual(rows, [{ id: skipId, state: 'skipped' }], 'skipped kept, discarded deleted');
    const audit = await db.query<{ action: string }>(`SELECT action FROM "${db.schema}".outbox_audit WHERE event_id = ANY($1::uuid[]) ORDER BY at`, [[skipId, discardId]]);
    assert.deepEqual(audit.map((a) => a.action), ['discard', 'skip'], 'one discard (the dismissed one sent nothing) and one skip');
  });

  it('shows the inbox dead and held events and retries them from the page', async () => {
    const store = new PostgresInboxStore({ connection: db.connection, schema: db.schema });
    const handled: string[] = [];
    const inbox = createInbox({ store, consumer: 'stock' });
    inbox.on('StockChanged', async (e: OutboxEvent) => void handled.push(e.id));
    const dead = inboxEvent(1);
    const held = inboxEvent(2);
    await store.recordFailure('stock', dead, 'stock service said: SKU unknown', 1);
    await store.hold('stock', held, 'version 2 of stock_view {"sku":"sku-2"} waits for version 1');
    // The dashboard found the inbox table at start: its section shows.
    await waitText('the dead event', `#inbox-dead tr[data-id="${dead.id}"] td.error-text`, /SKU unknown/);
    await waitText('the held event', `#inbox-held tr[data-id="${held.id}"] td.error-text`, /waits for version 1/);
    assert.equal((await text('#inbox-consumers tr[data-consumer="stock"] td:nth-child(6)')).trim(), '1', 'one dead');
    await page.locator('#inbox').scrollIntoViewIfNeeded();
    await shot('inbox');

    await page.click(`#inbox-dead tr[data-id="${dead.id}"] button[data-action="retry"]`);
    await waitText('no dead events', '#inbox-dead td.empty', 'no dead events');
    await page.click(`#inbox-held tr[data-id="${held.id}"] button[data-action="retry"]`);
    await waitText('no held events', '#inbox-held td.empty', 'no held events');
    assert.equal(await inbox.redrive(), 2, 'both events were queued for the inbox');
    assert.deepEqual(new Set(handled), new Set([dead.id, held.id]));
    await waitText('processed 2', '#inbox-consumers tr[data-consumer="stock"] td:nth-child(2)', '2');
    const audit = await db.query<{ action: string; actor: string }>(`SELECT action, actor FROM "${db.schema}".inbox_audit ORDER BY at`);
    assert.deepEqual(audit.map((a) => a.action), ['retry', 'retry-held']);
    assert.ok(audit.every((a) => a.actor === 'dashboard:token@127.0.0.1'));
  });
});
