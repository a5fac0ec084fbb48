#!/usr/bin/env bash
# bench-pairs.sh: BenchmarkGateway (or any e2e benchmark) of a base revision and of the
# working tree, run in interleaved pairs and compared with benchstat.
#
#   make bench-pairs BASE=<rev> [PAIRS=6] [BENCH='Gateway/(json|sse)'] [UNITS=<regexp>] [OUT=<dir>]
#                    [BASE_ENV='NAME=value ...'] [NEW_ENV='NAME=value ...']
#
# BASE_ENV and NEW_ENV set environment variables for one side's runs alone, so that a
# knob can be compared on one revision: BASE=HEAD BASE_ENV=TOLLGATE_BENCH_SPECULATIVE_STARTS=off
# compares the working tree without speculative starts (base) and with them (new).
#
# The machine's speed moves by several times over a day (docs/gateway-latency.md), so
# runs are only comparable side by side: each pair runs both binaries one after the
# other, in alternating order (base first, then the working tree first, ...), so that
# a drift of the machine falls on both sides alike. Each side runs from its own tree's
# e2e directory, with its own test data and deploy/ configurations.
#
# Every run's output is kept in OUT (base.txt and new.txt, benchstat's input, and
# progress.log); the comparison is printed at the end and kept in OUT/benchstat.txt.
# UNITS selects the figures compared (a regular expression over the reported units; the
# default is the issue's goals and the enforcer's CPU): UNITS=. compares all of them.
set -euo pipefail

base=${BASE:?BASE: the revision to compare against, e.g. BASE=HEAD or BASE=main~3}
pairs=${PAIRS:-6}
bench=${BENCH:-Gateway/(json|sse)}
units=${UNITS:-^(added-beyond-start-wait-p(50|99)-ms|ttfb-added-beyond-start-wait-p(50|99)-ms|side-beyond-(nginx|caddy)-p99-ms|enforcer-cpu-us/req|rss-KiB/stream)$}
root=$(git rev-parse --show-toplevel)
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/bench-pairs.XXXXXX")}
go=${GO:-go}
read -r -a base_env <<<"${BASE_ENV:-}"
read -r -a new_env <<<"${NEW_ENV:-}"
for kv in "${base_env[@]}" "${new_env[@]}"; do
	if ! [[ $kv =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; then
		echo "bench-pairs: BASE_ENV and NEW_ENV are NAME=value words, got '$kv'" >&2
		exit 2
	fi
done

if ! [[ $pairs =~ ^[1-9][0-9]*$ ]]; then
	echo "bench-pairs: PAIRS must be a positive number, got '$pairs'" >&2
	exit 2
fi
rev=$(git -C "$root" rev-parse --verify --quiet "$base^{commit}") || {
	echo "bench-pairs: BASE '$base' is not a revision of this repository" >&2
	exit 2
}
mkdir -p "$out"
: >"$out/base.txt"
: >"$out/new.txt"

tree=$(mktemp -d "${TMPDIR:-/tmp}/bench-pairs-base.XXXXXX")
cleanup() { git -C "$root" worktree remove --force "$tree" >/dev/null 2>&1 || rm -rf "$tree"; }
trap cleanup EXIT
git -C "$root" worktree add --quiet --detach "$tree" "$rev"

log() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$out/progress.log"; }
log "building the test binaries: base ${rev:0:12} and the working tree"
(cd "$tree" && "$go" test -c -o "$out/base.test" ./e2e)
(cd "$root" && "$go" test -c -o "$out/new.test" ./e2e)

# run SIDE: one run of SIDE's binary from its own tree, its output appended to SIDE.txt.
run() {
	local side=$1 dir=$root
	local -a vars=("${new_env[@]}")
	if [[ $side == base ]]; then
		dir=$tree
		vars=("${base_env[@]}")
	fi
	log "pair $i: $side ${vars[*]}"
	if ! (cd "$dir/e2e" && env "${vars[@]}" "$out/$side.test" -test.run '^$' -test.bench "$bench" -test.benchtime 1x) >>"$out/$side.txt" 2>&1; then
		echo "bench-pairs: the $side run of pair $i failed; its output is in $out/$side.txt" >&2
		exit 1
	fi
}
for ((i = 1; i <= pairs; i++)); do
	if ((i % 2)); then run base; run new; else run new; run base; fi
done

log "comparing (benchstat, units matching $units)"
(cd "$root/tools/benchstat" && GOWORK=off "$go" tool benchstat -filter ".unit:/${units//\//\\/}/" \
	"base=$out/base.txt" "new=$out/new.txt") | tee "$out/benchstat.txt"
echo "runs kept in $out"
