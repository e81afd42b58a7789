#!/usr/bin/env bash
# Gracefully stop the ElasticMQ started by up.sh (SIGTERM, wait, SIGKILL as last resort).
# Never touches a server it did not start.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
STOP_TIMEOUT="${TXBOX_SQS_STOP_TIMEOUT:-30}"

mkdir -p "$SQS_INSTANCE"
exec 9>"$SQS_INSTANCE/.lock"
flock -w $((STOP_TIMEOUT + 30)) 9 || true
srv_stop "$STOP_TIMEOUT"
