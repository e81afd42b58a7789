#!/usr/bin/env bash
# Stop the Pub/Sub emulator that scripts/pubsub/up.sh started (its whole process group). Idempotent.
set -euo pipefail
NAME=pubsub
PORT="${TXBOX_PUBSUB_PORT:-8085}"
HOME_DIR="${TXBOX_PUBSUB_HOME:-$HOME/.cache/txbox-pubsub}"
source "$(dirname "$0")/../lib/emulator.sh"
emulator_down
