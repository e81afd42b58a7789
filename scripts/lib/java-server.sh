# shellcheck shell=bash
# What scripts/kafka and scripts/sqs share: a Java server fetched from Maven
# Central once, started in the background on 127.0.0.1, found again by its pid
# file or its port, stopped gently or killed. Source only, after setting:
#   SRV_NAME     the name in messages (kafka, sqs)
#   SRV_HOST     SRV_PORT      where it listens
#   SRV_PIDFILE  its pid file
#   SRV_CLASS    its main class, and SRV_CONFIG its config file: both must be
#                on a process's command line for it to count as ours (a server
#                someone else started on the port is never touched)

srv_log() { printf '%s: %s\n' "$SRV_NAME" "$*" >&2; }

# True if something accepts TCP connections on host:port.
srv_port_open() {
  timeout 2 bash -c "exec 3<>/dev/tcp/$SRV_HOST/$SRV_PORT" 2>/dev/null
}

# Is $1 a live JVM running *our* server (main class and config on its command line)?
srv_is_our_pid() {
  local pid="$1" cmd
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [[ -r "/proc/$pid/cmdline" ]] || return 1
  cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
  [[ "$cmd" == *"$SRV_CLASS"* && "$cmd" == *"$SRV_CONFIG"* ]]
}

# Prints the pid of our server, if running: pid file first, then whoever
# listens on our port (in case the pid file was lost).
srv_find_pid() {
  local pid=""
  if [[ -f "$SRV_PIDFILE" ]]; then
    pid="$(tr -dc '0-9' <"$SRV_PIDFILE")"
    if srv_is_our_pid "$pid"; then echo "$pid"; return 0; fi
  fi
  if command -v ss >/dev/null 2>&1; then
    for pid in $(ss -Hltnp "sport = :$SRV_PORT" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u); do
      if srv_is_our_pid "$pid"; then echo "$pid"; return 0; fi
    done
  fi
  return 1
}

# srv_fetch_jars POM LIBS LOGDIR WHAT JAR_GLOB [mvn -D arguments...]
# Copies the dependencies of POM into LIBS with Maven (3 attempts), once: LIBS/.complete marks it done.
srv_fetch_jars() {
  local pom="$1" libs="$2" logdir="$3" what="$4" glob="$5"
  shift 5
  [[ -f "$libs/.complete" ]] && return 0
  command -v mvn >/dev/null || { srv_log "mvn not found (needed once to fetch the $what jars)"; return 1; }
  srv_log "fetching $what jars from Maven Central into $libs ..."
  rm -rf "$libs.tmp"
  local mvn_args=(-q -B -ntp -Dstyle.color=never -f "$pom" "-DoutputDirectory=$libs.tmp" "$@")
  local fetched=0 attempt
  for attempt in 1 2 3; do
    if mvn "${mvn_args[@]}" dependency:copy-dependencies >"$logdir/mvn.log" 2>&1; then
      fetched=1; break
    fi
    srv_log "maven fetch attempt $attempt failed; retrying"; sleep $((attempt * 3))
  done
  if [[ $fetched != 1 ]]; then
    srv_log "could not fetch the $what jars; tail of $logdir/mvn.log:"; tail -n 40 "$logdir/mvn.log" >&2
    return 1
  fi
  # shellcheck disable=SC2086  # the glob is meant to expand
  ls "$libs.tmp"/$glob >/dev/null
  rm -rf "$libs"; mv "$libs.tmp" "$libs"; touch "$libs/.complete"
}

# srv_stop TIMEOUT: SIGTERM, wait up to TIMEOUT seconds, SIGKILL as the last resort. Only our own server.
srv_stop() {
  local timeout="$1" pid t0=$SECONDS deadline
  if ! pid="$(srv_find_pid)"; then
    rm -f "$SRV_PIDFILE"
    echo "$SRV_NAME: not running (nothing of ours on $SRV_HOST:$SRV_PORT)"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + timeout))
  while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
    srv_log "pid $pid still alive after ${timeout}s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    rm -f "$SRV_PIDFILE"
    echo "$SRV_NAME: killed (pid $pid) after graceful stop timed out"
    return 0
  fi
  rm -f "$SRV_PIDFILE"
  echo "$SRV_NAME: stopped (pid $pid) in $((SECONDS - t0))s"
}

# Fault injection: SIGKILL, no clean shutdown. The pid file is left behind (stale); up.sh copes with that.
srv_kill() {
  local pid
  if ! pid="$(srv_find_pid)"; then
    echo "$SRV_NAME: not running (nothing of ours on $SRV_HOST:$SRV_PORT)"
    return 0
  fi
  kill -KILL "$pid"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  echo "$SRV_NAME: killed -9 (pid $pid)"
}
