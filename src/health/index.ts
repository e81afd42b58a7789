/**
 * `/metrics`, `/healthz` and `/readyz` over node:http for a relay or a
 * consumer process (no framework, no dependency).
 */
export { serveHealth, type ServeHealthOptions, type HealthServer, type MetricsText } from './health-server.ts';
export type { HealthCheck, HealthReport, HealthSource } from '../core/health.ts';
