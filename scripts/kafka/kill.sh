#!/usr/bin/env bash
# Fault injection: SIGKILL the broker started by up.sh, no clean shutdown.
# The pid file is deliberately left behind (stale); up.sh copes with that.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
srv_kill
