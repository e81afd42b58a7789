/**
 * Checks a delivery log against what was committed: every committed event
 * arrived (lost = 0), nothing uncommitted arrived (phantom = 0), and each
 * key's events arrived in commit order. Duplicates (at-least-once) are
 * counted, and a re-delivery of an earlier event is not an order violation.
 */
export interface DeliveryReport {
  readonly committed: number;
  readonly delivered: number;
  readonly lost: number;
  readonly phantom: number;
  readonly duplicates: number;
  readonly orderViolations: number;
}

export interface Delivered {
  readonly id: string;
  readonly key: string;
}

/** `committed`: key -> event ids in commit order. `log`: deliveries in arrival order. */
export function checkDeliveries(committed: ReadonlyMap<string, readonly string[]>, log: readonly Delivered[]): DeliveryReport {
  const position = new Map<string, number>();
  let committedCount = 0;
  for (const ids of committed.values()) {
    ids.forEach((id, i) => position.set(id, i));
    committedCount += ids.length;
  }
  const seen = new Set<string>();
  const highest = new Map<string, number>();
  let phantom = 0;
  let duplicates = 0;
  let orderViolations = 0;
  for (const d of log) {
    const pos = position.get(d.id);
    if (pos === undefined) {
      phantom++;
      continue;
    }
    if (seen.has(d.id)) {
      duplicates++;
      continue;
    }
    seen.add(d.id);
    // First delivery of an event must come right after the first delivery of its predecessor.
    const prev = highest.get(d.key) ?? -1;
    if (pos !== prev + 1) orderViolations++;
    highest.set(d.key, Math.max(prev, pos));
  }
  return { committed: committedCount, delivered: seen.size, lost: committedCount - seen.size, phantom, duplicates, orderViolations };
}
