#!/usr/bin/env bash
# Make sure the Postgres and Redis that Tollgate is configured for are reachable.
#
#   deploy/local/ensure-services.sh [postgres] [redis]     (default: both)
#
# For each service:
#   1. If it already answers at the URL, use it (and, for Postgres, create the
#      database named in the URL if it is missing).
#   2. Otherwise, if the URL points at this machine and the server binaries are
#      installed, start a THROWAWAY server whose data, logs and pid files live in
#      $TOLLGATE_STATE_DIR (default ./.tollgate): Postgres with trust auth on
#      127.0.0.1 only, Redis with no persistence. stop-services.sh stops them.
#   3. Otherwise fail, saying what to install.
#
# Reads: TOLLGATE_DATABASE_URL  (default postgres://postgres@127.0.0.1:5432/test?sslmode=disable)
#        TOLLGATE_REDIS_URL     (default redis://127.0.0.1:6379/0)
#        TOLLGATE_STATE_DIR     (default .tollgate, relative to the current directory)
#        TOLLGATE_PG_BINDIR     (optional: directory with initdb/pg_ctl/postgres)
#        TOLLGATE_WAIT_SECONDS  (optional: how long to wait for a started server, default 30)
#
# Exit codes: 0 ok; 1 failure; 2 bad usage or URL; 3 a server answers at the
# URL but cannot be used (e.g. it wants a password); 4 binaries not installed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=deploy/local/services-lib.sh
. "$here/services-lib.sh"
TG_LOG_PREFIX=ensure-services

DATABASE_URL=${TOLLGATE_DATABASE_URL:-$TG_DEFAULT_DATABASE_URL}
REDIS_URL=${TOLLGATE_REDIS_URL:-$TG_DEFAULT_REDIS_URL}
STATE=$(tg_state_dir)
WAIT_SECONDS=${TOLLGATE_WAIT_SECONDS:-30}

usage() {
	sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
}

# wait_until NAME SECONDS CMD...: polls CMD once a second, printing progress.
wait_until() {
	local name=$1 limit=$2 waited=0
	shift 2
	until "$@"; do
		if ((waited >= limit)); then
			return 1
		fi
		if ((waited % 3 == 0)); then
			tg_log "$name: waiting for it to accept connections (${waited}s of ${limit}s)"
		fi
		sleep 1
		waited=$((waited + 1))
	done
	tg_log "$name: ready after ${waited}s"
}

# ---------------------------------------------------------------- Postgres ---

pg_url_with_db() { # URL for another database on the same server
	local url="$TG_URL_SCHEME://"
	if [[ -n $TG_URL_USERINFO ]]; then url+="$TG_URL_USERINFO@"; fi
	if [[ $PG_HOST == *:* ]]; then url+="[$PG_HOST]"; else url+=$PG_HOST; fi
	url+=":$PG_PORT/$1"
	if [[ -n $TG_URL_QUERY ]]; then url+="?$TG_URL_QUERY"; fi
	printf '%s\n' "$url"
}

# Run a command as the OS user that owns the throwaway cluster. Postgres
# refuses to run as root, so root hands over to the `postgres` user.
as_pg() {
	if ((EUID == 0)); then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

# Make sure the database named in the URL exists; create it when the server
# lets us in to the `postgres` maintenance database but the target is missing.
pg_ensure_database() {
	local psql out admin_url exists
	if ! psql=$(tg_find_pg_tool psql); then
		tg_warn "postgres: psql not installed; cannot check that database '$PG_DB' exists (apt-get install postgresql-client)"
		return 0
	fi
	export PGCONNECT_TIMEOUT=5
	if out=$("$psql" -X -w -q -t -A -c 'SELECT 1' "$DATABASE_URL" 2>&1); then
		tg_log "postgres: database '$PG_DB' exists and accepts user '$PG_USER'"
		return 0
	fi
	admin_url=$(pg_url_with_db postgres)
	if ! exists=$(printf '%s\n' "SELECT 1 FROM pg_database WHERE datname = :'db';" |
		"$psql" -X -w -q -t -A -v ON_ERROR_STOP=1 -v db="$PG_DB" -d "$admin_url" -f - 2>&1); then
		tg_die "$TG_EXIT_CONNECT" "postgres: a server answers at $PG_HOST:$PG_PORT but user '$PG_USER' cannot use it without a password:
  $out
  $exists
Fix its pg_hba.conf (trust for 127.0.0.1), or point TOLLGATE_DATABASE_URL at another port to get a throwaway server there."
	fi
	if [[ $exists == 1 ]]; then
		tg_die "$TG_EXIT_CONNECT" "postgres: database '$PG_DB' exists but user '$PG_USER' cannot connect to it: $out"
	fi
	tg_log "postgres: database '$PG_DB' missing; creating it"
	printf '%s\n' 'CREATE DATABASE :"db";' |
		"$psql" -X -w -q -v ON_ERROR_STOP=1 -v db="$PG_DB" -d "$admin_url" -f - ||
		tg_die "$TG_EXIT_CONNECT" "postgres: could not create database '$PG_DB' as user '$PG_USER'"
	tg_log "postgres: created database '$PG_DB'"
}

start_throwaway_postgres() {
	local bindir pgroot data sock logf
	if ! bindir=$(tg_pg_bindir); then
		tg_die "$TG_EXIT_MISSING" "postgres: nothing answers at $PG_HOST:$PG_PORT and no Postgres server binaries (initdb, pg_ctl, postgres) are installed.
Install them:  apt-get install postgresql   (or set TOLLGATE_DATABASE_URL to a running server)"
	fi
	pgroot=$STATE/pg
	data=$pgroot/data
	sock=$pgroot/run
	logf=$pgroot/postgres.log
	mkdir -p "$pgroot" "$sock"
	printf '%s\n' "$bindir" >"$pgroot/bindir" # stop-services.sh needs the same pg_ctl

	if ((EUID == 0)); then
		id -u postgres >/dev/null 2>&1 ||
			tg_die "$TG_EXIT_MISSING" "postgres: running as root, but there is no 'postgres' OS user to run the server as (Postgres refuses to run as root). apt-get install postgresql creates it; or run as a normal user."
		chown -R postgres: "$pgroot"
		runuser -u postgres -- test -w "$pgroot" ||
			tg_die "$TG_EXIT_FAIL" "postgres: the 'postgres' OS user cannot write to $pgroot (a parent directory is not searchable by it). Set TOLLGATE_STATE_DIR to a place it can reach, e.g. /tmp/tollgate-state."
	fi

	if [[ ! -s $data/PG_VERSION ]]; then
		tg_log "postgres: initdb (trust auth, superuser '$PG_USER') into $data using $bindir"
		if ! (cd "$pgroot" && as_pg "$bindir/initdb" -D "$data" -U "$PG_USER" --auth=trust \
			-E UTF8 --no-locale) >"$pgroot/initdb.log" 2>&1; then
			tail -n 20 "$pgroot/initdb.log" >&2 || true
			tg_die "$TG_EXIT_FAIL" "postgres: initdb failed; full log in $pgroot/initdb.log"
		fi
		# Our settings live in their own file, rewritten at every start below.
		printf '\n%s\n' "include_if_exists = 'tollgate.conf'" >>"$data/postgresql.conf"
	else
		tg_log "postgres: reusing throwaway data directory $data"
	fi

	# Rewritten every time, so a changed port in the URL takes effect.
	# Durability is off on purpose: this cluster is throwaway and speed matters.
	cat >"$data/tollgate.conf" <<-EOF
		# Written by deploy/local/ensure-services.sh; overwritten at every start.
		listen_addresses = '127.0.0.1'
		port = $PG_PORT
		unix_socket_directories = '$sock'
		fsync = off
		synchronous_commit = off
		full_page_writes = off
		max_connections = 200
	EOF
	if ((EUID == 0)); then
		chown postgres: "$data/tollgate.conf"
	fi

	if (cd "$pgroot" && as_pg "$bindir/pg_ctl" -D "$data" status) >/dev/null 2>&1; then
		# Running from an earlier call but not answering at this URL (other port?).
		tg_log "postgres: throwaway server in $data is running but not at port $PG_PORT; restarting it"
		(cd "$pgroot" && as_pg "$bindir/pg_ctl" -D "$data" -m fast -w stop) >/dev/null
	fi
	tg_log "postgres: starting throwaway server on 127.0.0.1:$PG_PORT (socket dir $sock, log $logf)"
	(cd "$pgroot" && as_pg "$bindir/pg_ctl" -D "$data" -l "$logf" -W start) >/dev/null
	if ! wait_until postgres "$WAIT_SECONDS" tg_pg_probe "$PG_HOST" "$PG_PORT"; then
		tail -n 20 "$logf" >&2 || true
		tg_die "$TG_EXIT_FAIL" "postgres: throwaway server did not accept connections within ${WAIT_SECONDS}s; log: $logf"
	fi
	tg_log "postgres: throwaway server started (pid $(head -n 1 "$data/postmaster.pid" 2>/dev/null || echo '?'), data $data)"
}

ensure_postgres() {
	local rc=0
	tg_parse_url "$DATABASE_URL" || tg_die "$TG_EXIT_USAGE" "postgres: cannot read TOLLGATE_DATABASE_URL='$DATABASE_URL' (want postgres://user@host:port/db?...)"
	case $TG_URL_SCHEME in postgres | postgresql) ;; *)
		tg_die "$TG_EXIT_USAGE" "postgres: TOLLGATE_DATABASE_URL must start with postgres:// (got '$TG_URL_SCHEME://')"
		;;
	esac
	PG_HOST=$TG_URL_HOST
	PG_PORT=${TG_URL_PORT:-5432}
	PG_USER=${TG_URL_USER:-$(id -un)} # libpq's default is the OS user name
	PG_DB=${TG_URL_PATH:-$PG_USER}    # ... and the database defaults to the user name
	local where="$PG_HOST:$PG_PORT"

	tg_pg_probe "$PG_HOST" "$PG_PORT" || rc=$?
	if ((rc == 1)); then
		# Something answers but is still starting up (or shutting down): give it time.
		wait_until postgres "$WAIT_SECONDS" tg_pg_probe "$PG_HOST" "$PG_PORT" ||
			tg_die "$TG_EXIT_FAIL" "postgres: server at $where answers but never started accepting connections"
		rc=0
	fi
	if ((rc == 0)); then
		tg_log "postgres: reachable at $where"
	elif tg_is_loopback "$PG_HOST"; then
		tg_log "postgres: nothing answers at $where"
		start_throwaway_postgres
	else
		tg_die "$TG_EXIT_FAIL" "postgres: nothing answers at $where, and $PG_HOST is not this machine, so no throwaway server can stand in for it"
	fi
	pg_ensure_database
}

# ------------------------------------------------------------------- Redis ---

redis_ready() { tg_redis_ping "$REDIS_URL" "$R_HOST" "$R_PORT" >/dev/null; }

start_throwaway_redis() {
	local rdir pidf logf
	if ! command -v redis-server >/dev/null 2>&1; then
		tg_die "$TG_EXIT_MISSING" "redis: nothing answers at $R_HOST:$R_PORT and redis-server is not installed.
Install it:  apt-get install redis-server   (or set TOLLGATE_REDIS_URL to a running server)"
	fi
	rdir=$STATE/redis
	pidf=$rdir/redis.pid
	logf=$rdir/redis.log
	mkdir -p "$rdir"
	if [[ -s $pidf ]] && kill -0 "$(cat "$pidf")" 2>/dev/null; then
		tg_log "redis: throwaway server (pid $(cat "$pidf")) runs but not at port $R_PORT; stopping it first"
		"$here/stop-services.sh" redis
	fi
	tg_log "redis: starting throwaway server on 127.0.0.1:$R_PORT (no persistence, dir $rdir, log $logf)"
	redis-server --daemonize yes --bind 127.0.0.1 --port "$R_PORT" --save '' --appendonly no \
		--dir "$rdir" --logfile "$logf" --pidfile "$pidf" >/dev/null
	if ! wait_until redis "$WAIT_SECONDS" redis_ready; then
		tail -n 20 "$logf" >&2 || true
		tg_die "$TG_EXIT_FAIL" "redis: throwaway server did not answer PING within ${WAIT_SECONDS}s; log: $logf"
	fi
	tg_log "redis: throwaway server started (pid $(cat "$pidf" 2>/dev/null || echo '?'))"
}

ensure_redis() {
	local reply
	tg_parse_url "$REDIS_URL" || tg_die "$TG_EXIT_USAGE" "redis: cannot read TOLLGATE_REDIS_URL='$REDIS_URL' (want redis://host:port/db)"
	case $TG_URL_SCHEME in redis | rediss) ;; *)
		tg_die "$TG_EXIT_USAGE" "redis: TOLLGATE_REDIS_URL must start with redis:// (got '$TG_URL_SCHEME://')"
		;;
	esac
	R_HOST=$TG_URL_HOST
	R_PORT=${TG_URL_PORT:-6379}
	local where="$R_HOST:$R_PORT"

	if reply=$(tg_redis_ping "$REDIS_URL" "$R_HOST" "$R_PORT"); then
		tg_log "redis: reachable at $where (PING -> PONG)"
	elif tg_tcp_open "$R_HOST" "$R_PORT"; then
		tg_die "$TG_EXIT_CONNECT" "redis: something listens at $where but does not answer PING with PONG: ${reply:-no reply}"
	elif tg_is_loopback "$R_HOST"; then
		tg_log "redis: nothing answers at $where"
		start_throwaway_redis
	else
		tg_die "$TG_EXIT_FAIL" "redis: nothing answers at $where, and $R_HOST is not this machine, so no throwaway server can stand in for it"
	fi
}

# -------------------------------------------------------------------- main ---

want_pg=0 want_redis=0
for arg in "$@"; do
	case $arg in
	postgres | pg) want_pg=1 ;;
	redis) want_redis=1 ;;
	-h | --help)
		usage
		exit 0
		;;
	*)
		usage >&2
		exit "$TG_EXIT_USAGE"
		;;
	esac
done
if ((want_pg + want_redis == 0)); then
	want_pg=1 want_redis=1
fi

if ((want_pg)); then
	ensure_postgres
fi
if ((want_redis)); then
	ensure_redis
fi
tg_log "done"
