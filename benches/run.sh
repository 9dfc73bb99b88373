#!/usr/bin/env bash
# The proxy's benchmark in one command (docs/src/tune.md, "Performance"):
#
#   benches/run.sh [--quick] [OPTIONS]      (benches/run.sh --help lists the options)
#
# Installs nginx-light (the one-hop yardstick) and redis-server (the Redis store's rows)
# when missing, then runs
# `cargo bench --bench proxy`: the fast upstream, nginx and the proxy's release binary on
# loopback, one table at the end, also written to target/bench-results.md.
set -euo pipefail
cd "$(dirname "$0")/.."

# Installs Debian's package $2 (for $3) when the command $1 is missing.
need() {
    command -v "$1" >/dev/null 2>&1 && return
    echo "benches/run.sh: installing $2 ($3)" >&2
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then sudo=(sudo); fi
    if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "$2"; then
        "${sudo[@]}" apt-get update
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "$2"
    fi
}

need nginx nginx-light "the yardstick for one HTTP hop"
need redis-server redis-server "the Redis session store's rows"

exec cargo bench --bench proxy -- "$@"
