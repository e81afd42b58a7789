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
HOST=127.0.0.1
PORT="${TXBOX_PUBSUB_PORT:-8085}"
HOME_DIR="${TXBOX_PUBSUB_HOME:-$HOME/.cache/txbox-pubsub}"
EMULATOR="${TXBOX_PUBSUB_EMULATOR:-/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator}"
START_TIMEOUT="${TXBOX_PUBSUB_START_TIMEOUT:-60}"
PIDFILE="$HOME_DIR/emulator-$PORT.pid"
LOG="$HOME_DIR/emulator-$PORT.log"
t0=$SECONDS

answers() { curl -s -m 2 -o /dev/null -w '%{http_code}' "http://$HOST:$PORT/v1/projects/txbox-probe/topics" 2>/dev/null | grep -q '^200$'; }

[[ -x "$EMULATOR" ]] || { echo "pubsub: the emulator is not installed ($EMULATOR); install google-cloud-cli-pubsub-emulator" >&2; exit 1; }
mkdir -p "$HOME_DIR"
exec 9>"$HOME_DIR/.lock-$PORT"
flock -w $((START_TIMEOUT + 30)) 9 || { echo "pubsub: could not get $HOME_DIR/.lock-$PORT" >&2; exit 1; }

if answers; then
  echo "pubsub: reusing the emulator already answering on $HOST:$PORT"
  exit 0
fi
pid="$(cat "$PIDFILE" 2>/dev/null || true)"
if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then pid=""; rm -f "$PIDFILE"; fi
if [[ -z "$pid" ]]; then
  if (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; then
    echo "pubsub: $HOST:$PORT is in use by something that does not answer as the emulator; not starting" >&2
    exit 1
  fi
  setsid nohup "$EMULATOR" --host="$HOST" --port="$PORT" >"$LOG" 2>&1 </dev/null 9>&- &
  pid=$!
  echo "$pid" >"$PIDFILE"
  action=started
else
  action="waited for starting"
fi
deadline=$((SECONDS + START_TIMEOUT))
until answers; do
  if ! kill -0 "$pid" 2>/dev/null; then
    rm -f "$PIDFILE"; echo "pubsub: the emulator (pid $pid) exited during startup; tail of $LOG:" >&2; tail -n 40 "$LOG" >&2; exit 1
  fi
  if (( SECONDS >= deadline )); then echo "pubsub: the emulator (pid $pid) not ready after ${START_TIMEOUT}s; see $LOG" >&2; exit 1; fi
  sleep 0.5
done
echo "pubsub: $action the emulator on $HOST:$PORT (pid $pid) in $((SECONDS - t0))s; export PUBSUB_EMULATOR_HOST=$HOST:$PORT; log $LOG"
