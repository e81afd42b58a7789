/**
 * What `txbox torture` prints for a per-key order violation, so that one
 * seen once can be diagnosed afterwards: the key and its bucket (the key's
 * hash), both events' outbox rows (seq, version, attempts, times), every
 * arrival of each (wall-clock time and, over HTTP, the relay that sent it),
 * and the bucket's lease history around them (owner and fencing token, from
 * a poll of the lease table every 100 ms during the run).
 */
import type { PostgresConnection } from '../../stores/postgres/postgres-connection.ts';
import type { Arrival } from '../demo/demo-sink.ts';

/** One change of a bucket's lease: who held it from `at` (Date.now() clock), under which token. */
interface LeaseChange {
  readonly at: number;
  readonly owner: string | null;
  readonly token: string;
}

/** Polls the lease table during a run and keeps each bucket's owner and token changes. */
export class LeaseHistory {
  readonly #changes = new Map<number, LeaseChange[]>();
  #timer: NodeJS.Timeout | undefined;
  #polling = false;

  constructor(
    private readonly db: PostgresConnection,
    private readonly schema: string,
  ) {}

  start(everyMs = 100): void {
    this.#timer = setInterval(() => void this.#poll(), everyMs);
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
  }

  /** The bucket's changes from `from` to `to` (Date.now() clock), and the one in force at `from`. */
  around(bucket: number, from: number, to: number): readonly LeaseChange[] {
    const all = this.#changes.get(bucket) ?? [];
    const before = all.filter((c) => c.at < from).at(-1);
    return [...(before ? [before] : []), ...all.filter((c) => c.at >= from && c.at <= to)];
  }

  async #poll(): Promise<void> {
    if (this.#polling) return;
    this.#polling = true;
    try {
      const at = Date.now();
      const { rows } = await this.db.query<{ bucket: number; owner: string | null; token: string }>(`SELECT bucket, owner, token::text AS token FROM "${this.schema}".outbox_buckets`);
      for (const r of rows) {
        const list = this.#changes.get(Number(r.bucket)) ?? [];
        const last = list.at(-1);
        if (!last || last.owner !== r.owner || last.token !== r.token) list.push({ at, owner: r.owner, token: r.token });
        this.#changes.set(Number(r.bucket), list);
      }
    } catch {
      // A lost poll only thins the history.
    } finally {
      this.#polling = false;
    }
  }
}

export interface OrderViolationSample {
  readonly key: string;
  /** The event whose first arrival came too early. */
  readonly got: string;
  /** The earlier event of the key not yet delivered at that point. */
  readonly expected: string | undefined;
  /** The index of the early arrival in the observer's log. */
  readonly index: number;
}

/** The first few arrivals that broke their key's order (first deliveries only). */
export function orderViolationSamples(committed: ReadonlyMap<string, readonly string[]>, arrivals: readonly Arrival[], max = 5): OrderViolationSample[] {
  const position = new Map<string, number>();
  for (const ids of committed.values()) ids.forEach((id, i) => position.set(id, i));
  const seen = new Set<string>();
  const next = new Map<string, number>();
  const out: OrderViolationSample[] = [];
  arrivals.forEach((a, index) => {
    const pos = position.get(a.id);
    if (pos === undefined || seen.has(a.id)) return;
    seen.add(a.id);
    const want = next.get(a.key) ?? 0;
    if (pos !== want && out.length < max) out.push({ key: a.key, got: a.id, expected: committed.get(a.key)?.[want], index });
    next.set(a.key, Math.max(want, pos + 1));
  });
  return out;
}

const wall = (at: number): number => performance.timeOrigin + at;
const iso = (ms: number): string => new Date(ms).toISOString();

/** Several lines per sample: the key and bucket, both rows, their arrivals, the bucket's lease history. */
export async function describeViolations(db: PostgresConnection, schema: string, samples: readonly OrderViolationSample[], arrivals: readonly Arrival[], leases: LeaseHistory | undefined): Promise<string[]> {
  const lines: string[] = [];
  for (const v of samples) {
    const ids = [v.got, v.expected].filter((x): x is string => x !== undefined);
    const { rows } = await db.query<{ id: string; seq: string; version: string; bucket: number; attempts: number; created_at: Date; done_at: Date | null }>(
      `SELECT id, seq, version, bucket, attempts, created_at, done_at FROM "${schema}".outbox WHERE id = ANY($1::uuid[])`,
      [ids],
    );
    const row = (id: string | undefined): string => {
      const r = rows.find((x) => x.id === id);
      return r ? `${id} (seq ${r.seq}, version ${r.version}, attempts ${r.attempts}, created ${r.created_at.toISOString()}, published ${r.done_at?.toISOString() ?? '-'})` : `${id ?? '?'} (no outbox row)`;
    };
    const bucket = rows[0]?.bucket;
    lines.push(`key ${v.key} (bucket ${bucket ?? '?'}): arrival #${v.index} was ${row(v.got)} before any delivery of ${row(v.expected)}`);
    let from = Infinity;
    let to = -Infinity;
    for (const id of ids) {
      const of = arrivals.flatMap((a, i) => (a.id === id ? [{ a, i }] : []));
      const shown = of.slice(0, 6).map(({ a, i }) => `#${i} ${iso(wall(a.at))}${a.from ? ` from ${a.from}` : ''}`);
      for (const { a } of of) {
        from = Math.min(from, wall(a.at));
        to = Math.max(to, wall(a.at));
      }
      lines.push(`    arrivals of ${id.slice(0, 8)}…: ${shown.length > 0 ? shown.join(', ') : 'none'}${of.length > 6 ? ` (+${of.length - 6})` : ''}`);
    }
    if (leases && bucket !== undefined && Number.isFinite(from)) {
      const history = leases.around(Number(bucket), from - 5000, to + 1000).map((c) => `${iso(c.at)} ${c.owner ?? 'nobody'} token ${c.token}`);
      lines.push(`    bucket ${bucket} leases (polled every 100 ms) from 5 s before: ${history.join('; ') || 'no poll'}`);
    }
  }
  return lines;
}
