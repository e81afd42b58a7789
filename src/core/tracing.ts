/**
 * OpenTelemetry without a dependency: `@opentelemetry/api` is loaded once,
 * synchronously, if the app installed it, and every helper here is a no-op
 * without it. With the API but no SDK registered the helpers cost a context
 * lookup and create nothing. Trace context travels in the event's headers
 * through the app's global propagator, or, when the app registered none, as
 * W3C `traceparent` / `tracestate` (implemented here, so that txbox needs no
 * `@opentelemetry/core`). Types from the API stay inside this module's
 * function bodies: txbox's declarations never name the optional package.
 */
import { createRequire } from 'node:module';
import type * as Otel from '@opentelemetry/api';
import { ownHeader } from './envelope.ts';

type Api = typeof Otel;

let loaded: Api | null | undefined;

/** The OpenTelemetry API if the app installed it, else null. Loaded on first use, once. */
export function otelApi(): Api | null {
  if (loaded !== undefined) return loaded;
  try {
    loaded = createRequire(import.meta.url)('@opentelemetry/api') as Api;
  } catch (err) {
    const code = (err as { code?: unknown } | null)?.code;
    if (code !== 'MODULE_NOT_FOUND' && code !== 'ERR_MODULE_NOT_FOUND') throw err;
    loaded = null;
  }
  return loaded;
}

/** @internal For tests: replaces the loaded API (null: as if not installed; undefined: load again). */
export function setOtelApiForTests(api: unknown): void {
  loaded = api as Api | null | undefined;
}

/** The tracer name of every txbox span (instrumentation scope). */
export const TRACER_NAME = 'txbox';

/**
 * txbox's tracer, or undefined when no SDK registered a tracer provider: then
 * starting spans is skipped altogether instead of creating no-op ones.
 */
export function txboxTracer(api: Api): Otel.Tracer | undefined {
  const provider = api.trace.getTracerProvider();
  return provider instanceof api.ProxyTracerProvider ? provider.getDelegateTracer(TRACER_NAME) : provider.getTracer(TRACER_NAME);
}

/** A string map that trace context is read from: event headers or HTTP request headers. */
type Carrier = Readonly<Record<string, string | readonly string[] | undefined>>;

const getter: Otel.TextMapGetter<Carrier> = {
  keys: (carrier) => Object.keys(carrier),
  get(carrier, key) {
    let value = Object.hasOwn(carrier, key) ? carrier[key] : undefined;
    if (value === undefined) {
      // Header names are case-insensitive on HTTP and free-form elsewhere: `Traceparent` counts too.
      for (const name in carrier) {
        if (name.length === key.length && name.toLowerCase() === key) {
          value = carrier[name];
          break;
        }
      }
    }
    return Array.isArray(value) ? value[0] : (value as string | undefined);
  },
};

const setter: Otel.TextMapSetter<Record<string, string>> = {
  set: (carrier, key, value) => ownHeader(carrier, key, value),
};

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/** W3C Trace Context (traceparent, tracestate), for apps that registered no propagator. */
function w3cPropagator(api: Api): Otel.TextMapPropagator<Carrier> {
  return {
    fields: () => ['traceparent', 'tracestate'],
    inject(ctx, carrier, set) {
      const sc = api.trace.getSpanContext(ctx);
      if (!sc || !api.trace.isSpanContextValid(sc)) return;
      set.set(carrier, 'traceparent', `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, '0')}`);
      const state = sc.traceState?.serialize();
      if (state) set.set(carrier, 'tracestate', state);
    },
    extract(ctx, carrier, get) {
      const raw = get.get(carrier, 'traceparent');
      const text = Array.isArray(raw) ? raw[0] : raw;
      if (typeof text !== 'string') return ctx;
      const m = TRACEPARENT.exec(text.trim());
      // Version ff is invalid; version 00 has exactly four fields; later versions may append more.
      if (!m || m[1] === 'ff' || (m[1] === '00' && m[5] !== undefined)) return ctx;
      const sc: Otel.SpanContext = { traceId: m[2]!, spanId: m[3]!, traceFlags: parseInt(m[4]!, 16) & 1, isRemote: true };
      if (!api.trace.isSpanContextValid(sc)) return ctx;
      const stateRaw = get.get(carrier, 'tracestate');
      const state = Array.isArray(stateRaw) ? stateRaw.join(',') : stateRaw;
      if (typeof state === 'string' && state !== '') (sc as { traceState?: Otel.TraceState }).traceState = api.createTraceState(state);
      return api.trace.setSpanContext(ctx, sc);
    },
  };
}

let fallback: { api: Api; propagator: Otel.TextMapPropagator<Carrier> } | undefined;

/** The app's global propagator if it registered one (it names fields), else W3C Trace Context. */
function propagatorOf(api: Api): Otel.TextMapPropagator<Carrier> {
  if (api.propagation.fields().length > 0) return api.propagation as unknown as Otel.TextMapPropagator<Carrier>;
  if (fallback?.api !== api) fallback = { api, propagator: w3cPropagator(api) };
  return fallback.propagator;
}

/** True when `headers` has one of `fields` under any letter case. */
function hasAnyField(headers: object, fields: readonly string[]): boolean {
  for (const name in headers) {
    const lower = name.toLowerCase();
    if (fields.includes(lower)) return true;
  }
  return false;
}

/**
 * The headers `enqueue` stores: the caller's, plus the active span's context
 * (`traceparent`, `tracestate`) when a valid span is active and the caller set
 * none of the headers the propagator writes. Returns `headers` itself when
 * nothing is added (no API, no active span, headers that are not an object:
 * validation reports those).
 */
export function withActiveTraceContext(headers: unknown): unknown {
  const api = otelApi();
  if (api === null) return headers;
  const ctx = api.context.active();
  const sc = api.trace.getSpanContext(ctx);
  if (sc === undefined || !api.trace.isSpanContextValid(sc)) return headers;
  if (headers !== undefined && (headers === null || typeof headers !== 'object' || Array.isArray(headers))) return headers;
  try {
    const propagator = propagatorOf(api);
    if (headers !== undefined && hasAnyField(headers, propagator.fields())) return headers;
    const out: Record<string, string> = headers === undefined ? {} : { ...(headers as Record<string, string>) };
    propagator.inject(ctx, out as Carrier, setter as unknown as Otel.TextMapSetter<Carrier>);
    return out;
  } catch {
    // A propagator that throws must not fail the app's write: the event is stored without trace context.
    return headers;
  }
}

/**
 * `ctx` with the trace context read from `carrier` (the app's propagator,
 * else W3C). An invalid context is ignored, and so is a propagator that
 * throws: the event is then published or processed without a parent.
 */
export function extractTraceContext(api: Api, ctx: Otel.Context, carrier: Carrier | undefined): Otel.Context {
  if (carrier === undefined || carrier === null) return ctx;
  try {
    return propagatorOf(api).extract(ctx, carrier, getter);
  } catch {
    return ctx;
  }
}

/**
 * A copy of `headers` with the trace context of `ctx` instead of whatever
 * trace headers they had (any letter case), or `headers` itself when `ctx`
 * holds no valid span context or the propagator throws.
 */
export function replaceTraceContext(api: Api, ctx: Otel.Context, headers: Readonly<Record<string, string>>): Readonly<Record<string, string>> {
  const sc = api.trace.getSpanContext(ctx);
  if (sc === undefined || !api.trace.isSpanContextValid(sc)) return headers;
  try {
    const propagator = propagatorOf(api);
    const fields = propagator.fields();
    const out: Record<string, string> = {};
    for (const name in headers) if (!fields.includes(name.toLowerCase())) ownHeader(out, name, headers[name]!);
    propagator.inject(ctx, out as Carrier, setter as unknown as Otel.TextMapSetter<Carrier>);
    return out;
  } catch {
    return headers;
  }
}

/** Error text for a span status: one line, at most 300 characters. */
export function spanErrorText(text: string): string {
  const line = text.replace(/[\u0000-\u001f\u007f]+/g, ' ');
  return line.length > 300 ? `${line.slice(0, 297)}...` : line;
}

/**
 * Set to true on a transport whose publish is no hop between services (the
 * inbox worker's transport runs handlers in the same process): the relay
 * starts no publish span for it and leaves the events' trace context as is.
 */
export const UNTRACED_TRANSPORT: unique symbol = Symbol.for('txbox.untraced-transport');
