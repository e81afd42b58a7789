#!/usr/bin/env bash
# Fault injection: SIGKILL the broker started by up.sh, no clean shutdown.
# The pid file is deliberately left behind (stale); up.sh copes with that.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

if ! pid="$(kafka_find_pid)"; then
  echo "kafka: not running (nothing of ours on $KAFKA_HOST:$KAFKA_PORT)"
  exit 0
fi
kill -KILL "$pid"
for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
echo "kafka: killed -9 (pid $pid)"
