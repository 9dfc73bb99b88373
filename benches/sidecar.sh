#!/usr/bin/env bash
# The sidecar benchmark in one command (docs/src/front/stdio.md, "Side by side with supergateway"):
#
#   benches/sidecar.sh [--quick]
#
# Installs, idempotently, the stdio server both sides run (the official "everything"
# server, tests/interop/setup.sh) and supergateway, pinned by benches/sidecar/package-lock.json
# (into target/bench-tools/supergateway), then runs `cargo bench --bench sidecar`: the
# proxy's release binary and supergateway in front of the same stdio server, one table at
# the end, also written to target/bench-sidecar.md.
set -euo pipefail
cd "$(dirname "$0")/.."

tests/interop/setup.sh >&2

DEST=target/bench-tools/supergateway
STAMP="$DEST/.lock-sha256"
WANT=$(sha256sum benches/sidecar/package-lock.json | cut -d' ' -f1)
if [ ! -f "$DEST/node_modules/supergateway/dist/index.js" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
    echo "benches/sidecar.sh: npm ci supergateway -> $DEST" >&2
    rm -rf "$DEST"
    mkdir -p "$DEST"
    cp benches/sidecar/package.json benches/sidecar/package-lock.json "$DEST/"
    (cd "$DEST" && npm ci --no-audit --no-fund --loglevel=error >&2)
    echo "$WANT" > "$STAMP"
fi

exec cargo bench --bench sidecar -- "$@"
