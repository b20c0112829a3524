#!/usr/bin/env bash
# Start PostgreSQL (127.0.0.1:5432, trust auth) and Redis (127.0.0.1:6379) for the tests, where
# they are not already running. Installs them with apt-get only on a machine that has neither.
set -euo pipefail

PG_HOST=127.0.0.1 PG_PORT=5432 REDIS_PORT=6379
STATE_DIR=${FUSEFORGE_TEST_SERVICES_DIR:-/tmp/fuseforge-test-services}

log() { echo "test-services: $*"; }

pg_ready() { pg_isready -q -h "$PG_HOST" -p "$PG_PORT" 2>/dev/null; }
redis_ready() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; }

apt_install() {
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    log "installing $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  else
    log "$* missing and cannot be installed here (need root and apt-get)"; exit 1
  fi
}

start_postgres() {
  command -v pg_isready >/dev/null || apt_install postgresql
  if command -v pg_ctlcluster >/dev/null && pg_lsclusters -h 2>/dev/null | grep -q .; then
    pg_lsclusters -h | while read -r version cluster _; do
      pg_ctlcluster "$version" "$cluster" start || true
    done
  fi
  pg_ready && return
  # No system cluster would start: run a private one with trust auth.
  local bindir
  bindir=$(dirname "$(command -v initdb || ls /usr/lib/postgresql/*/bin/initdb | tail -n 1)")
  local data="$STATE_DIR/pgdata" run_as=()
  mkdir -p "$STATE_DIR"
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system postgres
    chown -R postgres "$STATE_DIR"
    run_as=(runuser -u postgres --)
  fi
  [ -f "$data/PG_VERSION" ] || "${run_as[@]}" "$bindir/initdb" -D "$data" -U postgres --auth=trust >/dev/null
  "${run_as[@]}" "$bindir/pg_ctl" -D "$data" -l "$STATE_DIR/postgres.log" \
    -o "-h $PG_HOST -p $PG_PORT -k /tmp" start >/dev/null
}

start_redis() {
  command -v redis-server >/dev/null || apt_install redis-server
  mkdir -p "$STATE_DIR"
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --daemonize yes \
    --dir "$STATE_DIR" --logfile "$STATE_DIR/redis.log" --save ""
}

wait_for() {
  local name=$1 check=$2
  for _ in $(seq 1 60); do "$check" && { log "$name is up"; return; }; sleep 0.5; done
  log "$name did not come up"; exit 1
}

pg_ready && log "PostgreSQL already running" || { start_postgres; wait_for PostgreSQL pg_ready; }
redis_ready && log "Redis already running" || { start_redis; wait_for Redis redis_ready; }
