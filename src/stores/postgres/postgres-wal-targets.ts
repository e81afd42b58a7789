/**
 * The WAL wake mode's bookkeeping for claims by seq (migration 008): which
 * announced rows a lane may claim by seq, and when it must run the ordinary
 * claim instead.
 *
 * A bucket is *seen* when this relay's last ordinary claim over it came back
 * short of its limit (it returned every row it could claim then) and nothing
 * has happened since that could make rows claimable without the WAL stream
 * announcing them. While every bucket of a lane is seen, its claims ask only
 * for the rows commits announced; with none announced, the claim returns
 * nothing without a query. The database still decides every row
 * (`<table>_claim_seqs` returns only rows the ordinary claim would return,
 * never one with an earlier open row of its key left out): this class only
 * decides which query runs, and falls back to the ordinary claim whenever it
 * cannot be sure nothing else is waiting:
 *
 * - a bucket newly leased, or leased under a new token;
 * - a lane's wait that ended by its timeout (the poll), and at least once a
 *   second (`fullClaimEveryMs`, the store's `walFullClaimEveryMs`) under a steady stream of commits: rows an
 *   operator retried, or whose backoff ran out, are not announced;
 * - when a retry or deferral this relay recorded becomes due;
 * - rows released from a hold, or a row a claim by seq asked for twice and did
 *   not get (blocked, or already published; asked twice because the stream
 *   can announce a commit a moment before it is visible);
 * - the stream (re)starting or falling back, a commit whose rows could not be
 *   read, too many rows announced for one bucket.
 */

/** Announced seqs kept per bucket; more means a backlog the ordinary claim serves better. */
const MAX_TARGETS_PER_BUCKET = 1000;
/**
 * Seqs claimed before their commit was announced, remembered so that the
 * announcement asks nothing; past this many the oldest are dropped (rows the
 * stream never announces, committed before it started, would fill it). A
 * recent one must stay: its batch may still be in flight, its row pending, and
 * a claim by seq would return it again.
 */
const MAX_RECENTLY_CLAIMED = 8192;
/** Retry and deferral times kept (1 ms apart at least); past this many the latest are left to the poll and `fullClaimEveryMs`. */
const MAX_DUE = 4096;
/**
 * Claims by seq that may miss an announced row before it is given up to the
 * ordinary claims (the poll, `fullClaimEveryMs`). The stream announces a commit
 * once its record is flushed; the committing backend becomes visible to new
 * snapshots after that: a moment later, or after the standby answered under
 * synchronous replication. After each miss the row is looked for again after
 * 1, 2, 4, ... 512 ms (about 1 s in all) without waiting for a wake-up.
 */
const MAX_MISSES = 10;

type Lease = { readonly bucket: number; readonly token: string };
type Row = { readonly seq: number; readonly bucket: number };

/** `seqs`: in seq order, each with its bucket. */
export type ClaimPlan = { readonly kind: 'full' } | { readonly kind: 'none' } | { readonly kind: 'seqs'; readonly seqs: number[]; readonly buckets: number[] };

export class WalClaimTargets {
  /** Per bucket: 1 when seen (see above). */
  readonly #seen = new Uint8Array(256);
  /** Per bucket: when its last ordinary claim ran (performance.now()). */
  readonly #fullAt = new Float64Array(256);
  /** Per bucket: the lease token its last claim ran under. */
  readonly #tokens: (string | undefined)[] = new Array<string | undefined>(256);
  /** Per bucket: seqs announced and not yet asked for. */
  readonly #targets: (number[] | undefined)[] = new Array<number[] | undefined>(256);
  /** Seqs some claim returned that no announcement has named yet. */
  readonly #claimed = new Set<number>();
  /** Seqs a claim by seq asked for and did not get, with how many times. */
  readonly #missed = new Map<number, number>();
  /** Per bucket: when a missed seq is to be asked for again (performance.now(); Infinity: none). */
  readonly #lookAt = new Float64Array(256).fill(Number.POSITIVE_INFINITY);
  /** When the retries and deferrals this relay recorded are due (performance.now()), ascending. */
  readonly #due: number[] = [];

  /** `fullClaimEveryMs`: the longest a lane claims by seq only, under a steady stream of commits, before its ordinary claim runs again. */
  constructor(private readonly fullClaimEveryMs: number) {}

  /** A commit inserted rows with these seqs in these buckets (same order); null seqs: not readable. */
  announce(buckets: readonly number[], seqs: readonly number[] | null): void {
    if (seqs === null || seqs.length !== buckets.length) {
      this.forget(buckets);
      return;
    }
    for (let i = 0; i < buckets.length; i++) {
      const seq = seqs[i]!;
      if (this.#claimed.delete(seq)) continue;
      const b = buckets[i]!;
      const list = (this.#targets[b] ??= []);
      if (list.length >= MAX_TARGETS_PER_BUCKET) {
        this.forget([b]);
        continue;
      }
      list.push(seq);
    }
  }

  /** These buckets need the ordinary claim before claims by seq again. */
  forget(buckets: readonly number[]): void {
    for (const b of buckets) {
      this.#seen[b] = 0;
      this.#targets[b] = undefined;
      this.#lookAt[b] = Number.POSITIVE_INFINITY;
    }
  }

  /** Every bucket needs the ordinary claim: the stream (re)started or fell back, or rows were released. */
  forgetAll(): void {
    this.#seen.fill(0);
    this.#targets.fill(undefined);
    this.#claimed.clear();
    this.#missed.clear();
    this.#lookAt.fill(Number.POSITIVE_INFINITY);
  }

  /** A retry or deferral this relay recorded becomes claimable at `at` (performance.now()). */
  dueAt(at: number): void {
    const due = this.#due;
    let lo = 0;
    let hi = due.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (due[mid]! < at) lo = mid + 1;
      else hi = mid;
    }
    // One wake-up serves every time within a millisecond after it.
    if (lo > 0 && at - due[lo - 1]! < 1) return;
    if (lo < due.length && due[lo]! - at < 1) {
      due[lo] = at;
      return;
    }
    if (lo >= MAX_DUE) return;
    due.splice(lo, 0, at);
    if (due.length > MAX_DUE) due.pop();
  }

  /** How long until the earliest retry or deferral this relay recorded is due, from `now` (Infinity: none). */
  dueInMs(now: number): number {
    return this.#due.length === 0 ? Number.POSITIVE_INFINITY : Math.max(0, this.#due[0]! - now);
  }

  /** How long until a row these buckets' claims missed is to be asked for again, from `now` (Infinity: none). */
  lookInMs(buckets: readonly number[], now: number): number {
    let at = Number.POSITIVE_INFINITY;
    for (const b of buckets) at = Math.min(at, this.#lookAt[b]!);
    return Math.max(0, at - now);
  }

  /**
   * Which claim a lane with these leases runs now. A claim by seq takes its
   * seqs out of the announced ones: give them back with `afterSeqs`, or, if
   * the claim failed, `forget` the lane's buckets.
   */
  plan(leases: readonly Lease[], now: number): ClaimPlan {
    if (this.#due.length > 0 && now >= this.#due[0]!) {
      let n = 1;
      while (n < this.#due.length && this.#due[n]! <= now) n++;
      this.#due.splice(0, n);
      this.#seen.fill(0);
    }
    for (const l of leases) {
      const b = l.bucket;
      if (this.#seen[b] === 0 || this.#tokens[b] !== l.token || now - this.#fullAt[b]! >= this.fullClaimEveryMs) return { kind: 'full' };
    }
    let asked: [seq: number, bucket: number][] | undefined;
    for (const l of leases) {
      const list = this.#targets[l.bucket];
      if (list === undefined) continue;
      this.#targets[l.bucket] = undefined;
      this.#lookAt[l.bucket] = Number.POSITIVE_INFINITY;
      if (list.length === 0) continue; // emptied by an ordinary claim that returned its rows
      asked ??= [];
      for (const seq of list) asked.push([seq, l.bucket]);
    }
    if (asked === undefined) return { kind: 'none' };
    if (asked.length > 1) asked.sort((a, b) => a[0] - b[0]);
    return { kind: 'seqs', seqs: asked.map((a) => a[0]), buckets: asked.map((a) => a[1]) };
  }

  /** The ordinary claim over these leases returned `rows` (of at most `limit`); it started at `at`. */
  afterFull(leases: readonly Lease[], rows: readonly Row[], limit: number, at: number): void {
    const complete = rows.length < limit;
    for (const l of leases) {
      this.#seen[l.bucket] = complete ? 1 : 0;
      this.#tokens[l.bucket] = l.token;
      this.#fullAt[l.bucket] = at;
    }
    // The oldest go first (a Set iterates in insertion order).
    let excess = this.#claimed.size + rows.length - MAX_RECENTLY_CLAIMED;
    if (excess > 0) {
      for (const seq of this.#claimed) {
        if (excess-- <= 0) break;
        this.#claimed.delete(seq);
      }
    }
    for (const r of rows) {
      // Announced already: asking for it again would only find it done. Else its announcement is still to come.
      const list = this.#targets[r.bucket];
      const i = list === undefined ? -1 : list.indexOf(r.seq);
      if (i >= 0) list!.splice(i, 1);
      else this.#claimed.add(r.seq);
    }
  }

  /**
   * The claim by seq of `plan`, started at `now`, returned `rows`. A row asked
   * for and not returned is not visible yet (the stream can announce a commit
   * before it is), blocked, or already done. It stays announced: asked for
   * again by the lane's next claim, at the latest 1, 2, 4, ... ms after each
   * miss (`lookInMs`), until MAX_MISSES, then given up to the ordinary claims. At its second miss the
   * lane's ordinary claim runs next, in case an unannounced row holds it back.
   * Rows past a full batch stay announced. Returns true when the lane's next
   * claim must be the ordinary one.
   */
  afterSeqs(
    leases: readonly Lease[],
    plan: { readonly seqs: readonly number[]; readonly buckets: readonly number[] },
    rows: readonly Row[],
    limit: number,
    now: number,
  ): boolean {
    if (rows.length === plan.seqs.length) {
      if (this.#missed.size > 0) for (const r of rows) this.#missed.delete(r.seq);
      return false;
    }
    const returned = new Set(rows.map((r) => r.seq));
    const last = rows.length === limit ? rows[rows.length - 1]!.seq : Number.POSITIVE_INFINITY;
    const back: [seq: number, bucket: number][] = [];
    let ordinaryNext = false;
    for (let i = 0; i < plan.seqs.length; i++) {
      const seq = plan.seqs[i]!;
      if (returned.has(seq)) {
        this.#missed.delete(seq);
        continue;
      }
      const b = plan.buckets[i]!;
      if (seq > last) {
        back.push([seq, b]); // not reached
        continue;
      }
      const misses = (this.#missed.get(seq) ?? 0) + 1;
      if (misses > MAX_MISSES) {
        this.#missed.delete(seq); // blocked, or done: the ordinary claims decide it from now on
        continue;
      }
      if (!this.#missed.has(seq) && this.#missed.size >= MAX_RECENTLY_CLAIMED) this.#missed.clear();
      this.#missed.set(seq, misses);
      back.push([seq, b]);
      if (misses === 2) ordinaryNext = true;
      // Looked for again after 1, 2, 4, ... 512 ms, whatever woke the claim that missed it.
      this.#lookAt[b] = Math.min(this.#lookAt[b]!, now + 2 ** (misses - 1));
    }
    // Given back before what was announced meanwhile (still in seq order within a bucket, as asked).
    for (let i = back.length - 1; i >= 0; i--) {
      const [seq, b] = back[i]!;
      (this.#targets[b] ??= []).unshift(seq);
    }
    // The ordinary claim next, the announced rows kept: it returns what it can, and afterFull takes those out.
    if (ordinaryNext) for (const l of leases) this.#seen[l.bucket] = 0;
    return ordinaryNext;
  }
}
