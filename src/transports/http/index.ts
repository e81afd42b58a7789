/**
 * `txbox/http`: the HTTP webhook transport (one signed POST per event, a 2xx
 * answer is the ack), Standard Webhooks signing and verification, and a
 * webhook receiver for the consuming side. The transport sends through
 * undici (a dependency, loaded by the first HttpTransport); the rest uses
 * `node:` modules only. See docs/transports/http.md.
 *
 * @example
 * import { HttpTransport } from 'txbox/http';
 * const transport = new HttpTransport({
 *   endpoints: { orders: 'https://hooks.example.com/orders' },
 *   secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
 * });
 */
export {
  HttpTransport,
  resolveHttpTransportOptions,
  type HttpTransportOptions,
  type HttpTransportTlsOptions,
  type ResolvedHttpEndpoint,
  type ResolvedHttpTransportOptions,
} from './http-transport.ts';
export {
  createWebhookReceiver,
  listenWebhookReceiver,
  WebhookRefusedError,
  WebhookUnavailableError,
  type ListenOptions,
  type ListeningWebhookReceiver,
  type WebhookContext,
  type WebhookReceiver,
  type WebhookReceiverOptions,
} from './http-receiver.ts';
export { parseEnvelope, type ParsedEnvelope } from './http-envelope.ts';
export {
  MIN_WEBHOOK_SECRET_BYTES,
  checkWebhookHeaders,
  generateWebhookSecret,
  signWebhook,
  verifyWebhook,
  webhookKey,
  type VerifyWebhookOptions,
  type WebhookSecret,
  type WebhookVerification,
} from './webhook-signature.ts';
export { createWebhookConsumer, type WebhookConsumerOptions } from './http-consumer.ts';
