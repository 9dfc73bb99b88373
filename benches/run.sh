#!/usr/bin/env bash
# The proxy's benchmark in one command (README.md, "Performance"):
#
#   benches/run.sh [--quick] [OPTIONS]      (benches/run.sh --help lists the options)
#
# Installs nginx-light (the one-hop yardstick) and redis-server (the Redis store's rows)
# when missing, then runs
# `cargo bench --bench proxy`: the fast upstream, nginx and the proxy's release binary on
# loopback, one table at the end, also written to target/bench-results.md.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v nginx >/dev/null 2>&1; then
    echo "benches/run.sh: installing nginx-light (the yardstick for one HTTP hop)" >&2
    SUDO=()
    if [ "$(id -u)" -ne 0 ]; then SUDO=(sudo); fi
    if ! "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y nginx-light; then
        "${SUDO[@]}" apt-get update
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y nginx-light
    fi
fi

if ! command -v redis-server >/dev/null 2>&1; then
    echo "benches/run.sh: installing redis-server (the Redis session store's rows)" >&2
    SUDO=()
    if [ "$(id -u)" -ne 0 ]; then SUDO=(sudo); fi
    if ! "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server; then
        "${SUDO[@]}" apt-get update
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server
    fi
fi

exec cargo bench --bench proxy -- "$@"
