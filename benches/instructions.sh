#!/usr/bin/env bash
# Instructions per `tools/call` in the proxy's user space, counted by callgrind
# (benches/README.md, "Instructions per call"):
#
#   benches/instructions.sh BINARY [BINARY...] [--runs N]      (2 runs each unless told)
#
# Runs one saturation round of `cargo bench --bench proxy` per run with each proxy binary
# in turn under `valgrind --tool=callgrind` (MCP_BENCH_PROXY_BIN is a wrapper that starts
# it so). In the window of the proxy with data-layer sessions and in that of the hop alone
# (an old client passed through), the counters are zeroed 2 s in and dumped 6 s later;
# the calls are the proxy's own /metrics count over the same 6 s. Prints per window the
# instructions per call, and the same less SHA-256's compression function: under
# valgrind the SHA extensions of the CPU are not offered, so sha2 runs its portable code,
# which costs several times what the native build's does (the two HMACs of a session
# call's `state`).
#
# An instruction count depends on the code and its input only, not on what else the
# machine is doing: it tells two builds apart by a few hundred instructions per call
# (~0.5%), where `pairs.sh` needs a difference of a microsecond. It counts no kernel
# time and no cache misses: a change that moves those is measured by `pairs.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."

binaries=()
runs=2
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs=$2; shift 2 ;;
        *) binaries+=("$(realpath "$1")"); shift ;;
    esac
done
if [ ${#binaries[@]} -eq 0 ]; then
    sed -n '2,20p' "$0" >&2
    exit 2
fi
for binary in "${binaries[@]}"; do
    [ -x "$binary" ] || { echo "benches/instructions.sh: $binary is not an executable" >&2; exit 2; }
done
for tool in valgrind callgrind_control callgrind_annotate nginx curl; do
    command -v "$tool" >/dev/null || {
        echo "benches/instructions.sh: $tool is missing (valgrind: apt-get install valgrind; nginx: benches/run.sh installs it)" >&2
        exit 2
    }
done

bench=$(cargo bench --bench proxy --no-run 2>&1 |
    sed -n 's/^ *Executable benches\/proxy\.rs (\(.*\))$/\1/p')
[ -x "$bench" ] || { echo "benches/instructions.sh: could not build the bench binary" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# The instructions of a dump: all, and those of SHA-256's compression function alone.
counts() { # dump-file
    local all sha
    all=$(awk '/^(summary|totals):/ {print $2; exit}' "$1")
    sha=$(callgrind_annotate --auto=no --threshold=100 "$1" 2>/dev/null |
        awk '/sha2::sha256::compress256/ {gsub(",", "", $1); print $1; exit}')
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
    rm -f "$out"/callgrind.*
    MCP_BENCH_PROXY_BIN="$wrap" "$bench" --bench --only saturation --no-floor-variants \
        --rounds 1 --duration 12 --warmup 1 >/dev/null 2>"$log" &
    local bench_pid=$!
    for window in "proxy" "proxy pass-through"; do
        until grep -q "saturation round 1/1: $window (" "$log"; do
            kill -0 "$bench_pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
            sleep 0.2
        done
        sleep 2
        pid=$(pgrep -f -- "--callgrind-out-file=$out/" | head -1)
        addr=$(ss -ltnp | grep "pid=$pid," | awk '{print $4}' | head -1)
        calls() {
            curl -s -m 5 "http://$addr/metrics" |
                awk '/^mcp_proxy_requests_total\{method="tools\/call",outcome="ok"\}/ {print $2}'
        }
        callgrind_control -z "$pid" >/dev/null 2>&1
        a=$(calls)
        sleep 6
        b=$(calls)
        callgrind_control -d "$pid" >/dev/null 2>&1
        dump=$(ls -t "$out"/callgrind."$pid".* | head -1)
        read -r all sha <<<"$(counts "$dump")"
        n=$((${b:-0} - ${a:-0}))
        [ "$n" -gt 0 ] || { echo "benches/instructions.sh: no calls counted ($window)" >&2; exit 1; }
        awk -v w="$window" -v l="$2" -v n="$n" -v all="$all" -v sha="$sha" 'BEGIN {
            printf "%-28s %-22s %6d calls  %7.0f instructions per call, %7.0f less SHA-256\n",
                l, (w == "proxy" ? "sessions" : "hop alone"), n, all / n, (all - sha) / n }'
    done
    wait "$bench_pid"
}

for i in $(seq 1 "$runs"); do
    for binary in "${binaries[@]}"; do
        measure "$binary" "run $i $(basename "$binary")"
    done
done
