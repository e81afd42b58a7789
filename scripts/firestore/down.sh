#!/usr/bin/env bash
# Stop the Firestore emulator that scripts/firestore/up.sh started (its whole process group). Idempotent.
set -euo pipefail
NAME=firestore
PORT="${TXBOX_FIRESTORE_PORT:-8086}"
HOME_DIR="${TXBOX_FIRESTORE_HOME:-$HOME/.cache/txbox-firestore}"
source "$(dirname "$0")/../lib/emulator.sh"
emulator_down
