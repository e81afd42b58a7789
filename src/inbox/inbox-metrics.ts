import type { MetricRecorder, Metrics } from '../core/metrics.ts';
import type { InboxEmitter } from './inbox.ts';

/**
 * The inbox's metrics (src/core/metric-catalogue.ts), from its events: one
 * recorder per outcome, made on the first event (so that an OpenTelemetry SDK
 * registered after the inbox was created is used) and kept.
 */
export function recordInboxMetrics(events: InboxEmitter, consumer: string, resolve: () => Metrics): void {
  let r:
    | { processed: MetricRecorder; duplicate: MetricRecorder; held: MetricRecorder; dead: MetricRecorder; failed: MetricRecorder; duration: MetricRecorder; lag: MetricRecorder }
    | undefined;
  const recorders = () => {
    if (r) return r;
    const m = resolve();
    const outcome = (o: string) => m.recorder('inboxEvents', [consumer, o]);
    r = {
      processed: outcome('processed'),
      duplicate: outcome('duplicate'),
      held: outcome('held'),
      dead: outcome('dead'),
      failed: outcome('failed'),
      duration: m.recorder('inboxHandlerDuration', [consumer]),
      lag: m.recorder('inboxLag', [consumer]),
    };
    return r;
  };
  events.on('processed', (e) => {
    const rec = recorders();
    rec.processed.record(1);
    rec.duration.record(e.durationMs / 1000);
    const occurred = e.occurredAt instanceof Date ? e.occurredAt.getTime() : Date.parse(String(e.occurredAt));
    if (Number.isFinite(occurred)) rec.lag.record(Math.max(0, Date.now() - occurred) / 1000);
  });
  events.on('duplicate', () => recorders().duplicate.record(1));
  events.on('held', () => recorders().held.record(1));
  events.on('failed', (e) => (e.dead ? recorders().dead : recorders().failed).record(1));
}
