#!/usr/bin/env bash
# Makes sure the local services the tests use are up, starting any that stopped
# with the machine's own start commands. Idempotent; prints one line per service.
set -uo pipefail

up() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {
  local port=$1 name=$2
  for _ in $(seq 1 60); do up "$port" && return 0; sleep 0.5; done
  echo "services: $name did not come up on port $port" >&2
  return 1
}

ensure() {
  local name=$1 port=$2 start=$3
  if up "$port"; then echo "services: $name up on $port"; return 0; fi
  echo "services: starting $name"
  bash -c "$start" >/dev/null 2>&1 || true
  wait_port "$port" "$name" && echo "services: $name up on $port"
}

status=0
ensure postgresql 5432 'pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start' || status=1
# The suite runs two test files at once, and txbox torture adds relay and consumer
# processes with their pools: more than PostgreSQL's default 100 connections at peak.
# Raised once (ALTER SYSTEM persists it), then a no-op.
# The relay's WAL wake mode (wake: 'wal') follows the outbox through a logical
# replication slot: wal_level=logical, set once, then a no-op. Both settings need
# one restart, done together.
pgq() { psql -h 127.0.0.1 -U postgres -d postgres -Atc "$1" 2>/dev/null; }
conns=$(pgq 'SHOW max_connections' || echo 0)
wal=$(pgq 'SHOW wal_level' || echo unknown)
restart=0
if [ "${conns:-0}" -gt 0 ] && [ "$conns" -lt 200 ]; then
  echo "services: raising PostgreSQL max_connections from $conns to 200 (restart)"
  pgq 'ALTER SYSTEM SET max_connections = 200' >/dev/null && restart=1
fi
if [ "$wal" = replica ] || [ "$wal" = minimal ]; then
  echo "services: setting PostgreSQL wal_level from $wal to logical (restart)"
  pgq 'ALTER SYSTEM SET wal_level = logical' >/dev/null && restart=1
fi
if [ "$restart" = 1 ]; then
  pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main restart >/dev/null 2>&1
  wait_port 5432 postgresql || status=1
fi
if [ "${TXBOX_SERVICES:-all}" = all ]; then
  ensure redis 6379 'redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log' || status=1
  ensure rabbitmq 5672 'rabbitmq-server -detached' || status=1
  ensure nats 4222 'start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log' || status=1
  # MariaDB, for the MySQL/MariaDB store's tests (test/integration/mysql-*.test.ts).
  ensure mariadb 3306 'start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd' || status=1
fi
exit $status
