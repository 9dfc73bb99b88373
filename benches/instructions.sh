#!/usr/bin/env bash
# Instructions per `tools/call` in the proxy's user space, counted by callgrind
# (benches/README.md, "Instructions per call"):
#
#   benches/instructions.sh BINARY [BINARY...] [--runs N] [--keep] [--create]    (2 runs each unless told)
#
# Runs one saturation round of `cargo bench --bench proxy` per run with each proxy binary
# in turn under `valgrind --tool=callgrind` (MCP_BENCH_PROXY_BIN is a wrapper that starts
# it so). In the window of the proxy with data-layer sessions and in that of the hop alone
# (an old client passed through), the counters are zeroed 2 s in and dumped 6 s later;
# the calls are the proxy's own /metrics count over the same 6 s. Prints per window the
# instructions per call, and the same less SHA-256's compression function: under
# valgrind the SHA extensions of the CPU are not offered, so sha2 runs its portable code,
# which costs several times what the native build's does (the two HMACs of a session
# call's `state`). Each run's table from valgrind overwrites target/bench-results.md;
# `--keep` keeps the dumps (`callgrind_annotate --inclusive=yes` on one: per function)
# and prints where. `--create` counts `sessions/create` instead: the bench's create run,
# the window of 16 connections, divided by the creates `/metrics` counted.
#
# An instruction count depends on the code and its input only, not on what else the
# machine is doing: it tells two builds apart by a few hundred instructions per call
# (~0.5%), where `pairs.sh` needs a difference of a microsecond. It counts no kernel
# time and no cache misses: a change that moves those is measured by `pairs.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."

binaries=()
runs=2
keep=0
create=0
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs=$2; shift 2 ;;
        --keep) keep=1; shift ;;
        --create) create=1; shift ;;
        *) binaries+=("$(realpath "$1")"); shift ;;
    esac
done
if [ ${#binaries[@]} -eq 0 ]; then
    sed -n '2,23p' "$0" >&2
    exit 2
fi
for binary in "${binaries[@]}"; do
    [ -x "$binary" ] || { echo "benches/instructions.sh: $binary is not an executable" >&2; exit 2; }
done
for tool in valgrind callgrind_control callgrind_annotate nginx curl pgrep ss; do
    command -v "$tool" >/dev/null || {
        echo "benches/instructions.sh: $tool is missing (valgrind: apt-get install valgrind; nginx: benches/run.sh installs it)" >&2
        exit 2
    }
done

bench=$(cargo bench --bench proxy --no-run 2>&1 |
    sed -n 's/^ *Executable benches\/proxy\.rs (\(.*\))$/\1/p' || true)
[ -x "$bench" ] || { echo "benches/instructions.sh: could not build the bench binary" >&2; exit 1; }
out=$(mktemp -d)
bench_pid=""
# A run stopped halfway takes its bench (and the bench its children) with it.
finish() {
    if [ -n "$bench_pid" ]; then
        kill "$bench_pid" 2>/dev/null || true
        wait "$bench_pid" 2>/dev/null || true
    fi
    if [ "$keep" = 1 ]; then
        echo "benches/instructions.sh: the dumps are in $out" >&2
    else
        rm -rf "$out"
    fi
}
trap finish EXIT
fail() { echo "benches/instructions.sh: $*" >&2; exit 1; }

# The instructions of a dump: all, and those of SHA-256's compression function with
# what it calls (every copy of it the binary holds).
counts() { # dump-file
    local all sha
    all=$(awk '/^(summary|totals):/ {print $2; exit}' "$1")
    sha=$(callgrind_annotate --auto=no --threshold=100 --inclusive=yes "$1" 2>/dev/null |
        awk '/sha2::sha256::compress256( |$)/ {gsub(",", "", $1); sum += $1} END {print sum + 0}')
    echo "${all:-0} ${sha:-0}"
}

# One run: the bench's saturation round with `binary` under callgrind.
measure() { # binary label
    local binary=$1 wrap="$out/proxy" log="$out/log" pid addr window a b dump n all sha
    cat >"$wrap" <<WRAP
#!/bin/sh
exec valgrind --tool=callgrind --callgrind-out-file=$out/callgrind.%p "$binary" "\$@"
WRAP
    chmod +x "$wrap"
    # The windows: the line the bench logs as each starts, and what each counts.
    local scenario windows method
    if [ "$create" = 1 ]; then
        scenario=(--only create --create-duration 12)
        windows=("sessions/create: proxy (16 ")
        method='sessions\/create'
    else
        scenario=(--only saturation --no-floor-variants --rounds 1 --duration 12 --warmup 1)
        windows=("saturation round 1/1: proxy (" "saturation round 1/1: proxy pass-through (")
        method='tools\/call'
    fi
    MCP_BENCH_PROXY_BIN="$wrap" "$bench" --bench "${scenario[@]}" >/dev/null 2>"$log" &
    bench_pid=$!
    for window in "${windows[@]}"; do
        until grep -qF "$window" "$log"; do
            kill -0 "$bench_pid" 2>/dev/null || { cat "$log" >&2; fail "the bench stopped"; }
            sleep 0.2
        done
        sleep 2
        pid=$(pgrep -f -- "--callgrind-out-file=$out/" | head -1 || true)
        [ -n "$pid" ] || fail "the proxy under valgrind was not found"
        addr=$(ss -ltnp | grep "pid=$pid," | awk '{print $4}' | head -1 || true)
        [ -n "$addr" ] || fail "the proxy's listening address was not found"
        calls() {
            curl -s -m 5 "http://$addr/metrics" |
                awk "/^mcp_proxy_requests_total\\{method=\"$method\",outcome=\"ok\"\\}/ {print \$2}" ||
                true
        }
        # Each count read just before the counters are zeroed and dumped: the calls
        # and the instructions are counted over windows of the same length.
        a=$(calls)
        callgrind_control -z "$pid" >/dev/null 2>&1 || fail "callgrind_control -z $pid failed"
        sleep 6
        b=$(calls)
        callgrind_control -d "$pid" >/dev/null 2>&1 || fail "callgrind_control -d $pid failed"
        dump=$(ls -t "$out"/callgrind."$pid".* 2>/dev/null | head -1 || true)
        [ -n "$dump" ] || fail "no dump of the proxy's counters"
        read -r all sha <<<"$(counts "$dump")"
        n=$((${b:-0} - ${a:-0}))
        [ "$n" -gt 0 ] || fail "no calls counted ($window)"
        awk -v w="$window" -v l="$2" -v n="$n" -v all="$all" -v sha="$sha" 'BEGIN {
            what = w ~ /create/ ? "sessions/create, 16" : w ~ /pass-through/ ? "hop alone" : "sessions"
            printf "%-28s %-22s %6d calls  %7.0f instructions per call, %7.0f less SHA-256\n",
                l, what, n, all / n, (all - sha) / n }'
    done
    wait "$bench_pid" || true
    bench_pid=""
}

for i in $(seq 1 "$runs"); do
    for binary in "${binaries[@]}"; do
        measure "$binary" "run $i $(basename "$binary")"
    done
done
