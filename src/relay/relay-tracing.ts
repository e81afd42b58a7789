/**
 * The relay's spans: one PRODUCER span `publish <destination>` per event and
 * transport call, child of the trace context the producer stored in the
 * event's headers, ended at the ack or the failure. The span's own context
 * replaces the event's trace headers on the wire, so the consumer's span is
 * its child and one trace runs from the producer through the relay to the
 * handler. Without an SDK nothing is created and the events go out as they
 * are (the producer's context still travels).
 */
import type { StoredEvent } from '../core/envelope.ts';
import type { PublishOutcome, Transport } from '../core/ports.ts';
import { extractTraceContext, otelApi, replaceTraceContext, spanErrorText, txboxTracer, UNTRACED_TRANSPORT } from '../core/tracing.ts';

/** The spans of one transport call. */
export interface PublishTrace {
  /** The events to hand to the transport: copies whose headers carry their publish span's context. */
  readonly events: readonly StoredEvent[];
  /**
   * Runs the transport call: inside the publish span's context when the call
   * carries one event, so that spans of an instrumented client library (and
   * the trace headers it writes) join the same trace.
   */
  run<T>(fn: () => T): T;
  /** Ends every span with its outcome (error status and `error.type` on failure). */
  end(outcomes: readonly PublishOutcome[]): void;
}

/** Starts the publish spans of a transport call, or returns null when nothing is traced. */
export function startPublishTrace(transport: Transport, events: readonly StoredEvent[]): PublishTrace | null {
  const api = otelApi();
  if (api === null || (transport as { [UNTRACED_TRANSPORT]?: boolean })[UNTRACED_TRANSPORT] === true) return null;
  const tracer = txboxTracer(api);
  if (tracer === undefined) return null;
  const spans: ReturnType<typeof tracer.startSpan>[] = [];
  const out: StoredEvent[] = [];
  let single = api.ROOT_CONTEXT;
  let traced = false;
  for (const event of events) {
    const parent = extractTraceContext(api, api.ROOT_CONTEXT, event.headers);
    const span = tracer.startSpan(
      `publish ${event.destination}`,
      {
        kind: api.SpanKind.PRODUCER,
        attributes: {
          'messaging.system': transport.name,
          'messaging.operation.type': 'send',
          'messaging.operation.name': 'publish',
          'messaging.destination.name': event.destination,
          'messaging.message.id': event.id,
          'txbox.event.type': event.type,
          'txbox.attempt': event.attempts + 1,
        },
      },
      parent,
    );
    spans.push(span);
    const own = span.spanContext();
    // A no-op tracer hands back the parent's context (or none): the event goes out unchanged.
    if (!span.isRecording() && (!api.trace.isSpanContextValid(own) || own.spanId === api.trace.getSpanContext(parent)?.spanId)) {
      out.push(event);
      continue;
    }
    traced = true;
    const ctx = api.trace.setSpan(parent, span);
    single = ctx;
    const headers = replaceTraceContext(api, ctx, event.headers ?? {});
    out.push(headers === event.headers ? event : withHeaders(event, headers));
  }
  if (!traced) return null;
  return {
    events: out,
    run: (fn) => (events.length === 1 ? api.context.with(single, fn) : fn()),
    end(outcomes) {
      spans.forEach((span, i) => {
        const outcome = outcomes[i];
        if (outcome !== undefined && !outcome.ok) {
          span.setAttribute('error.type', outcome.error.kind);
          span.setStatus({ code: api.SpanStatusCode.ERROR, message: spanErrorText(`${outcome.error.kind}: ${outcome.error.message}`) });
        }
        span.end();
      });
    },
  };
}

/** A copy of the event with other headers; the lazy `payload` getter of a claimed event is copied, not called. */
function withHeaders(event: StoredEvent, headers: Readonly<Record<string, string>>): StoredEvent {
  const copy = Object.defineProperties({}, Object.getOwnPropertyDescriptors(event)) as StoredEvent;
  Object.defineProperty(copy, 'headers', { value: headers, enumerable: true, writable: true, configurable: true });
  return copy;
}
