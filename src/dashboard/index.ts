/** The web dashboard: a `node:http` request handler to mount in your server, also run by `txbox dashboard`. */
export { createDashboardHandler, type DashboardHandler } from './dashboard-handler.ts';
export { resolveDashboardOptions, type DashboardOptions, type ResolvedDashboardOptions } from './dashboard-options.ts';
export type { DashboardSample, DashboardSnapshot } from './dashboard-sampler.ts';
export type {
  DashboardCircuit,
  DashboardDeadEvent,
  DashboardDestinationStatus,
  DashboardHeldEvent,
  DashboardIds,
  DashboardInboxConsumer,
  DashboardInboxSource,
  DashboardOutboxSource,
  DashboardOutboxStatus,
  DashboardParkedEvent,
  DashboardRelayStatus,
} from './dashboard-source.ts';
export { isLoopback } from './dashboard-auth.ts';
