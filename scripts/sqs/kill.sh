#!/usr/bin/env bash
# Fault injection: SIGKILL the ElasticMQ started by up.sh on $TXBOX_SQS_PORT, no clean shutdown.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
srv_kill
