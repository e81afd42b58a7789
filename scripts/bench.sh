#!/usr/bin/env bash
# Runs every benchmark in sequence and prints a summary of their figures.
# Benchmarks print figures; they assert nothing about timings. See docs/performance.md.
#
#   npm run bench                        # full size (about 17 minutes on 2 busy cores)
#   BENCH_SMOKE=1 npm run bench          # tiny sizes, a quick check that everything runs
#   BENCH_ONLY="drain retention" npm run bench
#   BENCH_ONLY=complete-experiment npm run bench   # not in the default set: an experiment on the relay's complete SQL
#
# Every BENCH_* setting of the benchmarks passes through (BENCH_EVENTS=50000, ...).
# Needs PostgreSQL at BENCH_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test).
set -uo pipefail
cd "$(dirname "$0")/.."

ALL="drain producer retention latency http-drain http-latency claim-outage lease-handover"
ONLY="${BENCH_ONLY:-$ALL}"

if [[ "${BENCH_SMOKE:-0}" == "1" ]]; then
  export BENCH_EVENTS="${BENCH_EVENTS:-5000}"
  export BENCH_TABLE_EVENTS="${BENCH_TABLE_EVENTS:-5000}"
  export BENCH_SECONDS="${BENCH_SECONDS:-2}"
  export BENCH_ROUNDS="${BENCH_ROUNDS:-1}"
  export BENCH_REPEAT="${BENCH_REPEAT:-1}"
  export BENCH_LATENCY_SECONDS="${BENCH_LATENCY_SECONDS:-2}"
  export BENCH_HTTP_SECONDS="${BENCH_HTTP_SECONDS:-2}"
  export BENCH_OUTAGE_EVENTS="${BENCH_OUTAGE_EVENTS:-20000}"
  export BENCH_PARKED_KEYS="${BENCH_PARKED_KEYS:-500}"
  export BENCH_CLAIMS="${BENCH_CLAIMS:-5}"
fi

out="${BENCH_OUT:-$(mktemp -d -t txbox-bench.XXXXXX)}"
mkdir -p "$out"
failed=()
for name in $ONLY; do
  file="bench/${name}.ts"
  if [[ ! -f "$file" ]]; then
    echo "unknown benchmark: $name (have: $ALL)" >&2
    failed+=("$name")
    continue
  fi
  echo "=== $name ($(date -u +%H:%M:%S)) ==="
  if ! node --conditions=txbox-source --import tsx "$file" 2>&1 | tee "$out/$name.log"; then
    failed+=("$name")
  fi
  echo
done

echo "=== summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)) ==="
grep -h '^SUMMARY ' "$out"/*.log 2>/dev/null | sed 's/^SUMMARY //'
echo "logs: $out"
if (( ${#failed[@]} > 0 )); then
  echo "failed: ${failed[*]}" >&2
  exit 1
fi
