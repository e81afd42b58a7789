/** What the inbox admins of every store (`PostgresInboxAdmin`, `MysqlInboxAdmin`) list: one shape, whatever the store. */

export interface InboxConsumerStatus {
  readonly consumer: string;
  readonly processed: number;
  readonly failed: number;
  readonly dead: number;
  readonly held: number;
  readonly retry: number;
  readonly processedLastMinute: number;
  readonly lastProcessedAt: Date | null;
}

export interface DeadEvent {
  readonly consumer: string;
  readonly id: string;
  readonly type: string;
  readonly key: string;
  readonly attempts: number;
  readonly lastError: string | null;
  readonly receivedAt: Date;
}

export interface HeldEvent extends DeadEvent {
  /** The event's version (null when the producer does not track one). */
  readonly version: number | null;
  /** When it was last held or re-checked (null: held before migration 002). */
  readonly heldAt: Date | null;
}
