# shellcheck shell=bash disable=SC2034  # variables are used by the scripts that source this
# Shared settings/helpers for scripts/sqs/{up,down,kill}.sh. Source only.
#
# ElasticMQ is an SQS-compatible server (Scala, on Maven Central as
# org.elasticmq:elasticmq-server_2.13). It does not check credentials or
# signatures: any access key works. It has no SNS.
#
# Environment knobs (all optional):
#   TXBOX_SQS_HOME             cache + state dir        (default ~/.cache/txbox-sqs)
#   TXBOX_SQS_VERSION          ElasticMQ version         (default: <elasticmq.version> in pom.xml)
#   TXBOX_SQS_PORT             SQS REST port             (default 9324)
#   TXBOX_SQS_HEAP             JVM heap flags            (default "-Xms64m -Xmx384m")
#   TXBOX_SQS_START_TIMEOUT    seconds up.sh waits       (default 90)
#   TXBOX_SQS_STOP_TIMEOUT     seconds down.sh waits     (default 30)
#   TXBOX_SQS_MAVEN_REPO       Maven local repo          (default Maven's own, ~/.m2/repository)

SQS_SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SQS_HOST=127.0.0.1
SQS_PORT="${TXBOX_SQS_PORT:-9324}"
SQS_HOME_DIR="${TXBOX_SQS_HOME:-${HOME}/.cache/txbox-sqs}"
if [[ -n "${TXBOX_SQS_VERSION:-}" ]]; then
  SQS_VERSION="$TXBOX_SQS_VERSION"
else
  SQS_VERSION="$(sed -n 's:.*<elasticmq.version>\(.*\)</elasticmq.version>.*:\1:p' "$SQS_SCRIPT_DIR/pom.xml")"
fi
SQS_LIBS="$SQS_HOME_DIR/libs-$SQS_VERSION"
# One state dir per port, so several servers can coexist (tests that restart one use their own).
SQS_INSTANCE="$SQS_HOME_DIR/server-$SQS_PORT"
SQS_CONFIG="$SQS_INSTANCE/elasticmq.conf"
SQS_LOG="$SQS_INSTANCE/server.log"
SQS_PIDFILE="$SQS_INSTANCE/elasticmq.pid"

# shellcheck source=../lib/java-server.sh
source "$SQS_SCRIPT_DIR/../lib/java-server.sh"
SRV_NAME=sqs SRV_HOST=$SQS_HOST SRV_PORT=$SQS_PORT SRV_PIDFILE=$SQS_PIDFILE SRV_CLASS=org.elasticmq.server.Main SRV_CONFIG=$SQS_CONFIG
sqs_log() { srv_log "$@"; }
sqs_port_open() { srv_port_open; }
sqs_find_pid() { srv_find_pid; }

# True if the port answers an SQS ListQueues request (query protocol) with 200.
sqs_answers() {
  [[ "$(curl -s -m 3 -o /dev/null -w '%{http_code}' "http://$SQS_HOST:$SQS_PORT/?Action=ListQueues" 2>/dev/null)" == 200 ]]
}
