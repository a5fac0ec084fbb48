# shellcheck shell=bash disable=SC2034
# (SC2034: the variables set here are used by the scripts that source this.)
# Helpers shared by ensure-services.sh, stop-services.sh and .ci/run.
# Sourced, never run on its own. Every name it defines starts with tg_ or TG_.

TG_DEFAULT_DATABASE_URL='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
TG_DEFAULT_REDIS_URL='redis://127.0.0.1:6379/0'

# Exit codes of ensure-services.sh, so callers (.ci/run) can react to each case.
TG_EXIT_FAIL=1        # anything else: did not become reachable, initdb failed, ...
TG_EXIT_USAGE=2       # bad argument or a URL this script cannot read
TG_EXIT_CONNECT=3     # a server answers on the port, but we cannot log in / use it
TG_EXIT_MISSING=4     # nothing answers and the binaries to start one are not installed

tg_log() { printf '%s: %s\n' "${TG_LOG_PREFIX:-services}" "$*"; }
tg_warn() { printf '%s: warning: %s\n' "${TG_LOG_PREFIX:-services}" "$*" >&2; }
# tg_die CODE MESSAGE...
tg_die() {
	local code=$1
	shift
	printf '%s: error: %s\n' "${TG_LOG_PREFIX:-services}" "$*" >&2
	exit "$code"
}

# Absolute path of the state directory (throwaway data, logs, pid files).
# Relative values are taken from the current directory. Not created here.
tg_state_dir() {
	local d=${TOLLGATE_STATE_DIR:-.tollgate}
	[[ $d == /* ]] || d=$PWD/$d
	printf '%s\n' "${d%/}"
}

# tg_parse_url URL: splits scheme://[userinfo@]host[:port][/path][?query] into
# TG_URL_SCHEME TG_URL_USERINFO TG_URL_USER TG_URL_HOST TG_URL_PORT TG_URL_PATH TG_URL_QUERY.
# IPv6 hosts in brackets are understood. Percent-encoding is not decoded.
tg_parse_url() {
	local url=$1 rest hostport after
	[[ $url == *://* ]] || return 1
	TG_URL_SCHEME=${url%%://*}
	rest=${url#*://}
	rest=${rest%%#*}
	TG_URL_QUERY=''
	if [[ $rest == *\?* ]]; then
		TG_URL_QUERY=${rest#*\?}
		rest=${rest%%\?*}
	fi
	TG_URL_USERINFO=''
	if [[ $rest == *@* ]]; then
		TG_URL_USERINFO=${rest%@*}
		rest=${rest##*@}
	fi
	TG_URL_PATH=''
	if [[ $rest == */* ]]; then
		TG_URL_PATH=${rest#*/}
		rest=${rest%%/*}
	fi
	TG_URL_USER=${TG_URL_USERINFO%%:*}
	hostport=$rest
	if [[ $hostport == \[* ]]; then
		TG_URL_HOST=${hostport#\[}
		TG_URL_HOST=${TG_URL_HOST%%\]*}
		after=${hostport#*\]}
		TG_URL_PORT=${after#:}
	else
		TG_URL_HOST=${hostport%%:*}
		TG_URL_PORT=''
		if [[ $hostport == *:* ]]; then
			TG_URL_PORT=${hostport##*:}
		fi
	fi
	[[ -n $TG_URL_HOST ]] || return 1
	[[ -z $TG_URL_PORT || $TG_URL_PORT =~ ^[0-9]+$ ]] || return 1
	return 0
}

# tg_is_loopback HOST: true for addresses this script may start a server on.
tg_is_loopback() {
	case $1 in
	127.* | localhost | ::1) return 0 ;;
	*) return 1 ;;
	esac
}

# tg_tcp_open HOST PORT: true when something accepts a TCP connection there.
tg_tcp_open() {
	# shellcheck disable=SC2016 # $1, $2 expand in the child bash
	timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null
}

# Directory holding initdb, pg_ctl and postgres. TOLLGATE_PG_BINDIR wins; then
# the newest Debian /usr/lib/postgresql/*/bin; then whatever PATH has.
tg_pg_bindir() {
	local d cand=''
	if [[ -n ${TOLLGATE_PG_BINDIR:-} ]]; then
		d=${TOLLGATE_PG_BINDIR%/}
		if [[ -x $d/initdb && -x $d/pg_ctl && -x $d/postgres ]]; then
			printf '%s\n' "$d"
			return 0
		fi
		return 1
	fi
	# Versions sorted numerically (so 10 comes after 9); the last usable one wins.
	while IFS= read -r d; do
		if [[ -x $d/initdb && -x $d/pg_ctl && -x $d/postgres ]]; then
			cand=$d
		fi
	done < <(compgen -G '/usr/lib/postgresql/*/bin' | sort -V)
	if [[ -n $cand ]]; then
		printf '%s\n' "$cand"
		return 0
	fi
	if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1 && command -v postgres >/dev/null 2>&1; then
		d=$(command -v initdb)
		printf '%s\n' "${d%/*}"
		return 0
	fi
	return 1
}

# tg_find_pg_tool NAME: a client tool (psql, pg_isready) from PATH or the server bindir.
tg_find_pg_tool() {
	local d
	if command -v "$1" >/dev/null 2>&1; then
		command -v "$1"
		return 0
	fi
	if d=$(tg_pg_bindir) && [[ -x $d/$1 ]]; then
		printf '%s\n' "$d/$1"
		return 0
	fi
	return 1
}

# tg_pg_probe HOST PORT: 0 = accepting connections, 1 = a server is there but
# not accepting yet (starting up), 2 = nothing answers.
tg_pg_probe() {
	local isready rc=0
	if isready=$(tg_find_pg_tool pg_isready); then
		"$isready" -q -h "$1" -p "$2" -t 3 || rc=$?
		case $rc in
		0) return 0 ;;
		1) return 1 ;;
		*) return 2 ;;
		esac
	fi
	# No pg_isready: an open port is the best we can tell.
	tg_tcp_open "$1" "$2" && return 0
	return 2
}

# tg_redis_ping URL HOST PORT: prints the reply; 0 when it is PONG.
tg_redis_ping() {
	local reply=''
	if command -v redis-cli >/dev/null 2>&1; then
		reply=$(timeout 5 redis-cli --no-auth-warning -u "$1" ping 2>&1) || true
	else
		# Speak RESP over bash's /dev/tcp: an inline PING answers "+PONG\r".
		# shellcheck disable=SC2016 # $1, $2, $line expand in the child bash
		reply=$(timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2" && printf "PING\r\n" >&3 &&
			IFS= read -r -t 2 line <&3 && printf "%s\n" "$line"' _ "$2" "$3" 2>/dev/null) || true
		reply=${reply%$'\r'}
		reply=${reply#+}
	fi
	printf '%s\n' "$reply"
	[[ $reply == PONG ]]
}
