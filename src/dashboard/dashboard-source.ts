/**
 * What the dashboard reads and does, per store: a small port that the
 * PostgreSQL admins (`PostgresAdmin`, `PostgresInboxAdmin`, txbox/postgres)
 * and the MySQL ones (`MysqlAdmin`, `MysqlInboxAdmin`) both satisfy as they
 * are. It names no store: the dashboard imports none of them.
 */

/** Per destination: backlog, backoff, parked, oldest pending age, pending events behind a parked one of their key. */
export interface DashboardDestinationStatus {
  readonly destination: string;
  readonly pending: number;
  readonly backingOff: number;
  readonly parked: number;
  readonly oldestPendingSeconds: number | null;
  readonly blockedByParked: number;
}

/** A relay seen in the last 24 hours. */
export interface DashboardRelayStatus {
  readonly relayId: string;
  readonly host: string;
  readonly pid: number;
  readonly state: 'alive' | 'expired' | 'left';
  readonly alive: boolean;
  readonly stateAgeSeconds: number;
  readonly buckets: number;
  readonly inFlight: number;
  readonly publishedTotal: number;
  readonly ratePerMinute: number;
  readonly heartbeatAgeSeconds: number;
}

/** One status snapshot of the outbox; `table` is the store's own (sizes, estimates), passed through. */
export interface DashboardOutboxStatus {
  readonly destinations: readonly DashboardDestinationStatus[];
  readonly relays: readonly DashboardRelayStatus[];
  readonly inFlight: number;
  readonly publishedLastMinute: number;
  readonly table: { readonly totalBytes: number };
}

/** A destination a live relay has paused (circuit open). */
export interface DashboardCircuit {
  readonly destination: string;
  readonly relayId: string;
  readonly reason: string;
  readonly openSince: Date;
  readonly nextProbeAt: Date;
  readonly failedProbes: number;
}

/** A parked event; `parkedAt` is null on stores that record no park time (MySQL). */
export interface DashboardParkedEvent {
  readonly id: string;
  readonly type: string;
  readonly key: string;
  readonly destination: string;
  readonly attempts: number;
  readonly lastError: string | null;
  readonly parkedAt: Date | null;
  readonly payload?: unknown;
}

export interface DashboardInboxConsumer {
  readonly consumer: string;
  readonly processed: number;
  readonly failed: number;
  readonly dead: number;
  readonly held: number;
  readonly retry: number;
  readonly processedLastMinute: number;
  readonly lastProcessedAt: Date | null;
}

export interface DashboardDeadEvent {
  readonly consumer: string;
  readonly id: string;
  readonly type: string;
  readonly key: string;
  readonly attempts: number;
  readonly lastError: string | null;
  readonly receivedAt: Date;
}

export interface DashboardHeldEvent extends DashboardDeadEvent {
  readonly version: number | null;
  readonly heldAt: Date | null;
}

/** The ids of events an action applies to. */
export interface DashboardIds {
  readonly ids: readonly string[];
}

/** What the dashboard reads and does on the outbox. */
export interface DashboardOutboxSource {
  status(): Promise<DashboardOutboxStatus>;
  /** Destinations down; optional: a store whose relays record no circuits leaves it out and none are shown. */
  circuits?(): Promise<readonly DashboardCircuit[]>;
  listParked(options: { limit?: number; includePayload?: boolean }): Promise<readonly DashboardParkedEvent[]>;
  /** Events published in the last `seconds` per destination, for the publish-rate chart. */
  publishedPerDestination(seconds: number): Promise<readonly { readonly destination: string; readonly published: number }[]>;
  retryParked(selector: DashboardIds, actor: string): Promise<string[]>;
  skipParked(selector: DashboardIds, actor: string): Promise<string[]>;
  discardParked(selector: DashboardIds, actor: string): Promise<string[]>;
}

/** What the dashboard reads and does on the inbox. */
export interface DashboardInboxSource {
  status(): Promise<readonly DashboardInboxConsumer[]>;
  listDead(options: { limit?: number }): Promise<readonly DashboardDeadEvent[]>;
  listHeld(options: { limit?: number }): Promise<readonly DashboardHeldEvent[]>;
  retryDead(selector: DashboardIds, actor: string): Promise<string[]>;
  retryHeld(selector: DashboardIds, actor: string): Promise<string[]>;
  discardDead(selector: DashboardIds, actor: string): Promise<string[]>;
}
