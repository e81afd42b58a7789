#!/usr/bin/env bash
# Start (or reuse) Google's Pub/Sub emulator on 127.0.0.1:8085 for tests/CI.
#
#   scripts/pubsub/up.sh     # idempotent; prints one status line; exit 0 when ready
#
# The emulator comes with the google-cloud-cli (package
# google-cloud-cli-pubsub-emulator). Tests find it through
# PUBSUB_EMULATOR_HOST=127.0.0.1:8085. It keeps topics and subscriptions in
# memory until it stops: tests use names of their own.
# Knobs: TXBOX_PUBSUB_PORT (8085), TXBOX_PUBSUB_HOME (~/.cache/txbox-pubsub),
# TXBOX_PUBSUB_EMULATOR (the launcher), TXBOX_PUBSUB_START_TIMEOUT (60 s).
set -euo pipefail
NAME=pubsub
PORT="${TXBOX_PUBSUB_PORT:-8085}"
HOME_DIR="${TXBOX_PUBSUB_HOME:-$HOME/.cache/txbox-pubsub}"
EMULATOR="${TXBOX_PUBSUB_EMULATOR:-/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator}"
EMULATOR_ARGS=()
START_TIMEOUT="${TXBOX_PUBSUB_START_TIMEOUT:-60}"
ENV_VAR=PUBSUB_EMULATOR_HOST
PORT_KNOB=TXBOX_PUBSUB_PORT
INSTALL_PACKAGE=google-cloud-cli-pubsub-emulator
source "$(dirname "$0")/../lib/emulator.sh"
answers() { curl -s -m 2 -o /dev/null -w '%{http_code}' "http://$HOST:$PORT/v1/projects/txbox-probe/topics" 2>/dev/null | grep -q '^200$'; }
emulator_up
