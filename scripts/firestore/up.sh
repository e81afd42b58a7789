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
HOST=127.0.0.1
PORT="${TXBOX_FIRESTORE_PORT:-8086}"
HOME_DIR="${TXBOX_FIRESTORE_HOME:-$HOME/.cache/txbox-firestore}"
EMULATOR="${TXBOX_FIRESTORE_EMULATOR:-/usr/lib/google-cloud-sdk/platform/cloud-firestore-emulator/cloud_firestore_emulator}"
START_TIMEOUT="${TXBOX_FIRESTORE_START_TIMEOUT:-60}"
PIDFILE="$HOME_DIR/emulator-$PORT.pid"
LOG="$HOME_DIR/emulator-$PORT.log"
t0=$SECONDS

# The emulator answers GET / with "Ok".
answers() { curl -s -m 2 "http://$HOST:$PORT/" 2>/dev/null | grep -q '^Ok'; }

[[ -x "$EMULATOR" ]] || { echo "firestore: the emulator is not installed ($EMULATOR); install google-cloud-cli-firestore-emulator" >&2; exit 1; }
mkdir -p "$HOME_DIR"
exec 9>"$HOME_DIR/.lock-$PORT"
flock -w $((START_TIMEOUT + 30)) 9 || { echo "firestore: could not get $HOME_DIR/.lock-$PORT" >&2; exit 1; }

if answers; then
  echo "firestore: reusing the emulator already answering on $HOST:$PORT; export FIRESTORE_EMULATOR_HOST=$HOST:$PORT"
  exit 0
fi
pid="$(cat "$PIDFILE" 2>/dev/null || true)"
if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then pid=""; rm -f "$PIDFILE"; fi
if [[ -z "$pid" ]]; then
  if (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; then
    echo "firestore: $HOST:$PORT is in use by something that does not answer as the emulator; not starting (choose another with TXBOX_FIRESTORE_PORT)" >&2
    exit 1
  fi
  setsid nohup "$EMULATOR" start --host="$HOST" --port="$PORT" >"$LOG" 2>&1 </dev/null 9>&- &
  pid=$!
  echo "$pid" >"$PIDFILE"
  action=started
else
  action="waited for starting"
fi
deadline=$((SECONDS + START_TIMEOUT))
until answers; do
  if ! kill -0 "$pid" 2>/dev/null; then
    rm -f "$PIDFILE"; echo "firestore: the emulator (pid $pid) exited during startup; tail of $LOG:" >&2; tail -n 40 "$LOG" >&2; exit 1
  fi
  if (( SECONDS >= deadline )); then echo "firestore: the emulator (pid $pid) not ready after ${START_TIMEOUT}s; see $LOG" >&2; exit 1; fi
  sleep 0.5
done
echo "firestore: $action the emulator on $HOST:$PORT (pid $pid) in $((SECONDS - t0))s; export FIRESTORE_EMULATOR_HOST=$HOST:$PORT; log $LOG"
