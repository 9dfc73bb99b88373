#!/usr/bin/env bash
# The proxy's cost per call against nginx's, counted by the kernel (benches/README.md,
# "Per-call profile"):
#
#   benches/profile.sh [PROXY_BINARY] [--record]
#
# Runs saturation rounds of `cargo bench --bench proxy` (the proxy's release binary, or
# PROXY_BINARY through MCP_BENCH_PROXY_BIN) and, in the measured window of each hop —
# nginx, the proxy with data-layer sessions, the proxy passing an old client through (the
# hop alone) — measures for 3 s, per `tools/call` answered in those 3 s (the proxy's own
# /metrics; nginx's from the rate the load generator reported for its window):
#
#   round 1: CPU time split into user space and kernel (the processes' own /proc
#            accounting: utime, stime), task-clock, context switches, system calls, and
#            the bytes written through write/writev (/proc/PID/io wchar, which counts
#            neither recv nor send: the proxy's own HTTP/1.1 loops write with send);
#   round 2: heap allocations per call (the proxy only: uprobes on the allocator's
#            entry points, counted by `perf stat`; uprobes slow the process, not the count),
#            then memory moved per call: libc's memcpy/memmove calls, bytes, the
#            functions that call them most, the lengths moved most and the sites that
#            move most (uprobes recorded for 1 s; needs libc6-dbg; file:line with a
#            binary built with CARGO_PROFILE_RELEASE_DEBUG=line-tables-only);
#   round 3 (--record): `perf record` of each hop (DWARF call graphs), folded into
#            target/profile/{nginx,proxy,pass-through}.folded, drawn as flame graphs
#            (.svg) and as differential flame graphs against nginx (diff-*.svg, with
#            inferno, installed into target/tools on first use), and each hop's samples
#            shared out by component (the kernel, hyper, tokio, memcpy, mimalloc…).
#
#   benches/profile.sh [PROXY_BINARY] --paced
#
# Instead of the rounds above: the paced runs of `run.sh` (2,000 req/s, 8 connections,
# JSON and SSE) and, in nginx's and the proxy's windows, the kernel's events per call
# over 5 s — task-clock, context switches, CPU migrations, page faults, and the system
# calls by kind (epoll_wait, recvfrom, sendto, writev, others): what each hop asks of
# the kernel per call at the same pace, where a hop pays a wake-up for every call. The
# calls are the rate times the 5 s (the load is an open loop at that rate; each window's
# measured rate, printed at the end, says whether the hop kept up with it).
#
# The machine must be quiet: another build beside it changes every figure.
set -euo pipefail
cd "$(dirname "$0")/.."

binary=""
record=0
paced=0
for arg in "$@"; do
    case "$arg" in
        --record) record=1 ;;
        --paced) paced=1 ;;
        *) binary=$(realpath "$arg") ;;
    esac
done
command -v perf >/dev/null || { echo "profile.sh: perf is not installed (apt-get install linux-perf)" >&2; exit 2; }
if [ "$paced" = 1 ] && [ "$record" = 1 ]; then
    echo "profile.sh: --paced and --record are separate runs" >&2
    exit 2
fi
out=target/profile
mkdir -p "$out"
if [ "$record" = 1 ] && ! [ -x target/tools/bin/inferno-flamegraph ]; then
    echo "profile.sh: installing inferno into target/tools (once)" >&2
    cargo install --quiet --locked --root target/tools inferno
fi

rounds=2
[ "$record" = 1 ] && rounds=3
log=$(mktemp)
probes=()
bench=""
cleanup() {
    # An early exit leaves no load behind (the bench ends its children on SIGTERM), and
    # no probe.
    if [ -n "$bench" ] && kill -0 "$bench" 2>/dev/null; then
        pkill -TERM -P "$bench" 2>/dev/null || true
        kill "$bench" 2>/dev/null || true
    fi
    for p in "${probes[@]}"; do perf probe -q -d "$p" 2>/dev/null || true; done
    rm -f "$log"
}
trap cleanup EXIT
# Probes a killed run left behind would make adding them fail.
perf probe -q -d 'mcpprofile:*' 2>/dev/null || true
rate=2000
if [ "$paced" = 1 ]; then
    env ${binary:+MCP_BENCH_PROXY_BIN="$binary"} cargo bench --bench proxy -- \
        --only paced --rate "$rate" --duration 8 --warmup 1 >/dev/null 2>"$log" &
else
    env ${binary:+MCP_BENCH_PROXY_BIN="$binary"} cargo bench --bench proxy -- \
        --only saturation --no-floor-variants --rounds "$rounds" --duration 10 --warmup 1 \
        >/dev/null 2>"$log" &
fi
bench=$!

# Waits until the bench's log says round $1 of hop $2 has started, then 1.5 s more (its
# warm-up).
window() {
    until grep -q "saturation round $1/$rounds: $2 (" "$log"; do
        kill -0 "$bench" 2>/dev/null || { cat "$log" >&2; exit 1; }
        sleep 0.1
    done
    sleep 1.5
}
exe=$(realpath "${binary:-target/release/mcp-session-proxy}")
# The proxy: the process running that executable (not this script, whose command line
# names it too).
proxy_pid() {
    local p
    for p in $(pgrep -f -- "$(basename "$exe")"); do
        if [ "$(readlink "/proc/$p/exe" 2>/dev/null)" = "$exe" ]; then
            echo "$p"
            return
        fi
    done
}
# A count of calls, or the script stops saying whose it could not count.
counted() { # label count
    [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -gt 0 ] || { echo "profile.sh: no calls counted for $1" >&2; exit 1; }
}
# The bench's nginx: the workers of the master started with the bench's own nginx.conf.
nginx_pids() {
    local master
    master=$(pgrep -f "nginx: master process.*nginx.conf" | head -1)
    pgrep -P "$master" | paste -sd, -
}
# The hop's tools/call answered so far: the proxy's /metrics, or nginx's upstream requests
# (the bench's nginx serves nothing else in the window).
proxy_calls() {
    local addr
    addr=$(ss -ltnp | grep "pid=$(proxy_pid)," | awk '{print $4}' | head -1)
    curl -s "http://$addr/metrics" | awk '/^mcp_proxy_requests_total\{method="tools\/call",outcome="ok"\}/ {print $2}'
}
# utime and stime ticks and wchar bytes of a comma-separated pid list.
proc_totals() {
    local user=0 system=0 wchar=0 pid fields
    for pid in ${1//,/ }; do
        fields=$(sed 's/.*) //' "/proc/$pid/stat")
        user=$((user + $(echo "$fields" | awk '{print $12}')))
        system=$((system + $(echo "$fields" | awk '{print $13}')))
        wchar=$((wchar + $(awk '/^wchar/ {print $2}' "/proc/$pid/io")))
    done
    echo "$user $system $wchar"
}
ticks=$(getconf CLK_TCK)

# The paced profile: per call, what each hop asks of the kernel at the same pace.
if [ "$paced" = 1 ]; then
    kinds="epoll_wait epoll_pwait recvfrom read sendto writev write futex"
    paced_events=task-clock,context-switches,cpu-migrations,page-faults,raw_syscalls:sys_enter
    for kind in $kinds; do paced_events+=",syscalls:sys_enter_$kind"; done
    for tool in JSON SSE; do
        for hop in nginx proxy; do
            until grep -q "paced $rate req/s, $tool: $hop (" "$log"; do
                kill -0 "$bench" 2>/dev/null || { cat "$log" >&2; exit 1; }
                sleep 0.1
            done
            sleep 2 # past the window's warm-up
            if [ "$hop" = nginx ]; then pids=$(nginx_pids || true); else pids=$(proxy_pid); fi
            [ -n "$pids" ] || { echo "profile.sh: no $hop process found" >&2; cat "$log" >&2; exit 1; }
            stat=$(perf stat -x, -e "$paced_events" -p "$pids" -- sleep 5 2>&1) ||
                { echo "profile.sh: perf stat failed: $stat" >&2; exit 1; }
            echo "$hop, $tool at $rate req/s: per call ($((rate * 5)) calls in 5 s)"
            echo "$stat" | awk -F, -v n=$((rate * 5)) '
                $3 == "task-clock" { printf "  %-24s %6.1f us (slowed by the tracepoints below)\n", "task-clock", $1 * 1000 / n }
                $3 == "raw_syscalls:sys_enter" { all = $1 }
                $3 ~ /^syscalls:sys_enter_/ { sub(/.*sys_enter_/, "", $3); if ($1 > 0) { printf "  %-24s %6.2f\n", $3, $1 / n }; named += $1 }
                $3 ~ /^(context-switches|cpu-migrations|page-faults)$/ { printf "  %-24s %6.2f\n", $3, $1 / n }
                END { printf "  %-24s %6.2f\n  %-24s %6.2f\n", "system calls, all", all / n, "… others", (all - named) / n }'
        done
    done
    wait "$bench" || { cat "$log" >&2; exit 1; }
    bench=""
    # Each window's rate as the load generator measured it: the calls counted above
    # are the rate times the 5 s only if the hop kept up with it.
    grep -A1 "paced $rate req/s" "$log" | grep -v '^--$'
    exit 0
fi

# Prints the per-call figures of `n` calls: CPU split and bytes written (from two
# proc_totals readings) and perf stat's counts.
per_call() { # n totals-before totals-after perf-stat-output
    local u1 s1 w1 u2 s2 w2
    read -r u1 s1 w1 <<<"$2"
    read -r u2 s2 w2 <<<"$3"
    awk -v n="$1" -v t="$ticks" -v u=$((u2 - u1)) -v s=$((s2 - s1)) -v w=$((w2 - w1)) 'BEGIN {
        printf "  CPU per call, user / kernel:  %.1f / %.1f us\n", u * 1e6 / t / n, s * 1e6 / t / n
        # A hop writing with send leaves only its wake-ups (8-byte eventfd writes) here.
        if (w / n >= 64) printf "  bytes written per call (write, writev): %.0f\n", w / n
        else printf "  bytes written per call: not counted (written with send, which wchar misses)\n" }'
    echo "$4" | awk -F, -v n="$1" '
        $3 == "task-clock" { printf "  task-clock per call:          %.1f us\n", $1 * 1000 / n }
        $3 == "context-switches" { printf "  context switches per call:    %.2f\n", $1 / n }
        $3 == "page-faults" { printf "  page faults per call:         %.3f\n", $1 / n }
        $3 == "raw_syscalls:sys_enter" { printf "  system calls per call:        %.2f\n", $1 / n }'
}
stat_round() { # label pids calls-function
    local label=$1 pids=$2 before after a b n stat
    before=$($3)
    a=$(proc_totals "$pids")
    stat=$(perf stat -x, -e task-clock,context-switches,page-faults,raw_syscalls:sys_enter -p "$pids" -- sleep 3 2>&1)
    b=$(proc_totals "$pids")
    after=$($3)
    n=$((${after:-0} - ${before:-0}))
    counted "$label" "$n"
    echo "$label: tools/call in 3 s: $n"
    per_call "$n" "$a" "$b" "$stat"
}

# Round 1: CPU split, kernel events and bytes through system calls, per call. nginx counts
# nothing the script can read: its calls are the rate the load generator reports for its
# window (its "req/s" line) times the 3 s.
window 1 nginx
npids=$(nginx_pids)
a=$(proc_totals "$npids")
nstat=$(perf stat -x, -e task-clock,context-switches,page-faults,raw_syscalls:sys_enter -p "$npids" -- sleep 3 2>&1)
b=$(proc_totals "$npids")
window 1 proxy
stat_round "proxy (data-layer sessions)" "$(proxy_pid)" proxy_calls
window 1 "proxy pass-through"
stat_round "proxy pass-through (the hop alone)" "$(proxy_pid)" proxy_calls
# nginx's per-call figures, from the rate the bench measured for it in round 1.
until grep -A1 "saturation round 1/$rounds: nginx (" "$log" | grep -q "req/s"; do
    kill -0 "$bench" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.2
done
nrate=$(grep -A1 "saturation round 1/$rounds: nginx (" "$log" | grep -o '[0-9.]* req/s' | head -1 | awk '{print $1}')
n=$(awk -v r="$nrate" 'BEGIN { printf "%d", r * 3 }')
counted nginx "$n"
echo "nginx: tools/call in 3 s (from its window's rate, $nrate req/s): $n"
per_call "$n" "$a" "$b" "$nstat"

# Round 2: heap allocations and memory moved per call, counted by uprobes. A uprobe costs
# the process microseconds, so the calls are counted by one too, in the same `perf stat`
# (the proxy's /metrics would also count the calls made at full speed while the probes
# are being placed): on `exchange::encode_request`, which writes the head of each
# request to the upstream, once per `tools/call` on either hop. (`HttpUpstream::request_to`,
# counted before, is no longer on the hop alone's path: its fields pass from the
# client's own map.) Allocations: the entry points the standard library's allocator
# calls — `malloc`, `calloc`, `realloc`, `posix_memalign`, which mimalloc defines in the
# executable (src/main.rs) — and, for builds from before, the `mimalloc` crate's aligned
# ones. Memory moved: every call of libc's memcpy/memmove, with its length and where it
# returns to (the calling function, found with addr2line in the proxy's executable);
# glibc picks its implementation for the CPU (an IFUNC), which only its debugging
# symbols name (Debian: libc6-dbg): a probe goes on each candidate found, and only the
# chosen one fires.
bin=$(readlink -f "/proc/$(proxy_pid)/exe")
# The counting probe's place: `exchange::encode_request`'s address in the executable's
# file (perf probe takes no Rust path), its symbol's address less its segment's shift.
call_at=$(nm "$bin" 2>/dev/null | awk '$2 ~ /^[tT]$/ && $3 ~ /8exchange14encode_request/ && !found {print $1; found = 1}' || true)
if [ -n "$call_at" ]; then
    # The text segment's address less its file offset (readelf: Offset, VirtAddr).
    shift_by=$(readelf -lW "$bin" | awk '$1 == "LOAD" && $0 ~ / R E / && !found {print $3, $2; found = 1}' |
        python3 -c "import sys; v, o = sys.stdin.read().split(); print(int(v, 16) - int(o, 16))" ||
        true)
    # (Counted where the function is called out of line: in the release build every
    # caller calls it, checked with objdump; a build that inlined it would count less.)
    if [ -n "$shift_by" ] &&
        perf probe -q -x "$bin" -a "mcpprofile:call=$(printf '0x%x' $((16#$call_at - shift_by)))" 2>/dev/null; then
        probes+=("mcpprofile:call")
    else
        call_at=""
    fi
fi
events=()
for fn in malloc calloc realloc posix_memalign mi_malloc_aligned mi_zalloc_aligned mi_realloc_aligned; do
    if perf probe -q -x "$bin" -a "mcpprofile:$fn=$fn" 2>/dev/null; then
        probes+=("mcpprofile:$fn")
        events+=("mcpprofile:$fn")
    fi
done
[ "${#events[@]}" -gt 0 ] || echo "allocations: no uprobe could be placed on mimalloc in $bin (perf probe -x)"
libc=$(awk '$6 ~ /\/libc\.so/ {print $6; exit}' "/proc/$(proxy_pid)/maps")
moved=()
for impl in avx512_unaligned_erms evex_unaligned_erms avx_unaligned_erms avx_unaligned_erms_rtm \
    sse2_unaligned_erms avx512_unaligned evex_unaligned avx_unaligned avx_unaligned_rtm \
    sse2_unaligned ssse3; do
    if perf probe -q -x "$libc" -a "mcpprofile:m_$impl=__memmove_$impl len=%dx:u64 ret=+0(%sp):x64" 2>/dev/null; then
        probes+=("mcpprofile:m_$impl")
        moved+=("mcpprofile:m_$impl")
    fi
done
[ "${#moved[@]}" -gt 0 ] ||
    echo "memory moved: no uprobe could be placed on libc's memmove in $libc (its symbols: apt-get install libc6-dbg)"
if [ -z "$call_at" ]; then
    echo "round 2: no uprobe could be placed on exchange::encode_request in $bin to count the calls: skipped"
elif [ "${#events[@]}" -gt 0 ] || [ "${#moved[@]}" -gt 0 ]; then
    for hop in proxy "proxy pass-through"; do
        window 2 "$hop"
        pid=$(proxy_pid)
        # Where the executable is mapped (its first mapping: file offset 0).
        base=$(awk -v exe="$exe" '$6 == exe {split($1, a, "-"); print a[1]; exit}' "/proc/$pid/maps")
        stat=$(perf stat -x, -e mcpprofile:call $(printf -- '-e %s ' "${events[@]}" "${moved[@]}") \
            -p "$pid" -- sleep 3 2>&1)
        count() { echo "$stat" | awk -F, -v e="$1" '$3 ~ e { total += $1 } END { print total + 0 }'; }
        n=$(count '^mcpprofile:call$')
        counted "$hop" "$n"
        if [ "${#events[@]}" -gt 0 ]; then
            echo "$hop: heap allocations per call (tools/call in 3 s under uprobes: $n)"
            echo "$stat" | awk -F, -v n="$n" '$3 ~ /^mcpprofile:(mi_|malloc|calloc|realloc|posix_memalign)/ { sub(/.*:/, "", $3); printf "  %-20s %.1f\n", $3, $1 / n; total += $1 }
                END { printf "  %-20s %.1f\n", "all", total / n }'
        fi
        if [ "${#moved[@]}" -gt 0 ]; then
            # The lengths and callers: `perf record`, which drops events that come faster
            # than it writes them (what it keeps is spread over the calls alike).
            perf record -q $(printf -- '-e %s ' "${moved[@]}") -o "$out/moved.data" -p "$pid" -- sleep 1 2>/dev/null
            echo "$hop: memory moved per call (memcpy and memmove)"
            perf script -i "$out/moved.data" -F trace 2>/dev/null |
                python3 benches/support/moved.py \
                    --per-call "$(awk -v m="$(count '^mcpprofile:m_')" -v n="$n" 'BEGIN { print m / n }')" \
                    --base "$base" --exe "$exe"
            rm -f "$out/moved.data"
        fi
    done
fi

# Round 3: where the time goes, as flame graphs.
if [ "$record" = 1 ]; then
    # Round 3 runs the hops in this order (the bench rotates the order every round).
    for hop in proxy "proxy pass-through" nginx; do
        window 3 "$hop"
        file=$out/$(echo "$hop" | sed 's/proxy pass-through/pass-through/')
        if [ "$hop" = nginx ]; then pids=$(nginx_pids); else pids=$(proxy_pid); fi
        perf record -q -F 2999 --call-graph dwarf,8192 -o "$file.data" -p "$pids" -- sleep 3 2>/dev/null
    done
    # Folded after every window: unwinding takes longer than a window.
    for hop in nginx proxy pass-through; do
        file=$out/$hop
        perf script -i "$file.data" 2>/dev/null | target/tools/bin/inferno-collapse-perf >"$file.folded"
        target/tools/bin/inferno-flamegraph --title "$hop" <"$file.folded" >"$file.svg"
        rm -f "$file.data"
    done
    for hop in proxy pass-through; do
        target/tools/bin/inferno-diff-folded "$out/nginx.folded" "$out/$hop.folded" |
            target/tools/bin/inferno-flamegraph --title "$hop against nginx" >"$out/diff-$hop.svg"
    done
    echo "flame graphs: $out/{nginx,proxy,pass-through}.svg, against nginx: $out/diff-{proxy,pass-through}.svg"
    # Where each hop's samples were, by component (benches/README.md's table): the
    # kernel's whenever a system call or an interrupt is on the stack, else the
    # component of the frame the sample was in.
    for hop in nginx proxy pass-through; do
        echo "$hop: share of samples"
        awk '{
            n = $NF; $NF = ""; m = split($0, f, ";"); leaf = f[m]; cat = ""
            for (i = 1; i <= m; i++)
                if (f[i] ~ /entry_SYSCALL|do_syscall_64|asm_sysvec|asm_common_interrupt|ret_from_fork/) { cat = "kernel"; break }
            if (cat == "") {
                if (leaf ~ /memcpy|memmove/) cat = "moved memory (memcpy)"
                else if (leaf ~ /(^| )_?mi_/) cat = "mimalloc"
                else if (leaf ~ /hyper|httparse|http::/) cat = "hyper / http"
                else if (leaf ~ /tokio|mio/) cat = "tokio"
                else if (leaf ~ /serde/) cat = "serde"
                else if (leaf ~ /mcp_session_proxy/) cat = "the proxy'"'"'s code"
                else if (leaf ~ /ngx_/) cat = "nginx'"'"'s code"
                else cat = "other user space"
            }
            share[cat] += n; total += n
        } END { for (c in share) printf "  %5.1f%%  %s\n", 100 * share[c] / total, c }' "$out/$hop.folded" | sort -rn
    done
fi
wait "$bench" || { cat "$log" >&2; exit 1; }
