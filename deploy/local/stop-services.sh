#!/usr/bin/env bash
# Stop the THROWAWAY Postgres and Redis that ensure-services.sh started.
#
#   deploy/local/stop-services.sh [--purge] [postgres] [redis]   (default: both)
#
# Only servers recorded in $TOLLGATE_STATE_DIR (default ./.tollgate) are
# touched: a Postgres whose data directory is $STATE/pg/data and a Redis whose
# pid file is $STATE/redis/redis.pid. Servers that were already running before
# ensure-services.sh (system ones, CI's) are never stopped.
# --purge also deletes the state directory (data, logs) once both are stopped.
#
# Reads: TOLLGATE_STATE_DIR (default .tollgate, relative to the current directory)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=deploy/local/services-lib.sh
. "$here/services-lib.sh"
TG_LOG_PREFIX=stop-services

STATE=$(tg_state_dir)

as_pg() {
	if ((EUID == 0)); then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

stop_postgres() {
	local pgroot=$STATE/pg data=$STATE/pg/data bindir pid
	if [[ ! -f $data/postmaster.pid ]]; then
		tg_log "postgres: no throwaway server running from $data"
		return 0
	fi
	pid=$(head -n 1 "$data/postmaster.pid")
	bindir=$(cat "$pgroot/bindir" 2>/dev/null || tg_pg_bindir || true)
	if [[ -z $bindir || ! -x $bindir/pg_ctl ]]; then
		tg_die "$TG_EXIT_FAIL" "postgres: pg_ctl not found; stop it by hand: kill $pid"
	fi
	tg_log "postgres: stopping throwaway server (pid $pid, data $data)"
	if (cd "$pgroot" && as_pg "$bindir/pg_ctl" -D "$data" -m fast -w -t 30 stop) >/dev/null 2>&1; then
		tg_log "postgres: stopped"
	elif ! kill -0 "$pid" 2>/dev/null; then
		# Stale pid file (machine rebooted, server killed): nothing to stop.
		tg_log "postgres: was not running (stale pid file)"
	else
		tg_die "$TG_EXIT_FAIL" "postgres: pg_ctl stop failed for $data (pid $pid)"
	fi
}

stop_redis() {
	local pidf=$STATE/redis/redis.pid pid waited=0
	if [[ ! -s $pidf ]]; then
		tg_log "redis: no throwaway server recorded in $pidf"
		return 0
	fi
	pid=$(cat "$pidf")
	# Only kill the pid if it still is a redis-server (pids get reused).
	if ! kill -0 "$pid" 2>/dev/null || [[ $(cat "/proc/$pid/comm" 2>/dev/null || true) != redis-server* ]]; then
		tg_log "redis: was not running (stale pid file $pidf)"
		rm -f "$pidf"
		return 0
	fi
	tg_log "redis: stopping throwaway server (pid $pid)"
	kill -TERM "$pid"
	while kill -0 "$pid" 2>/dev/null; do
		if ((waited >= 150)); then # 150 x 0.2s
			tg_die "$TG_EXIT_FAIL" "redis: pid $pid still running 30s after SIGTERM"
		fi
		sleep 0.2
		waited=$((waited + 1))
	done
	rm -f "$pidf"
	tg_log "redis: stopped"
}

purge=0 want_pg=0 want_redis=0
for arg in "$@"; do
	case $arg in
	--purge) purge=1 ;;
	postgres | pg) want_pg=1 ;;
	redis) want_redis=1 ;;
	-h | --help)
		sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
		exit 0
		;;
	*)
		tg_die "$TG_EXIT_USAGE" "unknown argument '$arg' (want --purge, postgres, redis)"
		;;
	esac
done
if ((want_pg + want_redis == 0)); then
	want_pg=1 want_redis=1
fi

if [[ ! -d $STATE ]]; then
	tg_log "no state directory $STATE: nothing was started here"
	exit 0
fi
if ((want_pg)); then
	stop_postgres
fi
if ((want_redis)); then
	stop_redis
fi
if ((purge)); then
	if ((want_pg + want_redis < 2)); then
		tg_die "$TG_EXIT_USAGE" "--purge removes the whole state directory; use it without naming a single service"
	fi
	tg_log "removing state directory $STATE"
	rm -rf -- "$STATE"
fi
