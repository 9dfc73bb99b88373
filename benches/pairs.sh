#!/usr/bin/env bash
# Two proxy builds compared in alternated saturation rounds (benches/README.md,
# "Comparing two builds"):
#
#   benches/pairs.sh BEFORE_BINARY AFTER_BINARY [PAIRS]        (3 pairs unless told)
#
# One bench binary runs `--only saturation --no-floor-variants` with each proxy binary
# in turn (MCP_BENCH_PROXY_BIN), PAIRS times, so that both builds meet the machine as it
# is in the same minutes: its speed moves more from hour to hour than a small change
# moves the proxy. Every round measures nginx, the proxy with data-layer sessions and
# the hop alone (an old client passed through) against the same upstream. Prints per
# round the CPU per call of both hops as ratios to nginx's in that round, the req/s
# ratio, and user / kernel; the rounds' logs are kept in target/pairs/.
#
# The machine must be quiet: nothing else compiling or measuring beside it.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 2 ]; then
    sed -n '2,15p' "$0" >&2
    exit 2
fi
before=$(realpath "$1")
after=$(realpath "$2")
pairs=${3:-3}
for binary in "$before" "$after"; do
    [ -x "$binary" ] || { echo "benches/pairs.sh: $binary is not an executable" >&2; exit 2; }
done
command -v nginx >/dev/null || {
    echo "benches/pairs.sh: nginx is missing (benches/run.sh installs it)" >&2
    exit 2
}

bench=$(cargo bench --bench proxy --no-run 2>&1 |
    sed -n 's/^ *Executable benches\/proxy\.rs (\(.*\))$/\1/p')
[ -x "$bench" ] || { echo "benches/pairs.sh: could not build the bench binary" >&2; exit 1; }
out=target/pairs
mkdir -p "$out"

# One round's figures from its log: sessions CPU / nginx's, hop CPU / nginx's, req/s
# ratio, and the user / kernel line.
figures() {
    awk '
        /CPU time per `tools\/call` at saturation/ {
            if (match($0, /nginx [0-9.]+ \(upstream/)) nginx = substr($0, RSTART + 6, RLENGTH - 16)
            if (match($0, /proxy [0-9.]+ \(upstream/)) proxy = substr($0, RSTART + 6, RLENGTH - 16)
        }
        /hop alone/ && match($0, /proxy CPU [0-9.]+ µs per call/) {
            split(substr($0, RSTART, RLENGTH), words, " "); hop = words[3]
        }
        /saturation, JSON/ && match($0, /proxy\/nginx \*\*[0-9.]+/) {
            ratio = substr($0, RSTART + 14, RLENGTH - 14)
        }
        /user \/ kernel \(µs/ && match($0, /nginx .*/) { uk = substr($0, RSTART) }
        END {
            if (nginx == "" || proxy == "" || hop == "") { print "(no figures: see the log)"; exit }
            printf "sessions %.1f µs %.2f×  hop %.1f µs %.2f×  nginx %.1f µs  req/s %s×  [%s]\n",
                proxy, proxy / nginx, hop, hop / nginx, nginx, ratio, uk
        }' "$1"
}

echo "sessions and the hop alone: CPU per call at saturation, and its ratio to nginx's in the same round"
for i in $(seq 1 "$pairs"); do
    for side in before after; do
        binary=$before
        [ "$side" = after ] && binary=$after
        log="$out/$side.$i.log"
        MCP_BENCH_PROXY_BIN="$binary" "$bench" --bench --only saturation --no-floor-variants \
            >"$log" 2>&1 ||
            { echo "benches/pairs.sh: round $i ($side) failed; see $log" >&2; exit 1; }
        printf 'pair %d %-6s  %s\n' "$i" "$side" "$(figures "$log")"
    done
done
