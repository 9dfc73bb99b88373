#!/usr/bin/env bash
# The fuzz targets in one command (docs/src/contributing/tests.md, "Fuzzing"):
#
#   fuzz/run.sh [SECONDS] [TARGET…]     default: 180 s each, every target
#
# Installs cargo-fuzz (pinned, `cargo install --locked`) if it is missing, then runs each
# target with libFuzzer for SECONDS on the committed corpus (fuzz/corpus/<target>/) plus
# the inputs earlier runs found (target/fuzz-corpus/<target>/, where new ones are written,
# so the committed corpus stays small) and the JSON-RPC/SSE dictionary. A crash stops the
# run; its input is in fuzz/artifacts/<target>/ — fix it, and keep the input in
# fuzz/corpus/<target>/ so that `cargo test` (tests/fuzz_corpus.rs) checks it from then on.
#
# cargo-fuzz drives rustc with nightly-only flags (-Z…). On a stable toolchain
# RUSTC_BOOTSTRAP=1 lets them through; this script sets it. The sanitizer is off by
# default (the crate forbids unsafe code, and it runs ~3× faster); FUZZ_SANITIZER=address
# turns AddressSanitizer on.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_FUZZ_VERSION=0.13.2
SECONDS_EACH=${1:-180}
shift || true
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
    TARGETS=(envelope rewrite sse sse_upstream id_restore)
fi

if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
    echo "fuzz/run.sh: installing cargo-fuzz $CARGO_FUZZ_VERSION" >&2
    cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi

export RUSTC_BOOTSTRAP=1
SANITIZER=${FUZZ_SANITIZER:-none}
for target in "${TARGETS[@]}"; do
    found="target/fuzz-corpus/$target"
    mkdir -p "$found"
    echo "fuzz/run.sh: $target for ${SECONDS_EACH}s" >&2
    cargo fuzz run --sanitizer "$SANITIZER" "$target" "$found" "fuzz/corpus/$target" -- \
        -max_total_time="$SECONDS_EACH" -dict=fuzz/dict/jsonrpc.dict -max_len=4096 \
        -print_final_stats=1
done
