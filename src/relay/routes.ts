import type { StoredEvent } from '../core/envelope.ts';
import { ConfigError, TransportError, toTransportError } from '../core/errors.ts';
import type { PublishOutcome, Transport } from '../core/ports.ts';

/**
 * One route of the route table: which events go to which transport. An event
 * goes to every route that matches it; with no filter a route takes all.
 */
export interface RouteOptions {
  /** Stable name, stored with each event's delivery state (letters, digits, `_`, `-`). Renaming a route re-sends to it. */
  readonly name: string;
  readonly transport: Transport;
  /** Only events for these destinations. Default: any. */
  readonly destinations?: readonly string[];
  /** Only events of these types. Default: any. */
  readonly types?: readonly string[];
}

export interface ResolvedRoute {
  readonly name: string;
  readonly transport: Transport;
  readonly destinations: ReadonlySet<string> | null;
  readonly types: ReadonlySet<string> | null;
}

const ROUTE_NAME = /^[A-Za-z0-9_-]{1,64}$/;

export function resolveRoutes(transport: Transport | undefined, routes: readonly RouteOptions[] | undefined): ResolvedRoute[] {
  if (transport && routes) throw new ConfigError('routes', 'give either transport or routes, not both');
  if (transport) {
    if (typeof transport.publish !== 'function') throw new ConfigError('transport', 'is not a transport (it has no publish method)');
    return [{ name: 'default', transport, destinations: null, types: null }];
  }
  if (!routes || !Array.isArray(routes) || routes.length === 0) {
    throw new ConfigError('transport', 'is required: pass a transport such as new HttpTransport({ endpoints }), or a routes table');
  }
  const names = new Set<string>();
  return routes.map((r, i) => {
    if (!r || typeof r.name !== 'string' || !ROUTE_NAME.test(r.name)) {
      throw new ConfigError(`routes[${i}].name`, 'must be 1-64 letters, digits, _ or -');
    }
    if (names.has(r.name)) throw new ConfigError(`routes[${i}].name`, `"${r.name}" is used twice; route names must be unique`);
    names.add(r.name);
    if (!r.transport || typeof r.transport.publish !== 'function') throw new ConfigError(`routes[${i}].transport`, 'is required');
    return {
      name: r.name,
      transport: r.transport,
      destinations: r.destinations ? new Set(r.destinations) : null,
      types: r.types ? new Set(r.types) : null,
    };
  });
}

function matches(route: ResolvedRoute, event: StoredEvent): boolean {
  return (route.destinations === null || route.destinations.has(event.destination)) && (route.types === null || route.types.has(event.type));
}

/** What became of one event across its routes in one attempt. */
export interface RoutedOutcome {
  readonly ok: boolean;
  /** Routes that acked in this attempt. */
  readonly acked: readonly string[];
  readonly error?: TransportError;
}

/**
 * Publishes a wave to every route each event still needs (routes that acked
 * in an earlier attempt are not sent again), routes in parallel. An event is
 * ok when all its routes acked; otherwise the error is the first permanent
 * one, or else the retriable one with the longest requested delay.
 */
export async function publishToRoutes(
  wave: readonly StoredEvent[],
  routes: readonly ResolvedRoute[],
  call: (transport: Transport, events: StoredEvent[]) => Promise<PublishOutcome[]>,
): Promise<RoutedOutcome[]> {
  const only = routes.length === 1 ? routes[0]! : undefined;
  if (only !== undefined && only.destinations === null && only.types === null && wave.every((e) => !e.routesDone.includes(only.name))) {
    return publishToOneRoute(wave, only, call);
  }
  const acked: string[][] = wave.map(() => []);
  const errors: (TransportError | undefined)[] = wave.map(() => undefined);
  const routed = wave.map(() => false);
  await Promise.all(
    routes.map(async (route) => {
      const idx: number[] = [];
      wave.forEach((e, i) => {
        if (!matches(route, e)) return;
        routed[i] = true;
        if (!e.routesDone.includes(route.name)) idx.push(i);
      });
      if (idx.length === 0) return;
      let outcomes: PublishOutcome[];
      try {
        outcomes = await call(route.transport, idx.map((i) => wave[i]!));
      } catch (err) {
        const error = toTransportError(err);
        outcomes = idx.map(() => ({ ok: false, error }));
      }
      idx.forEach((i, j) => {
        const o = outcomes[j]!;
        if (o.ok) acked[i]!.push(route.name);
        else errors[i] = worse(errors[i], routes.length > 1 ? prefixed(route.name, o.error) : o.error);
      });
    }),
  );
  return wave.map((e, i) => {
    if (!routed[i]) {
      return { ok: false, acked: [], error: new TransportError('permanent', `no route for destination "${e.destination}" and type "${e.type}"; add one to the relay's routes`) };
    }
    const error = errors[i];
    return error ? { ok: false, acked: acked[i]!, error } : { ok: true, acked: acked[i]! };
  });
}

/**
 * The usual case, one route for every event and none of them published to it
 * yet: the same outcomes as the general path, without its per-event arrays
 * (every acked event shares one frozen outcome).
 */
async function publishToOneRoute(
  wave: readonly StoredEvent[],
  route: ResolvedRoute,
  call: (transport: Transport, events: StoredEvent[]) => Promise<PublishOutcome[]>,
): Promise<RoutedOutcome[]> {
  if (wave.length === 0) return [];
  let outcomes: PublishOutcome[];
  try {
    outcomes = await call(route.transport, wave.slice());
  } catch (err) {
    const error = toTransportError(err);
    outcomes = wave.map(() => ({ ok: false, error }));
  }
  const ackedOutcome: RoutedOutcome = Object.freeze({ ok: true, acked: Object.freeze([route.name]) });
  const routed = new Array<RoutedOutcome>(wave.length);
  for (let i = 0; i < wave.length; i++) {
    const o = outcomes[i]!;
    routed[i] = o.ok ? ackedOutcome : { ok: false, acked: [], error: o.error };
  }
  return routed;
}

function prefixed(route: string, e: TransportError): TransportError {
  return new TransportError(e.kind, `route ${route}: ${e.message}`, { cause: e, ...(e.retryAfterMs !== undefined ? { retryAfterMs: e.retryAfterMs } : {}) });
}

/** permanent over destination-down over retriable (then the longest Retry-After). */
function worse(a: TransportError | undefined, b: TransportError): TransportError {
  if (!a) return b;
  if (a.kind === 'permanent') return a;
  if (b.kind === 'permanent') return b;
  if (a.kind === 'destination-down') return a;
  if (b.kind === 'destination-down') return b;
  return (b.retryAfterMs ?? 0) > (a.retryAfterMs ?? 0) ? b : a;
}
