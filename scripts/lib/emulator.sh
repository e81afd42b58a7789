# Start and stop one of Google's emulators (the google-cloud-cli's launchers),
# shared by scripts/pubsub and scripts/firestore. The caller sets:
#   NAME (log prefix), PORT, HOME_DIR, EMULATOR (the launcher), EMULATOR_ARGS
#   (an array, before --host/--port), START_TIMEOUT, ENV_VAR (what tests export),
#   PORT_KNOB (the variable that picks another port), INSTALL_PACKAGE,
# and defines answers() (true when the emulator answers on $HOST:$PORT).
HOST=127.0.0.1

# Idempotent: reuses an emulator that answers, waits for one starting, or starts one; one status line.
emulator_up() {
  local pidfile="$HOME_DIR/emulator-$PORT.pid" log="$HOME_DIR/emulator-$PORT.log" t0=$SECONDS pid action deadline
  [[ -x "$EMULATOR" ]] || { echo "$NAME: the emulator is not installed ($EMULATOR); install $INSTALL_PACKAGE" >&2; exit 1; }
  mkdir -p "$HOME_DIR"
  exec 9>"$HOME_DIR/.lock-$PORT"
  flock -w $((START_TIMEOUT + 30)) 9 || { echo "$NAME: could not get $HOME_DIR/.lock-$PORT" >&2; exit 1; }
  if answers; then
    echo "$NAME: reusing the emulator already answering on $HOST:$PORT; export $ENV_VAR=$HOST:$PORT"
    return 0
  fi
  pid="$(cat "$pidfile" 2>/dev/null || true)"
  if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then pid=""; rm -f "$pidfile"; fi
  if [[ -z "$pid" ]]; then
    if (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; then
      echo "$NAME: $HOST:$PORT is in use by something that does not answer as the emulator; not starting (choose another with $PORT_KNOB)" >&2
      exit 1
    fi
    setsid nohup "$EMULATOR" "${EMULATOR_ARGS[@]}" --host="$HOST" --port="$PORT" >"$log" 2>&1 </dev/null 9>&- &
    pid=$!
    echo "$pid" >"$pidfile"
    action=started
  else
    action="waited for starting"
  fi
  deadline=$((SECONDS + START_TIMEOUT))
  until answers; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$pidfile"; echo "$NAME: the emulator (pid $pid) exited during startup; tail of $log:" >&2; tail -n 40 "$log" >&2; exit 1
    fi
    if (( SECONDS >= deadline )); then echo "$NAME: the emulator (pid $pid) not ready after ${START_TIMEOUT}s; see $log" >&2; exit 1; fi
    sleep 0.5
  done
  echo "$NAME: $action the emulator on $HOST:$PORT (pid $pid) in $((SECONDS - t0))s; export $ENV_VAR=$HOST:$PORT; log $log"
}

# Stops the emulator emulator_up started (its whole process group). Idempotent.
emulator_down() {
  local pidfile="$HOME_DIR/emulator-$PORT.pid" pid
  pid="$(cat "$pidfile" 2>/dev/null || true)"
  if [[ -z "$pid" ]] || ! kill -0 "$pid" 2>/dev/null; then
    rm -f "$pidfile"; echo "$NAME: no emulator of ours on port $PORT"; return 0
  fi
  # setsid made the launcher a group leader: the Java child goes with it.
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  kill -0 "$pid" 2>/dev/null && kill -KILL -- "-$pid" 2>/dev/null || true
  rm -f "$pidfile"
  echo "$NAME: stopped the emulator on port $PORT (pid $pid)"
}
