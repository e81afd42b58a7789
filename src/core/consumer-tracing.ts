/**
 * The consumer side of tracing: one CONSUMER span `process <type>` per
 * received event, child of the trace context the event carries (the relay's
 * publish span), with the handler running inside it. Started by the inbox and
 * by the webhook receiver; when the receiver already started one for the same
 * event (the webhook consumer hands it to an inbox), the inbox joins it
 * instead of starting a second.
 */
import type { OutboxEvent } from './envelope.ts';
import { canonicalEventId } from './inbound-event.ts';
import { extractTraceContext, otelApi, spanErrorText, txboxTracer } from './tracing.ts';

/** A started consumer span, or a joined one. */
export interface ConsumerTrace {
  /** Runs `fn` with the span active (its async continuations too). */
  run<T>(fn: () => T): T;
  /** Sets an attribute of the span. */
  set(name: string, value: string | number): void;
  /** Marks the span failed (status error) with `message` (no payload). */
  fail(message: string): void;
  /** Ends the span; a joined span is ended by whoever started it. */
  end(): void;
}

/** What the span says about where the event came from. */
export interface ConsumerTraceAttributes {
  /** The inbox's consumer name (`txbox.consumer`). */
  readonly consumer?: string;
}

const CONSUMING_KEY_NAME = 'txbox.consuming-event-id';
let consumingKey: symbol | undefined;

/**
 * Starts the span of one received event, or returns undefined when nothing is
 * traced (no OpenTelemetry API, or no SDK).
 * The parent is the trace context in the event's headers, else the one in
 * `fallback` (a webhook request's HTTP headers), else the active context.
 */
export function startConsumerTrace(
  event: OutboxEvent,
  attributes: ConsumerTraceAttributes,
  fallback?: Readonly<Record<string, string | readonly string[] | undefined>>,
): ConsumerTrace | undefined {
  const api = otelApi();
  if (api === null) return undefined;
  const tracer = txboxTracer(api);
  if (tracer === undefined) return undefined;
  consumingKey ??= api.createContextKey(CONSUMING_KEY_NAME);
  const active = api.context.active();
  // The receiver sees the id as sent, the inbox in canonical form: compare canonical forms.
  const id = canonicalEventId(event.id) ?? String(event.id);
  if (active.getValue(consumingKey) === id) {
    const outer = api.trace.getSpan(active);
    if (attributes.consumer !== undefined) outer?.setAttribute('txbox.consumer', attributes.consumer);
    return {
      run: (fn) => api.context.with(active, fn),
      set: (name, value) => outer?.setAttribute(name, value),
      fail: (message) => outer?.setStatus({ code: api.SpanStatusCode.ERROR, message: spanErrorText(message) }),
      end: () => {},
    };
  }
  let parent = extractTraceContext(api, active, event.headers);
  if (fallback !== undefined && api.trace.getSpanContext(parent) === api.trace.getSpanContext(active)) parent = extractTraceContext(api, active, fallback);
  const attrs: Record<string, string> = {
    'messaging.operation.type': 'process',
    'messaging.operation.name': 'process',
    'messaging.message.id': String(event.id),
    'txbox.event.type': event.type,
  };
  if (event.destination) attrs['messaging.destination.name'] = event.destination;
  if (attributes.consumer !== undefined) attrs['txbox.consumer'] = attributes.consumer;
  const span = tracer.startSpan(`process ${event.type}`, { kind: api.SpanKind.CONSUMER, attributes: attrs }, parent);
  // A no-op tracer (a provider that records nothing) hands back the parent's context, or none: nothing to run inside.
  const own = span.spanContext();
  if (!span.isRecording() && (!api.trace.isSpanContextValid(own) || own.spanId === api.trace.getSpanContext(parent)?.spanId)) return undefined;
  const ctx = api.trace.setSpan(parent, span).setValue(consumingKey, id);
  return {
    run: (fn) => api.context.with(ctx, fn),
    set: (name, value) => span.setAttribute(name, value),
    fail: (message) => span.setStatus({ code: api.SpanStatusCode.ERROR, message: spanErrorText(message) }),
    end: () => span.end(),
  };
}

/** Runs `fn` inside `trace` when there is one. */
export function runTraced<T>(trace: ConsumerTrace | undefined, fn: () => T): T {
  return trace === undefined ? fn() : trace.run(fn);
}
