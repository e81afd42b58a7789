/**
 * The database side of `txbox demo`: the order service's writes (business
 * rows and events in one transaction), the relay's store, the inventory
 * service's inbox and projection, and the final check, on one store.
 * PostgreSQL and PGlite (`postgresDemoBackend`), MySQL and MariaDB
 * (`mysql-demo.ts`).
 */
import type { OutboxEvent } from '../../core/envelope.ts';
import type { RelayStore } from '../../core/ports.ts';
import type { PostgresConnection } from '../../stores/postgres/postgres-connection.ts';
import { PostgresRelayStore } from '../../stores/postgres/postgres-relay-store.ts';
import { migratePostgres } from '../../stores/postgres/postgres-migrations.ts';
import { postgresNames } from '../../stores/postgres/postgres-sql.ts';
import { InventoryService, type ProjectionCheck } from './inventory-service.ts';
import { OrderService, type CommittedEvent } from './order-service.ts';

export interface DemoBackend {
  /** For the summary: `PostgreSQL`, `MySQL/MariaDB`, ... */
  readonly label: string;
  /** Creates the outbox, the order service's tables, the inbox and the projection. */
  setup(): Promise<void>;
  relayStore(): RelayStore;
  /** Creates an order; when `rollback` is set, fails after writing everything (throws RolledBack). */
  createOrder(orderId: string, customer: string, total: number, rollback: boolean): Promise<CommittedEvent>;
  /** Captures a payment on an existing order, under the order's row lock. */
  capturePayment(orderId: string, paymentId: string, amount: number, rollback: boolean): Promise<CommittedEvent>;
  /** The inventory service's inbox: runs the handler once, or rejects so that the broker redelivers. */
  deliver(event: OutboxEvent): Promise<void>;
  /** The projection against the committed orders. */
  check(): Promise<ProjectionCheck>;
  /** Drops what the demo created and closes the connections. */
  close(): Promise<void>;
}

/** The demo on PostgreSQL or PGlite, in `schema`. */
export function postgresDemoBackend(db: PostgresConnection, schema: string, label: string, close: () => Promise<void>): DemoBackend {
  const service = new OrderService(db, schema);
  const inventory = new InventoryService(db, schema);
  return {
    label,
    async setup() {
      await migratePostgres(db, postgresNames({ schema }));
      await service.createTables();
      await inventory.createTables();
    },
    relayStore: () => new PostgresRelayStore({ schema, connection: db }),
    createOrder: (...a) => service.createOrder(...a),
    capturePayment: (...a) => service.capturePayment(...a),
    deliver: (event) => inventory.deliver(event),
    check: () => inventory.check(schema),
    close,
  };
}
