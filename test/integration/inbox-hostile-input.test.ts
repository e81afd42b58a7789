/**
 * Input PostgreSQL refuses, through the inbox on the real PostgreSQL (and
 * PGlite): ids in other UUID spellings are compared in one canonical form
 * (never marked processed without running), ids that are not UUIDs, NUL in
 * text fields and `\u0000` in payloads are dead at once with a reason naming
 * the field, NUL in a handler's error is stored sanitized, and a refusal of
 * txbox's own row is dead after a bounded number of tries; other events flow.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createInbox, uuidv7, type OutboxEvent } from 'txbox';
import { PostgresInboxStore, inboxNames, migrateInbox } from 'txbox/postgres';
import { classifyStoreError } from '../../src/core/store-errors.ts';
import { canonicalEventId, inboundEventProblem } from '../../src/core/inbound-event.ts';
import { parseEnvelope } from 'txbox/http';
import { BACKENDS, openDb, type TestDb } from '../helpers/databases.ts';

function event(overrides: Partial<OutboxEvent> = {}): OutboxEvent {
  return {
    id: uuidv7(),
    type: 'Noted',
    aggregateType: 'Note',
    aggregateId: '1',
    key: 'Note:1',
    destination: 'notes',
    payload: { note: 'hello' },
    headers: {},
    occurredAt: new Date(),
    version: null,
    ...overrides,
  };
}

describe('inbound event checks (pure)', () => {
  it('canonicalEventId accepts the UUID spellings PostgreSQL accepts and nothing else', () => {
    const c = '0190a8f0-1234-7abc-8def-0123456789ab';
    assert.equal(canonicalEventId(c.toUpperCase()), c);
    assert.equal(canonicalEventId(`{${c}}`), c);
    assert.equal(canonicalEventId(c.replace(/-/g, '')), c);
    assert.equal(canonicalEventId(`{${c.replace(/-/g, '').toUpperCase()}}`), c);
    for (const bad of ['order-17', '', `${c}0`, `{${c}`, c.replace('-', '_'), 'g'.repeat(32)]) assert.equal(canonicalEventId(bad), null, bad);
  });

  it('inboundEventProblem names the field', () => {
    assert.equal(inboundEventProblem(event()), null);
    assert.match(inboundEventProblem(event({ id: 'order-17' }))!, /^id: "order-17" is not a UUID/);
    assert.match(inboundEventProblem(event({ key: 'a\u0000b' }))!, /^key: contains a NUL/);
    assert.match(inboundEventProblem(event({ payload: { a: [1, { b: 'x\u0000' }] } }))!, /^payload\.a\[1\]\.b: contains/);
    assert.match(inboundEventProblem(event({ headers: { trace: 'a\u0000' } }))!, /^headers: /);
    assert.equal(inboundEventProblem(event({ payload: { text: '\\u0000 literally' }, payloadJson: '{"text":"\\\\u0000 literally"}' })), null);
  });

  it('the webhook envelope parser refuses what the inbox cannot store (a 400), naming the field', () => {
    const body = (o: object): string => JSON.stringify({ type: 'Noted', key: 'Note:1', payload: {}, ...o });
    const id = uuidv7();
    assert.deepEqual(parseEnvelope(body({ id: 'order-17' })).ok, false);
    assert.match((parseEnvelope(body({ id: 'order-17' })) as { message: string }).message, /^id: "order-17" is not a UUID/);
    assert.match((parseEnvelope(body({ id, key: 'a\u0000' })) as { message: string }).message, /^key: contains a NUL/);
    assert.match((parseEnvelope(body({ id, payload: { x: ['\u0000'] } })) as { message: string }).message, /^payload\.x\[0\]: contains/);
    const upper = parseEnvelope(body({ id: id.toUpperCase() }));
    assert.ok(upper.ok, 'any UUID spelling is received (the inbox makes it canonical)');
  });

  it('classifyStoreError tells deterministic refusals from outages', () => {
    const pgError = (code: string): Error => Object.assign(new Error(code), { code });
    for (const code of ['22P05', '22021', '22P02', '23505', '23514', '54000']) assert.equal(classifyStoreError(pgError(code)), 'deterministic', code);
    for (const code of ['57P01', '08006', '08001', '40001', '40P01', '57014', '42P01', '53300']) assert.equal(classifyStoreError(pgError(code)), 'outage', code);
    assert.equal(classifyStoreError(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' })), 'outage');
    assert.equal(classifyStoreError(new Error('Connection terminated unexpectedly')), 'outage');
    assert.equal(classifyStoreError(new Error('wrapped', { cause: pgError('22P05') })), 'deterministic');
  });
});

for (const kind of BACKENDS) {
  describe(`inbox hostile input on ${kind}`, () => {
    let db: TestDb;
    let store: PostgresInboxStore;
    before(async () => {
      db = await openDb(kind, { migrate: false });
      await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
      store = new PostgresInboxStore({ connection: db.connection, schema: db.schema });
      await db.query(`CREATE TABLE "${db.schema}".notes (event_id uuid NOT NULL, body jsonb NOT NULL)`);
    });
    after(async () => {
      await db.close();
    });

    const noteHandler = (seen: string[]) => async (e: OutboxEvent, tx: { query(text: string, params?: unknown[]): Promise<unknown> }) => {
      seen.push(e.id);
      await tx.query(`INSERT INTO "${db.schema}".notes (event_id, body) VALUES ($1, $2::jsonb)`, [e.id, JSON.stringify(e.payload)]);
    };

    for (const [name, spell] of [
      ['upper case', (id: string) => id.toUpperCase()],
      ['braces', (id: string) => `{${id}}`],
      ['32 hex digits', (id: string) => id.replace(/-/g, '')],
    ] as const) {
      for (const maxSize of [1, 64]) {
        it(`an id spelled in ${name} runs its handler once (batch ${maxSize}) and a redelivery in any spelling is a duplicate`, async () => {
          const seen: string[] = [];
          const inbox = createInbox({ store, consumer: `spell-${name.replace(/ /g, '')}-${maxSize}`, batch: { maxSize } });
          inbox.on('Noted', noteHandler(seen));
          const canonical = uuidv7();
          const outcome = await inbox.process(event({ id: spell(canonical) }));
          assert.equal(outcome.status, 'processed', 'the handler must run: the id is not a duplicate');
          assert.deepEqual(seen, [canonical], 'the handler sees the canonical id');
          assert.equal((await inbox.process(event({ id: canonical }))).status, 'duplicate');
          assert.equal((await inbox.process(event({ id: spell(canonical) }))).status, 'duplicate');
          assert.equal((await db.query(`SELECT 1 FROM "${db.schema}".notes WHERE event_id = $1`, [canonical])).length, 1);
        });
      }
    }

    it('an id that is not a UUID, a key with NUL and a payload with \\u0000 are dead at once, naming the field; nothing is marked and other events flow', async () => {
      const seen: string[] = [];
      const inbox = createInbox({ store, consumer: 'refused-input' });
      inbox.on('Noted', noteHandler(seen));
      const good = [event(), event({ key: 'Note:2' }), event({ key: 'Note:3' })];
      const bad = [event({ id: 'order-17' }), event({ key: 'Note:\u0000' }), event({ payload: { note: 'a\u0000b' } }), event({ aggregateId: '\u0000' })];
      // All at once: grouped into one batch, as a consumer's concurrent keys are.
      const outcomes = await Promise.all([...bad, ...good].map((e) => inbox.process(e)));
      const [badId, badKey, badPayload, badAggregate] = outcomes;
      assert.equal(badId!.status, 'dead');
      assert.match((badId as { error: string }).error, /^id: "order-17" is not a UUID/);
      assert.equal(badKey!.status, 'dead');
      assert.match((badKey as { error: string }).error, /^key: contains a NUL/);
      assert.equal(badPayload!.status, 'dead');
      assert.match((badPayload as { error: string }).error, /^payload\.note: contains "\\u0000"/);
      assert.match((badAggregate as { error: string }).error, /^aggregateId: /);
      assert.deepEqual(outcomes.slice(bad.length).map((o) => o.status), ['processed', 'processed', 'processed']);
      assert.deepEqual(seen.sort(), good.map((e) => e.id).sort(), 'only the good events ran');
      const rows = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".inbox WHERE consumer = 'refused-input' AND status <> 'processed'`);
      assert.equal(rows[0]!.n, 0);
    });

    it('a handler error with NUL in its message is recorded sanitized: retry, then dead, never a rejection', async () => {
      const inbox = createInbox({ store, consumer: 'nul-error', retry: { baseDelayMs: 10, maxDelayMs: 10, maxAttempts: 2 } });
      inbox.on('Noted', () => {
        throw new Error('bad byte \u0000 here');
      });
      const e = event();
      const first = await inbox.process(e);
      assert.equal(first.status, 'retry');
      assert.equal((await inbox.process(e)).status, 'dead');
      const rows = await db.query<{ last_error: string; status: string }>(`SELECT status, last_error FROM "${db.schema}".inbox WHERE consumer = 'nul-error' AND event_id = $1`, [e.id]);
      assert.equal(rows[0]!.status, 'dead');
      assert.equal(rows[0]!.last_error, 'bad byte \ufffd here');
    });

    for (const maxSize of [1, 64]) {
      it(`odd throwables (an Error whose message is not a string, a null-prototype object, a throwing toString) retry, then dead, never a rejection (batch ${maxSize})`, async () => {
        const odd: (() => unknown)[] = [
          () => Object.assign(new Error('x'), { message: undefined }),
          () => Object.assign(new Error('x'), { message: { nested: true } }),
          () => Object.create(null),
          () => ({
            toString() {
              throw new Error('toString threw');
            },
          }),
          () => Symbol('thrown'),
        ];
        const inbox = createInbox({ store, consumer: `odd-throw-${maxSize}`, autoStart: false, batch: { maxSize }, retry: { baseDelayMs: 10, maxDelayMs: 10, maxAttempts: 2 } });
        const events = odd.map((_, i) => event({ key: `Odd:${i}`, payload: { i } }));
        inbox.on('Noted', (e) => {
          throw odd[(e.payload as { i: number }).i]!();
        });
        for (const expected of ['retry', 'dead']) {
          // All at once, as a consumer's concurrent keys come (one group-commit batch with maxSize 64).
          const outcomes = await Promise.allSettled(events.map((e) => inbox.process(e)));
          assert.deepEqual(
            outcomes.map((o) => (o.status === 'fulfilled' ? o.value.status : `rejected: ${String((o.reason as Error)?.message)}`)),
            events.map(() => expected),
          );
        }
        const rows = await db.query<{ last_error: string }>(`SELECT last_error FROM "${db.schema}".inbox WHERE consumer = $1 AND status = 'dead' ORDER BY key`, [`odd-throw-${maxSize}`]);
        assert.equal(rows.length, odd.length);
        for (const r of rows) assert.ok(r.last_error.length > 0, 'a reason is stored');
      });
    }

    it("a row of txbox's own that PostgreSQL refuses (a constraint) is dead after a bounded number of tries; other events flow", async () => {
      await db.query(`ALTER TABLE "${db.schema}".inbox ADD CONSTRAINT no_refused CHECK (type <> 'Refused')`);
      try {
        const inbox = createInbox({ store, consumer: 'own-row', retry: { baseDelayMs: 10, maxDelayMs: 10, maxAttempts: 12 } });
        inbox.on('Refused', () => {});
        inbox.on('Noted', () => {});
        const refused = event({ type: 'Refused' });
        const statuses: string[] = [];
        for (let i = 0; i < 3; i++) {
          const outcome = await inbox.process(refused);
          statuses.push(outcome.status);
          if (outcome.status === 'dead') assert.match(outcome.error, /SQLSTATE 23514/);
          assert.equal((await inbox.process(event())).status, 'processed', 'other events flow');
        }
        assert.deepEqual(statuses, ['retry', 'retry', 'dead']);
      } finally {
        await db.query(`ALTER TABLE "${db.schema}".inbox DROP CONSTRAINT no_refused`);
      }
    });
  });
}
