#!/usr/bin/env bash
# Stop the Firestore emulator that scripts/firestore/up.sh started (its whole process group). Idempotent.
set -euo pipefail
PORT="${TXBOX_FIRESTORE_PORT:-8086}"
HOME_DIR="${TXBOX_FIRESTORE_HOME:-$HOME/.cache/txbox-firestore}"
PIDFILE="$HOME_DIR/emulator-$PORT.pid"
pid="$(cat "$PIDFILE" 2>/dev/null || true)"
if [[ -z "$pid" ]] || ! kill -0 "$pid" 2>/dev/null; then
  rm -f "$PIDFILE"; echo "firestore: no emulator of ours on port $PORT"; exit 0
fi
# setsid made the launcher a group leader: the Java child goes with it.
kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
kill -0 "$pid" 2>/dev/null && kill -KILL -- "-$pid" 2>/dev/null || true
rm -f "$PIDFILE"
echo "firestore: stopped the emulator on port $PORT (pid $pid)"
