/**
 * The demo's second service: receives order events through its inbox and
 * keeps a version-guarded projection of every order. At the end the demo
 * compares the projection with the order service's committed orders.
 */
import { createInbox, type Inbox } from '../../inbox/inbox.ts';
import type { OutboxEvent } from '../../core/envelope.ts';
import type { PostgresConnection } from '../../stores/postgres/postgres-connection.ts';
import { PostgresInboxStore, inboxNames } from '../../stores/postgres/postgres-inbox-store.ts';
import { migrateInbox } from '../../stores/postgres/postgres-migrations.ts';
import { applyVersioned } from '../../stores/postgres/postgres-projection.ts';
import { OrderCreated, PaymentCaptured } from './order-service.ts';

export interface ProjectionCheck {
  readonly orders: number;
  /** Orders whose projected total, paid amount or version differ from the committed order, or that are missing. */
  readonly mismatched: number;
  /** Projected orders that were never committed (rolled back). */
  readonly phantom: number;
  readonly duplicatesSkipped: number;
  readonly gapsHeld: number;
}

export class InventoryService {
  readonly inbox: Inbox;
  duplicatesSkipped = 0;
  gapsHeld = 0;

  constructor(
    private readonly db: PostgresConnection,
    private readonly schema: string,
  ) {
    this.inbox = createInbox({
      store: new PostgresInboxStore({ connection: db, schema }),
      consumer: 'inventory',
      retry: { baseDelayMs: 50, maxDelayMs: 1000 },
    });
    const view = `${schema}.order_view`;
    this.inbox.on(OrderCreated, async (e, tx) => {
      await applyVersioned(tx, { table: view, id: { order_id: e.payload.orderId }, version: e.version ?? 1, values: { total: e.payload.total, paid: 0 }, onGap: 'hold' });
    });
    this.inbox.on(PaymentCaptured, async (e, tx) => {
      await applyVersioned(tx, { table: view, id: { order_id: e.payload.orderId }, version: e.version!, values: { paid: e.payload.paidTotal }, onGap: 'hold' });
    });
    this.inbox.events.on('duplicate', () => this.duplicatesSkipped++);
    this.inbox.events.on('held', () => this.gapsHeld++);
  }

  async createTables(): Promise<void> {
    await migrateInbox(this.db, inboxNames({ schema: this.schema }));
    await this.db.query(`CREATE TABLE IF NOT EXISTS "${this.schema}".order_view (
      order_id text PRIMARY KEY, total numeric, paid numeric NOT NULL DEFAULT 0, version bigint NOT NULL)`);
  }

  /** The inbox path: runs the handler once, or rejects so that the broker redelivers. */
  async deliver(event: OutboxEvent): Promise<void> {
    const outcome = await this.inbox.process(event);
    if (outcome.status === 'retry') throw new Error(`inventory handler failed: ${outcome.error}`);
  }

  async check(ordersSchema: string): Promise<ProjectionCheck> {
    const { rows } = await this.db.query<{ orders: number; mismatched: number; phantom: number }>(
      `SELECT count(o.id)::int AS orders,
              count(*) FILTER (WHERE o.id IS NOT NULL AND (v.order_id IS NULL OR v.total IS DISTINCT FROM o.total
                                 OR v.paid <> o.paid OR v.version <> o.version))::int AS mismatched,
              count(*) FILTER (WHERE o.id IS NULL)::int AS phantom
       FROM "${ordersSchema}".orders o FULL JOIN "${this.schema}".order_view v ON v.order_id = o.id`,
    );
    return { ...rows[0]!, duplicatesSkipped: this.duplicatesSkipped, gapsHeld: this.gapsHeld };
  }
}
