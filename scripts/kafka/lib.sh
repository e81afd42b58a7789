# shellcheck shell=bash disable=SC2034  # variables are used by the scripts that source this
# Shared settings/helpers for scripts/kafka/{up,down,kill}.sh. Source only.
#
# Environment knobs (all optional):
#   TXBOX_KAFKA_HOME             cache + state dir      (default ~/.cache/txbox-kafka)
#   TXBOX_KAFKA_VERSION          broker version          (default: <kafka.version> in pom.xml)
#   TXBOX_KAFKA_PORT             client listener port    (default 9092)
#   TXBOX_KAFKA_CONTROLLER_PORT  KRaft controller port   (default 9093)
#   TXBOX_KAFKA_HEAP             JVM heap flags          (default "-Xms256m -Xmx512m")
#   TXBOX_KAFKA_START_TIMEOUT    seconds up.sh waits     (default 90)
#   TXBOX_KAFKA_STOP_TIMEOUT     seconds down.sh waits   (default 60)
#   TXBOX_KAFKA_MAVEN_REPO       Maven local repo        (default Maven's own, ~/.m2/repository)

KAFKA_SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KAFKA_HOST=127.0.0.1
KAFKA_PORT="${TXBOX_KAFKA_PORT:-9092}"
KAFKA_CONTROLLER_PORT="${TXBOX_KAFKA_CONTROLLER_PORT:-9093}"
KAFKA_HOME_DIR="${TXBOX_KAFKA_HOME:-${HOME}/.cache/txbox-kafka}"
if [[ -n "${TXBOX_KAFKA_VERSION:-}" ]]; then
  KAFKA_VERSION="$TXBOX_KAFKA_VERSION"
else
  KAFKA_VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$KAFKA_SCRIPT_DIR/pom.xml")"
fi
KAFKA_LIBS="$KAFKA_HOME_DIR/libs-$KAFKA_VERSION"
# One state dir per listener port, so several brokers can coexist if needed.
KAFKA_INSTANCE="$KAFKA_HOME_DIR/broker-$KAFKA_PORT"
KAFKA_DATA="$KAFKA_INSTANCE/data"
KAFKA_LOGS="$KAFKA_INSTANCE/logs"
KAFKA_CONFIG="$KAFKA_INSTANCE/server.properties"
KAFKA_PIDFILE="$KAFKA_INSTANCE/kafka.pid"

# shellcheck source=../lib/java-server.sh
source "$KAFKA_SCRIPT_DIR/../lib/java-server.sh"
SRV_NAME=kafka SRV_HOST=$KAFKA_HOST SRV_PORT=$KAFKA_PORT SRV_PIDFILE=$KAFKA_PIDFILE SRV_CLASS=kafka.Kafka SRV_CONFIG=$KAFKA_CONFIG
kafka_log() { srv_log "$@"; }
kafka_port_open() { srv_port_open; }
kafka_find_pid() { srv_find_pid; }

# True if host:port answers a raw Kafka ApiVersions v0 request (api_key 18)
# with our correlation id. Cheap (no JVM) and proves it speaks Kafka.
kafka_answers() {
  local hex
  # shellcheck disable=SC2016  # expanded by the inner bash
  hex="$(timeout 3 bash -c '
      exec 3<>"/dev/tcp/$0/$1" || exit 1
      # size=14 | api_key=18 | api_version=0 | correlation_id=0x7478 | client_id="txbx"
      printf "\x00\x00\x00\x0e\x00\x12\x00\x00\x00\x00\x74\x78\x00\x04txbx" >&3
      head -c 10 <&3 | od -An -tx1 | tr -d " \n"
    ' "$KAFKA_HOST" "$KAFKA_PORT" 2>/dev/null)" || return 1
  # bytes 4..7: correlation id, bytes 8..9: error code (0 = none)
  [[ "${hex:8:8}" == "00007478" && "${hex:16:4}" == "0000" ]]
}

kafka_log_tail() {
  local n="${1:-60}" f
  if [[ -s "$KAFKA_LOGS/server.log" ]] && grep -qE '\] (ERROR|FATAL) ' "$KAFKA_LOGS/server.log"; then
    echo "----- last ERROR/FATAL lines of $KAFKA_LOGS/server.log -----" >&2
    grep -E '\] (ERROR|FATAL) |^Caused by:' "$KAFKA_LOGS/server.log" | tail -n 8 >&2
  fi
  for f in "$KAFKA_LOGS/server.log" "$KAFKA_LOGS/stdout.log"; do
    if [[ -s "$f" ]]; then
      echo "----- tail -n $n $f -----" >&2
      tail -n "$n" "$f" >&2
    fi
  done
}
