#!/usr/bin/env bash
# Start (or reuse) Google's Firestore emulator on 127.0.0.1:8086 for tests/CI.
#
#   scripts/firestore/up.sh     # idempotent; prints one status line; exit 0 when ready
#
# The emulator comes with the google-cloud-cli (package
# google-cloud-cli-firestore-emulator). Tests find it through
# FIRESTORE_EMULATOR_HOST=127.0.0.1:8086. It keeps documents in memory until it
# stops: each test file uses a project id of its own.
# Knobs: TXBOX_FIRESTORE_PORT (8086), TXBOX_FIRESTORE_HOME (~/.cache/txbox-firestore),
# TXBOX_FIRESTORE_EMULATOR (the launcher), TXBOX_FIRESTORE_START_TIMEOUT (60 s).
set -euo pipefail
NAME=firestore
PORT="${TXBOX_FIRESTORE_PORT:-8086}"
HOME_DIR="${TXBOX_FIRESTORE_HOME:-$HOME/.cache/txbox-firestore}"
EMULATOR="${TXBOX_FIRESTORE_EMULATOR:-/usr/lib/google-cloud-sdk/platform/cloud-firestore-emulator/cloud_firestore_emulator}"
EMULATOR_ARGS=(start)
START_TIMEOUT="${TXBOX_FIRESTORE_START_TIMEOUT:-60}"
ENV_VAR=FIRESTORE_EMULATOR_HOST
PORT_KNOB=TXBOX_FIRESTORE_PORT
INSTALL_PACKAGE=google-cloud-cli-firestore-emulator
source "$(dirname "$0")/../lib/emulator.sh"
# The emulator answers GET / with "Ok".
answers() { curl -s -m 2 "http://$HOST:$PORT/" 2>/dev/null | grep -q '^Ok'; }
emulator_up
