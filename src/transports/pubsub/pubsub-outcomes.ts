/**
 * How Pub/Sub (gRPC) errors become publish outcomes and start-up errors.
 * Messages name the topic, the destination and the status, never payloads
 * or credentials.
 */
import { PubSub, type ClientConfig } from '@google-cloud/pubsub';
import { ConfigError, TransportError, type TransportErrorKind } from '../../core/errors.ts';
import type { ResolvedPubSubConnection } from './pubsub-transport-options.ts';
import { thrownText } from '../../core/error-text.ts';

/** gRPC status codes Pub/Sub answers with. */
export const GRPC = { CANCELLED: 1, UNKNOWN: 2, INVALID_ARGUMENT: 3, DEADLINE_EXCEEDED: 4, NOT_FOUND: 5, ALREADY_EXISTS: 6, PERMISSION_DENIED: 7, RESOURCE_EXHAUSTED: 8, FAILED_PRECONDITION: 9, ABORTED: 10, OUT_OF_RANGE: 11, UNIMPLEMENTED: 12, INTERNAL: 13, UNAVAILABLE: 14, UNAUTHENTICATED: 16 } as const;

const KINDS: Readonly<Record<number, { readonly kind: TransportErrorKind; readonly why: string }>> = {
  [GRPC.INVALID_ARGUMENT]: { kind: 'permanent', why: 'Pub/Sub refused the message (too large, or an attribute over its limits)' },
  [GRPC.NOT_FOUND]: { kind: 'permanent', why: 'the topic does not exist (unroutable); create it, or map the destination to another topic in topics' },
  [GRPC.FAILED_PRECONDITION]: { kind: 'permanent', why: 'Pub/Sub refused the message in the topic\'s current state (a schema mismatch?)' },
  [GRPC.OUT_OF_RANGE]: { kind: 'permanent', why: 'Pub/Sub refused the message as out of range' },
  // Credentials concern every event of the destination: the relay pauses it, nothing parks.
  [GRPC.PERMISSION_DENIED]: { kind: 'destination-down', why: 'the credentials may not publish to the topic; grant roles/pubsub.publisher on it' },
  [GRPC.UNAUTHENTICATED]: { kind: 'destination-down', why: 'Pub/Sub did not accept the credentials; fix clientConfig (keyFilename, credentials) or Application Default Credentials' },
  [GRPC.RESOURCE_EXHAUSTED]: { kind: 'retriable', why: 'a quota or the flow control limit was reached' },
  // The service did not answer (after the client's own retries): about Pub/Sub or the path to it, never the
  // message (a message Pub/Sub refuses is INVALID_ARGUMENT). The relay pauses the destination; nothing parks.
  [GRPC.UNAVAILABLE]: { kind: 'destination-down', why: 'Pub/Sub is not reachable (down, restarting, or the network to it)' },
  [GRPC.DEADLINE_EXCEEDED]: { kind: 'destination-down', why: 'Pub/Sub did not answer in time' },
};

/** The gRPC status code of an error (its `code`, or a cause's), or null. */
export function grpcCode(err: unknown): number | null {
  for (let e: unknown = err, depth = 0; e !== null && typeof e === 'object' && depth < 6; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'number' && code >= 0 && code <= 16) return code;
  }
  return null;
}

/** One line: the status and the server's text, without the client's stack or request. */
export function errorText(err: unknown): string {
  const message = thrownText(err);
  return message.split('\n')[0]!.slice(0, 300);
}

/** Classifies the failure of one publish to `topic`. Unknown and transient statuses are retriable. */
export function publishFailure(err: unknown, topic: string, destination: string): TransportError {
  const code = grpcCode(err);
  const rule = code === null ? undefined : KINDS[code];
  const head = `publishing to Pub/Sub topic ${topic} (destination ${destination})`;
  if (rule) return new TransportError(rule.kind, `${head} failed: ${rule.why} (${errorText(err)})`, { cause: err });
  if (/ordering key .* (paused|resumePublishing)|Unable to publish for key/i.test(errorText(err))) {
    return new TransportError('retriable', `${head} failed: an earlier message of the same key failed, so the client held this one back to keep the key's order; it is retried (${errorText(err)})`, { cause: err });
  }
  return new TransportError('retriable', `${head} failed: ${errorText(err)}`, { cause: err });
}

/** What a start-up check throws: a ConfigError naming the setting, or a retriable TransportError for an outage. */
export function startFailure(err: unknown, c: ResolvedPubSubConnection, what: string): Error {
  if (err instanceof ConfigError || err instanceof TransportError) return err;
  const code = grpcCode(err);
  const text = errorText(err);
  if (code === GRPC.PERMISSION_DENIED || code === GRPC.UNAUTHENTICATED) {
    return new ConfigError(c.client ? 'client' : 'clientConfig', `Pub/Sub at ${c.display} refused ${what} (${text}); check the credentials (keyFilename, credentials or Application Default Credentials) and their roles`, { cause: err });
  }
  if (code === GRPC.UNAVAILABLE || code === GRPC.DEADLINE_EXCEEDED || code === null) {
    return new ConfigError(c.addressField, `cannot reach Pub/Sub at ${c.display} for ${what} (${text}); check ${c.addressField}${c.emulatorHost ? ' and that the emulator runs (scripts/pubsub/up.sh)' : ''}`, { cause: err });
  }
  return new TransportError('retriable', `${what} at ${c.display} failed: ${text}`, { cause: err });
}

/** Runs an administrative call with the connection's timeout; a timeout is an unreachable address. */
export async function withinConnectTimeout<T>(c: ResolvedPubSubConnection, what: string, call: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    // The cause's ETIMEDOUT marks an outage (core/broker-outage.ts): a transport starts anyway, a consumer retries.
    const silence = Object.assign(new Error(`no answer within ${c.connectTimeoutMs} ms`), { code: 'ETIMEDOUT' });
    timer = setTimeout(() => reject(new ConfigError(c.addressField, `Pub/Sub at ${c.display} did not answer ${what} within ${c.connectTimeoutMs} ms (connectTimeoutMs); check ${c.addressField}${c.emulatorHost ? ' and that the emulator runs (scripts/pubsub/up.sh)' : ''}`, { cause: silence })), c.connectTimeoutMs);
  });
  try {
    return await Promise.race([call, timeout]);
  } catch (err) {
    throw startFailure(err, c, what);
  } finally {
    clearTimeout(timer);
  }
}

/** The client the settings describe (the given one, or a new one the caller closes). */
export function clientOf(c: ResolvedPubSubConnection): { readonly client: PubSub; readonly owned: boolean } {
  if (c.client) return { client: c.client, owned: false };
  const config: ClientConfig = { ...c.clientConfig, projectId: c.projectId! };
  if (c.emulatorHost !== null) {
    const at = c.emulatorHost.lastIndexOf(':');
    Object.assign(config, { apiEndpoint: c.emulatorHost, servicePath: c.emulatorHost.slice(0, at).replace(/^\[|\]$/g, ''), port: Number(c.emulatorHost.slice(at + 1)), emulatorMode: true });
    // Set, so that the client does not ask the GCE metadata server for it (a warning and a delay off Google Cloud).
    (config as { universeDomain?: string }).universeDomain ??= 'googleapis.com';
  }
  return { client: new PubSub(config), owned: true };
}
