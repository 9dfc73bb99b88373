#!/usr/bin/env bash
# The proxy's cost per call, counted by the kernel (benches/README.md, "Per-call profile"):
#
#   benches/profile.sh [PROXY_BINARY] [--record]
#
# Runs one saturation round of `cargo bench --bench proxy` (the proxy's release binary,
# or PROXY_BINARY through MCP_BENCH_PROXY_BIN), attaches `perf stat` to the proxy for 3 s
# of its data-layer window and prints, per proxied `tools/call` (counted by the proxy's
# own /metrics over the same 3 s): CPU time (task-clock: user + system), context
# switches and system calls. With --record, `perf record` (DWARF call graphs) instead,
# into target/profile.data (read it with `perf report -i target/profile.data`).
set -euo pipefail
cd "$(dirname "$0")/.."

binary=""
record=0
for arg in "$@"; do
    case "$arg" in
        --record) record=1 ;;
        *) binary=$(realpath "$arg") ;;
    esac
done
command -v perf >/dev/null || { echo "profile.sh: perf is not installed (apt-get install linux-perf)" >&2; exit 2; }

log=$(mktemp)
trap 'rm -f "$log"' EXIT
env ${binary:+MCP_BENCH_PROXY_BIN="$binary"} cargo bench --bench proxy -- \
    --only saturation --rounds 1 --duration 8 --warmup 1 >/dev/null 2>"$log" &
bench=$!
until grep -q "round 1/1: proxy (" "$log"; do
    kill -0 "$bench" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.2
done
sleep 1.5
name=${binary:-mcp-session-proxy}
pid=$(pgrep -f "^$(basename "$name")|/$(basename "$name") " | head -1)
addr=$(ss -ltnp | grep "pid=$pid," | awk '{print $4}' | head -1)
calls() { curl -s "http://$addr/metrics" | awk '/^mcp_proxy_requests_total\{method="tools\/call",outcome="ok"\}/ {print $2}'; }
before=$(calls)
if [ "$record" = 1 ]; then
    perf record -F 2999 --call-graph dwarf,8192 -o target/profile.data -p "$pid" -- sleep 3 2>/dev/null
    stat=""
else
    stat=$(perf stat -x, -e task-clock,context-switches,raw_syscalls:sys_enter -p "$pid" -- sleep 3 2>&1)
fi
after=$(calls)
wait "$bench"
n=$((after - before))
echo "proxied tools/call in 3 s: $n"
if [ -n "$stat" ]; then
    echo "$stat" | awk -F, -v n="$n" '
        $3 == "task-clock" { printf "CPU per call:              %.1f us\n", $1 * 1000 / n }
        $3 == "context-switches" { printf "context switches per call: %.2f\n", $1 / n }
        $3 == "raw_syscalls:sys_enter" { printf "system calls per call:     %.2f\n", $1 / n }'
else
    echo "profile written to target/profile.data"
fi
