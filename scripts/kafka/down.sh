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
srv_stop "$STOP_TIMEOUT"
