/**
 * The demo's order service: business tables plus an outbox, written in one
 * transaction. Orders and payments of one order share the key `Order:<id>`;
 * the order row is locked before each payment, so one order's events commit
 * in version order (the per-aggregate serialization txbox relies on).
 */
import { createOutbox, defineEvent, payloadType, type Outbox, type SqlExecutor } from '../../index.ts';
import { PostgresOutboxStore } from '../../stores/postgres/postgres-outbox-store.ts';
import type { PostgresConnection } from '../../stores/postgres/postgres-connection.ts';

export const OrderCreated = defineEvent({
  type: 'OrderCreated',
  aggregateType: 'Order',
  destination: 'orders',
  payload: payloadType<{ orderId: string; customer: string; total: number }>(),
});

export const PaymentCaptured = defineEvent({
  type: 'PaymentCaptured',
  aggregateType: 'Order',
  destination: 'payments',
  payload: payloadType<{ orderId: string; paymentId: string; amount: number; paidTotal: number }>(),
});

export interface CommittedEvent {
  readonly id: string;
  readonly key: string;
  readonly version: number;
}

export class OrderService {
  readonly outbox: Outbox;

  constructor(
    private readonly db: PostgresConnection,
    private readonly schema: string,
  ) {
    this.outbox = createOutbox({ store: new PostgresOutboxStore({ schema }), events: [OrderCreated, PaymentCaptured] });
  }

  async createTables(): Promise<void> {
    await this.db.query(`CREATE TABLE IF NOT EXISTS "${this.schema}".orders (
      id text PRIMARY KEY, customer text NOT NULL, total numeric NOT NULL, paid numeric NOT NULL DEFAULT 0, version integer NOT NULL)`);
    await this.db.query(`CREATE TABLE IF NOT EXISTS "${this.schema}".payments (
      id uuid PRIMARY KEY, order_id text NOT NULL REFERENCES "${this.schema}".orders(id), amount numeric NOT NULL)`);
  }

  /** Creates an order; when `rollback` is set, fails after writing everything (a business rule rejects it). */
  async createOrder(orderId: string, customer: string, total: number, rollback: boolean): Promise<CommittedEvent> {
    return this.db.transaction(async (tx) => {
      await tx.query(`INSERT INTO "${this.schema}".orders (id, customer, total, version) VALUES ($1, $2, $3, 1)`, [orderId, customer, total]);
      const [id] = await this.outbox.enqueue(tx, OrderCreated({ aggregateId: orderId, version: 1, payload: { orderId, customer, total } }));
      if (rollback) throw new RolledBack();
      return { id: id!, key: `Order:${orderId}`, version: 1 };
    });
  }

  /** Captures a payment on an existing order, under the order's row lock. */
  async capturePayment(orderId: string, paymentId: string, amount: number, rollback: boolean): Promise<CommittedEvent> {
    return this.db.transaction(async (tx: SqlExecutor) => {
      const { rows } = await tx.query(`SELECT version, paid FROM "${this.schema}".orders WHERE id = $1 FOR UPDATE`, [orderId]);
      const row = rows[0] as { version: number; paid: string };
      const version = row.version + 1;
      const paidTotal = Number(row.paid) + amount;
      await tx.query(`UPDATE "${this.schema}".orders SET paid = paid + $2, version = $3 WHERE id = $1`, [orderId, amount, version]);
      await tx.query(`INSERT INTO "${this.schema}".payments (id, order_id, amount) VALUES ($1, $2, $3)`, [paymentId, orderId, amount]);
      const [id] = await this.outbox.enqueue(tx, PaymentCaptured({ aggregateId: orderId, version, payload: { orderId, paymentId, amount, paidTotal } }));
      if (rollback) throw new RolledBack();
      return { id: id!, key: `Order:${orderId}`, version };
    });
  }
}

export class RolledBack extends Error {
  constructor() {
    super('rolled back on purpose');
  }
}
