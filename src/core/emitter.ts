type Handler<T> = (payload: T) => void;
import { thrownText } from './error-text.ts';

/**
 * A small typed event emitter for lifecycle events. A throwing listener does
 * not break the emitter; its error is reported as a process warning.
 */
export class TypedEmitter<Events extends object> {
  readonly #handlers = new Map<keyof Events, Set<Handler<never>>>();

  /** Subscribes; returns a function that unsubscribes. */
  on<K extends keyof Events>(name: K, handler: Handler<Events[K]>): () => void {
    let set = this.#handlers.get(name);
    if (!set) this.#handlers.set(name, (set = new Set()));
    set.add(handler as Handler<never>);
    return () => set.delete(handler as Handler<never>);
  }

  protected emit<K extends keyof Events>(name: K, payload: Events[K]): void {
    const set = this.#handlers.get(name);
    if (!set) return;
    for (const handler of set) {
      try {
        (handler as Handler<Events[K]>)(payload);
      } catch (err) {
        process.emitWarning(`txbox: a listener for "${String(name)}" threw: ${thrownText(err)}`);
      }
    }
  }
}

/** A TypedEmitter its owner fires events on: the `events` of the consumers. */
export class FiringEmitter<Events extends object> extends TypedEmitter<Events> {
  /** @internal */
  fire<K extends keyof Events>(name: K, payload: Events[K]): void {
    this.emit(name, payload);
  }
}

/** A short, stable hash of an ordering key, for logs that must not show the key itself. */
export function keyHash(key: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    h ^= key.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0).toString(16).padStart(8, '0');
}
