import type { EventHeaders } from './envelope.ts';
import type { StandardSchemaV1 } from './standard-schema.ts';

declare const payloadBrand: unique symbol;

/** A type-only marker that gives an event definition its payload type. See `defineEvent`. */
export interface PayloadType<T> {
  readonly [payloadBrand]?: T;
}

/** Declares the payload type of an event defined without a runtime schema. */
export function payloadType<T>(): PayloadType<T> {
  return {};
}

/** What a caller passes to create one event. */
export interface EventInput<TPayload> {
  /** Id of the aggregate that changed (e.g. the order id). */
  readonly aggregateId: string | number;
  readonly payload: TPayload;
  /** Per-aggregate version, increasing; lets consumers guard projections. */
  readonly version?: number;
  readonly headers?: EventHeaders;
  /** Ordering key; default `aggregateType:aggregateId`. */
  readonly key?: string;
  /** Event id; default a fresh UUIDv7. Give one only to make an enqueue idempotent. */
  readonly id?: string;
  /** Default: now. */
  readonly occurredAt?: Date;
}

/** An event ready for `enqueue`: made by an event definition, or written out by hand. */
export interface NewEvent<TPayload = unknown, TType extends string = string> extends EventInput<TPayload> {
  readonly type: TType;
  readonly aggregateType: string;
  readonly destination: string;
  /** Validator that `enqueue` runs before storing; set by definitions with a schema. */
  readonly schema?: StandardSchemaV1 | undefined;
}

/** A typed event, defined once. Call it to create events for `enqueue`. */
export interface EventDefinition<TType extends string = string, TInput = unknown, TOutput = TInput> {
  (input: EventInput<TInput>): NewEvent<TInput, TType>;
  readonly type: TType;
  readonly aggregateType: string;
  readonly destination: string;
  readonly schema: StandardSchemaV1<TInput, TOutput> | undefined;
  /** Narrows a received event to this definition's type. */
  is(event: { readonly type: string }): event is { readonly type: TType; readonly payload: TOutput };
}

interface DefinitionOptions<TType extends string> {
  /** Event type name, e.g. `OrderCreated`. */
  readonly type: TType;
  /** What kind of aggregate changed, e.g. `Order`. */
  readonly aggregateType: string;
  /** Topic, exchange, subject, stream or webhook name the relay publishes to. */
  readonly destination: string;
}

/**
 * Defines an event type once; payload types are inferred at `enqueue`.
 *
 * @example
 * // With any Standard Schema validator (zod, valibot, arktype...): validated at enqueue.
 * const OrderCreated = defineEvent({ type: 'OrderCreated', aggregateType: 'Order', destination: 'orders',
 *   schema: z.object({ orderId: z.string(), total: z.number() }) });
 * // Types only:
 * const OrderPaid = defineEvent({ type: 'OrderPaid', aggregateType: 'Order', destination: 'orders',
 *   payload: payloadType<{ orderId: string; amount: number }>() });
 * await outbox.enqueue(tx, OrderPaid({ aggregateId: order.id, payload: { orderId: order.id, amount: 10 } }));
 */
export function defineEvent<TType extends string, TSchema extends StandardSchemaV1>(
  options: DefinitionOptions<TType> & { readonly schema: TSchema },
): EventDefinition<TType, StandardSchemaV1.InferInput<TSchema>, StandardSchemaV1.InferOutput<TSchema>>;
export function defineEvent<TType extends string, TPayload>(
  options: DefinitionOptions<TType> & { readonly payload: PayloadType<TPayload> },
): EventDefinition<TType, TPayload>;
export function defineEvent(
  options: DefinitionOptions<string> & { readonly schema?: StandardSchemaV1; readonly payload?: unknown },
): EventDefinition<string, unknown> {
  for (const field of ['type', 'aggregateType', 'destination'] as const) {
    const value: unknown = options[field];
    if (typeof value !== 'string' || value.length === 0 || value.length > 200) {
      throw new TypeError(`defineEvent: ${field} must be a non-empty string of at most 200 characters`);
    }
  }
  const { type, aggregateType, destination } = options;
  const schema = options.schema;
  if (schema !== undefined && typeof schema['~standard']?.validate !== 'function') {
    throw new TypeError('defineEvent: schema must implement Standard Schema (a `~standard.validate` function)');
  }
  const create = (input: EventInput<unknown>): NewEvent<unknown, string> => ({
    ...input,
    type,
    aggregateType,
    destination,
    schema,
  });
  return Object.assign(create, {
    type,
    aggregateType,
    destination,
    schema,
    is: (event: { readonly type: string }): event is { type: string; payload: unknown } => event.type === type,
  });
}
