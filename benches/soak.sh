#!/usr/bin/env bash
# The soak benchmark in one command (benches/README.md, "The soak benchmark"):
#
#   benches/soak.sh [--quick] [OPTIONS]      (benches/soak.sh --help lists the options)
#
# Runs `cargo bench --bench soak`: 20,000 sessions created, used and deleted or left to
# expire through the proxy's release binary (under `ulimit -n 1024`) in front of the fast
# upstream; the proxy's file descriptors and memory and the upstream's sessions before and
# after, in one table, also written to target/bench-soak.md. About 1.5 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v prlimit >/dev/null || { echo "benches/soak.sh: needs prlimit (util-linux)" >&2; exit 1; }
exec cargo bench --bench soak -- "$@"
