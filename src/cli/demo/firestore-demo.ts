/**
 * `txbox demo` on Firestore (`--store firestore`, or a firestore:// URL): the
 * same order service and relay as on the SQL stores, through the Firestore
 * outbox and relay stores. Orders, payments and the outbox are collections
 * prefixed `txbox_demo_<id>_` in the project the URL names (on the emulator
 * with FIRESTORE_EMULATOR_HOST and no URL: project `txbox-demo`), deleted at
 * the end. An order's payment is a transaction that reads the order's
 * document, so one order's events commit in version order. The writers of
 * this process also take turns per order: the emulator aborts a transaction
 * that contends for a document, and the client backs off a second or more
 * before it retries (8 writers paying 5 orders made 9 transactions a
 * second), which made the demo crawl; Firestore's transaction is still what
 * orders an order's writes (and would across processes).
 *
 * The inventory service (inbox and version-guarded projection) keeps its
 * tables on embedded PGlite, as a second service with a database of its own
 * would; the check compares its projection with the orders read back from
 * Firestore. (With FirestoreInboxStore and Firestore's applyVersioned
 * instead, 1,000 events verified too, but on the emulator the receiver's
 * concurrent inbox transactions contended, the client backed off a second
 * or more each time, and the relay's publish timeout ran out: 431 to 1,317
 * duplicate deliveries, 23 to 34 events/s, a median delivery of 13 s.)
 */
import type { DocumentReference, Firestore } from '@google-cloud/firestore';
import type { PGlite } from '@electric-sql/pglite';
import type { OutboxEvent } from '../../core/envelope.ts';
import { createOutbox } from '../../core/outbox.ts';
import { uuidv7 } from '../../core/uuid.ts';
import { FirestoreOutboxStore } from '../../stores/firestore/firestore-outbox-store.ts';
import { FirestoreRelayStore } from '../../stores/firestore/firestore-relay-store.ts';
import { firestoreNames } from '../../stores/firestore/firestore-names.ts';
import { importOptional } from '../optional-import.ts';
import type { FirestoreLocation } from '../backends/firestore-url.ts';
import type { DemoBackend } from './demo-backend.ts';
import { InventoryService } from './inventory-service.ts';
import { OrderCreated, PaymentCaptured, RolledBack, type CommittedEvent } from './order-service.ts';

/** gRPC's ALREADY_EXISTS, as Firestore's errors carry it in `code`. */
const ALREADY_EXISTS = 6;

export async function openFirestoreDemo(where: FirestoreLocation, id: string): Promise<DemoBackend> {
  const { connectFirestore } = await import('../backends/firestore-backend.ts');
  const prefix = `txbox_demo_${id}_`;
  const names = firestoreNames({ collection: `${prefix}outbox` });
  const db: Firestore = await connectFirestore(where, names);
  const orders = db.collection(`${prefix}orders`);
  const payments = db.collection(`${prefix}payments`);
  // Each order's payments in this process, one after the other (see above).
  const turns = new Map<string, Promise<unknown>>();
  const inTurn = <T>(orderId: string, fn: () => Promise<T>): Promise<T> => {
    const run = (turns.get(orderId) ?? Promise.resolve()).catch(() => {}).then(fn);
    turns.set(orderId, run);
    const forget = () => {
      if (turns.get(orderId) === run) turns.delete(orderId);
    };
    run.then(forget, forget);
    return run;
  };
  const outbox = createOutbox({ store: new FirestoreOutboxStore({ firestore: db, collection: names.collection }), events: [OrderCreated, PaymentCaptured] });
  /**
   * A transaction whose commit the server applied but whose answer was lost or an error (a
   * deadline, UNAVAILABLE; the emulator under load does it too) is run again by the client, and
   * its `create` of the same document then fails with ALREADY_EXISTS although the first attempt
   * committed, event included. The document it creates keeps the event's id and version, so the
   * outcome is read back from it instead of failing a write that happened. Also makes a repeated
   * call with the same order or payment id answer with what the first one committed.
   */
  const committedBefore = async (run: Promise<CommittedEvent>, doc: DocumentReference, key: string, version?: number): Promise<CommittedEvent> => {
    try {
      return await run;
    } catch (err) {
      if ((err as { code?: unknown }).code !== ALREADY_EXISTS) throw err;
      const written = await doc.get();
      const id = written.get('eventId') as unknown;
      if (!written.exists || typeof id !== 'string') throw err;
      return { id, key, version: version ?? Number(written.get('version')) };
    }
  };

  // The inventory service: a database of its own (embedded PGlite), its inbox and projection there.
  const { PGlite } = await importOptional('the demo on Firestore (its inventory service runs on embedded PGlite)', () => import('@electric-sql/pglite'));
  const { pgliteConnection } = await import('../../stores/pglite/pglite-connection.ts');
  const pglite: PGlite = new PGlite();
  const inventorySchema = 'inventory';
  const inventory = new InventoryService(pgliteConnection(pglite), inventorySchema);

  return {
    label: `Firestore (${where.label}; inventory service on embedded PGlite)`,
    async setup() {
      await pglite.query(`CREATE SCHEMA ${inventorySchema}`);
      await inventory.createTables();
    },
    relayStore: () => new FirestoreRelayStore({ firestore: db, collection: names.collection }),
    createOrder(orderId, customer, total, rollback): Promise<CommittedEvent> {
      // The event's id is chosen once and kept with the order: see committedBefore.
      const eventId = uuidv7();
      const key = `Order:${orderId}`;
      return committedBefore(
        db.runTransaction(async (tx) => {
          tx.create(orders.doc(orderId), { customer, total, paid: 0, version: 1, eventId });
          await outbox.enqueue(tx, OrderCreated({ id: eventId, aggregateId: orderId, version: 1, payload: { orderId, customer, total } }));
          if (rollback) throw new RolledBack();
          return { id: eventId, key, version: 1 };
        }),
        orders.doc(orderId),
        key,
        1, // the order's document goes on to later versions; its creation is version 1
      );
    },
    capturePayment(orderId, paymentId, amount, rollback): Promise<CommittedEvent> {
      // Reading the order serializes its writers: Firestore commits them one after the other, in version order.
      // Writers of other processes could still contend: allow more attempts than the default 5.
      const eventId = uuidv7();
      const key = `Order:${orderId}`;
      return inTurn(orderId, () => committedBefore(
        db.runTransaction(
          async (tx) => {
            const order = await tx.get(orders.doc(orderId));
            const version = Number(order.get('version')) + 1;
            const paidTotal = Number(order.get('paid')) + amount;
            tx.update(order.ref, { paid: paidTotal, version });
            tx.create(payments.doc(paymentId), { orderId, amount, version, eventId });
            await outbox.enqueue(tx, PaymentCaptured({ id: eventId, aggregateId: orderId, version, payload: { orderId, paymentId, amount, paidTotal } }));
            if (rollback) throw new RolledBack();
            return { id: eventId, key, version };
          },
          { maxAttempts: 50 },
        ),
        payments.doc(paymentId),
        key,
      ));
    },
    deliver: (event: OutboxEvent) => inventory.deliver(event),
    async check() {
      const [committed, { rows }] = await Promise.all([
        orders.get(),
        pglite.query<{ order_id: string; total: number | null; paid: number; version: number }>(
          `SELECT order_id, total::float8 AS total, paid::float8 AS paid, version::int AS version FROM ${inventorySchema}.order_view`,
        ),
      ]);
      const view = new Map(rows.map((r) => [r.order_id, r]));
      let mismatched = 0;
      for (const o of committed.docs) {
        const v = view.get(o.id);
        if (v === undefined || v.total !== Number(o.get('total')) || v.paid !== Number(o.get('paid')) || v.version !== Number(o.get('version'))) mismatched++;
      }
      const ids = new Set(committed.docs.map((o) => o.id));
      const phantom = rows.filter((r) => !ids.has(r.order_id)).length;
      return { orders: committed.size, mismatched, phantom, duplicatesSkipped: inventory.duplicatesSkipped, gapsHeld: inventory.gapsHeld };
    },
    async close() {
      inventory.inbox.stop();
      for (const c of [orders, payments, ...[names.outbox, names.buckets, names.relays, names.audit].map((n) => db.collection(n))]) {
        await db.recursiveDelete(c).catch(() => {});
      }
      await db.terminate().catch(() => {});
      await pglite.close();
    },
  };
}
