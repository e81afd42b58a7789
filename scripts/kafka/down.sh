#!/usr/bin/env bash
# Gracefully stop the broker started by up.sh (SIGTERM, wait, SIGKILL as last resort).
# Never touches a broker it did not start (e.g. a reused external one).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
STOP_TIMEOUT="${TXBOX_KAFKA_STOP_TIMEOUT:-60}"

mkdir -p "$KAFKA_INSTANCE"
exec 9>"$KAFKA_INSTANCE/.lock"
flock -w $((STOP_TIMEOUT + 30)) 9 || true

if ! pid="$(kafka_find_pid)"; then
  rm -f "$KAFKA_PIDFILE"
  echo "kafka: not running (nothing of ours on $KAFKA_HOST:$KAFKA_PORT)"
  exit 0
fi
t0=$SECONDS
kill -TERM "$pid" 2>/dev/null || true
deadline=$((SECONDS + STOP_TIMEOUT))
while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do sleep 0.2; done
if kill -0 "$pid" 2>/dev/null; then
  kafka_log "pid $pid still alive after ${STOP_TIMEOUT}s; sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  rm -f "$KAFKA_PIDFILE"
  echo "kafka: killed (pid $pid) after graceful stop timed out"
  exit 0
fi
rm -f "$KAFKA_PIDFILE"
echo "kafka: stopped (pid $pid) in $((SECONDS - t0))s"
