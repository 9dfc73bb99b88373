#!/usr/bin/env bash
# Instructions per `tools/call` in the proxy's user space, counted by callgrind
# (benches/README.md, "Instructions per call"):
#
#   benches/instructions.sh BINARY [BINARY...] [--runs N] [--keep] [--create] [--nginx] [--cache]
#                                                                      (2 runs each unless told)
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
# the window of 16 connections, divided by the creates `/metrics` counted. `--nginx`
# counts nginx too, in its window of the same round (its processes under callgrind, its
# requests by its `stub_status`): the same exchange through the yardstick hop. `--cache`
# has callgrind simulate the CPU's caches (this machine's sizes, no prefetching) and
# prints per call, beside the instructions, the first-level cache misses it counted —
# instruction (I1) and data (D1, reads + writes): code and data a call touches that did
# not stay in the first-level caches since the call before. Runs slower.
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
nginx=0
cache=()
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs=$2; shift 2 ;;
        --keep) keep=1; shift ;;
        --create) create=1; shift ;;
        --nginx) nginx=1; shift ;;
        --cache) cache=(--cache-sim=yes); shift ;;
        *) binaries+=("$(realpath "$1")"); shift ;;
    esac
done
if [ ${#binaries[@]} -eq 0 ]; then
    sed -n '2,30p' "$0" >&2
    exit 2
fi
if [ "$nginx" = 1 ] && [ "$create" = 1 ]; then
    echo "benches/instructions.sh: --nginx counts in the saturation round (not with --create)" >&2
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
    echo "${all:-0} ${sha:-0} $(misses "$1")"
}

# A dump's simulated I1, D1 read and D1 write misses, found by its `events:` line's
# names (0 without `--cache`).
misses() { # dump-file
    awk '/^events:/ { for (i = 2; i <= NF; i++) at[$i] = i }
        /^(summary|totals):/ { print (at["I1mr"] ? $at["I1mr"] : 0), (at["D1mr"] ? $at["D1mr"] : 0),
            (at["D1mw"] ? $at["D1mw"] : 0); exit }' "$1"
}

# One window's line: instructions per call (all, and less SHA-256) and, with `--cache`,
# first-level misses per call.
report() { # label what calls all sha i1 d1r d1w
    awk -v l="$1" -v what="$2" -v n="$3" -v all="$4" -v sha="$5" -v i1="$6" -v d1r="$7" \
        -v d1w="$8" -v cache="${#cache[@]}" 'BEGIN {
        printf "%-28s %-22s %6d calls  %7.0f instructions per call, %7.0f less SHA-256",
            l, what, n, all / n, (all - sha) / n
        if (cache > 0) printf "; I1 misses %5.0f, D1 %4.0f + %4.0f", i1 / n, d1r / n, d1w / n
        printf "\n" }'
}

# nginx under callgrind (`--nginx`): a command of that name first in the bench's PATH
# starts the real one so, as one process (`master_process off`: callgrind_control
# cannot reach a worker forked under valgrind) doing a worker's work. The bench's nginx
# answers `stub_status` at /nginx-status, whose count of requests gives the calls.
nginx_real=$(command -v nginx)
if [ "$nginx" = 1 ]; then
    mkdir -p "$out/bin"
    cat >"$out/bin/nginx" <<WRAP
#!/usr/bin/env bash
args=()
for arg in "\$@"; do args+=("\${arg/master_process on;/master_process off;}"); done
exec valgrind --tool=callgrind ${cache[*]} --callgrind-out-file=$out/nginx.%p "$nginx_real" "\${args[@]}"
WRAP
    chmod +x "$out/bin/nginx"
fi

# Zeroes the counters of the processes `pids` (their dump files' prefix first), lets 6 s
# pass, reads `calls` (the caller's), dumps the counters, and prints that count and the
# sums of the dumps' counts (as `counts` prints them).
window() { # prefix pid...
    local prefix=$1 pid dump i c b
    local sum=(0 0 0 0 0)
    shift
    for pid in "$@"; do
        callgrind_control -z "$pid" >/dev/null 2>&1 || fail "callgrind_control -z $pid failed"
    done
    sleep 6
    b=$(calls)
    for pid in "$@"; do
        callgrind_control -d "$pid" >/dev/null 2>&1 || fail "callgrind_control -d $pid failed"
        dump=$(ls -t "$prefix.$pid".* 2>/dev/null | head -1 || true)
        [ -n "$dump" ] || fail "no dump of the counters of $pid"
        read -r -a c <<<"$(counts "$dump")"
        for i in 0 1 2 3 4; do sum[i]=$((sum[i] + ${c[i]:-0})); done
    done
    echo "${b:-0} ${sum[*]}"
}

# One run: the bench's saturation round with `binary` under callgrind.
measure() { # binary label
    local binary=$1 wrap="$out/proxy" log="$out/log" window pids prefix addr a b n what
    local all sha i1 d1r d1w
    cat >"$wrap" <<WRAP
#!/bin/sh
exec valgrind --tool=callgrind ${cache[*]} --callgrind-out-file=$out/callgrind.%p "$binary" "\$@"
WRAP
    chmod +x "$wrap"
    # The windows: the line the bench logs as each starts, and what each counts.
    local scenario windows method path=$PATH
    if [ "$create" = 1 ]; then
        scenario=(--only create --create-duration 12)
        windows=("sessions/create: proxy (16 ")
        method='sessions\/create'
    else
        scenario=(--only saturation --no-floor-variants --rounds 1 --duration 12 --warmup 1)
        windows=("saturation round 1/1: proxy (" "saturation round 1/1: proxy pass-through (")
        if [ "$nginx" = 1 ]; then
            windows=("saturation round 1/1: nginx (" "${windows[@]}")
            path="$out/bin:$PATH"
        fi
        method='tools\/call'
    fi
    PATH="$path" MCP_BENCH_NGINX_STATUS=1 MCP_BENCH_PROXY_BIN="$wrap" "$bench" --bench "${scenario[@]}" >/dev/null 2>"$log" &
    bench_pid=$!
    for window in "${windows[@]}"; do
        until grep -qF "$window" "$log"; do
            kill -0 "$bench_pid" 2>/dev/null || { cat "$log" >&2; fail "the bench stopped"; }
            sleep 0.2
        done
        sleep 2
        case "$window" in
            *nginx*)
                prefix="$out/nginx" what="nginx"
                read -r -a pids <<<"$(pgrep -f -- "--callgrind-out-file=$out/nginx\." | head -1 || true)" ;;
            *)
                prefix="$out/callgrind"
                case "$window" in
                    *create*) what="sessions/create, 16" ;;
                    *pass-through*) what="hop alone" ;;
                    *) what="sessions" ;;
                esac
                read -r -a pids <<<"$(pgrep -f -- "--callgrind-out-file=$out/callgrind\." | head -1 || true)" ;;
        esac
        [ ${#pids[@]} -gt 0 ] || fail "the $what process under valgrind was not found"
        addr=$(ss -ltnp | grep -E "pid=($(IFS='|'; echo "${pids[*]}"))," | awk '{print $4}' | head -1 || true)
        [ -n "$addr" ] || fail "the listening address of $what was not found"
        calls() {
            case "$what" in
                nginx) curl -s -m 5 "http://$addr/nginx-status" | awk 'NR == 3 {print $3}' || true ;;
                *) curl -s -m 5 "http://$addr/metrics" |
                    awk "/^mcp_proxy_requests_total\\{method=\"$method\",outcome=\"ok\"\\}/ {print \$2}" ||
                    true ;;
            esac
        }
        # Each count read just before the counters are zeroed and dumped: the calls
        # and the instructions are counted over windows of the same length.
        a=$(calls)
        read -r b all sha i1 d1r d1w <<<"$(window "$prefix" "${pids[@]}")"
        n=$((${b:-0} - ${a:-0}))
        [ "$n" -gt 0 ] || fail "no calls counted ($window)"
        report "$2" "$what" "$n" "$all" "$sha" "$i1" "$d1r" "$d1w"
    done
    wait "$bench_pid" || true
    bench_pid=""
}

for i in $(seq 1 "$runs"); do
    for binary in "${binaries[@]}"; do
        measure "$binary" "run $i $(basename "$binary")"
    done
done
