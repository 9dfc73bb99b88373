#!/usr/bin/env bash
# The proxy's release binary built with profile-guided optimisation (PGO), trained on the
# benchmark's workload (docs/src/tune.md, "A faster binary"):
#
#   benches/pgo.sh [--out PATH]     (~20 minutes on 2 cores; PATH: target/pgo/mcp-session-proxy)
#
# 1. builds the release binary instrumented (`-Cprofile-generate`), in target/pgo/;
# 2. runs the benchmark's quick scenarios against it (`benches/run.sh --quick`: data-layer
#    sessions, old clients passed through, sessions/create, the Redis and sealed stores,
#    both eras of upstream), which writes what ran how often;
# 3. merges that with the toolchain's own llvm-profdata (rustup's llvm-tools component,
#    added when missing: its LLVM must be rustc's);
# 4. builds the release binary again with it (`-Cprofile-use`) and copies it to PATH.
#
# The profile is made afresh every time, from the source being built, so it never goes
# stale. Only the proxy's binary is trained: the benchmark's own processes (the load
# generator, the upstream) are built without LTO, as they do not need it.
set -euo pipefail
cd "$(dirname "$0")/.."

out=target/pgo/mcp-session-proxy
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out=$2; shift 2 ;;
        --out=*) out=${1#--out=}; shift ;;
        -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "pgo.sh: unknown argument $1 (--out PATH)" >&2; exit 2 ;;
    esac
done

# llvm-profdata of rustc's own LLVM: a profile is read only by the LLVM that wrote it.
host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if ! [ -x "$profdata" ]; then
    command -v rustup >/dev/null || {
        echo "pgo.sh: $profdata is missing and there is no rustup to add llvm-tools with" >&2
        exit 2
    }
    echo "pgo.sh: adding rustup's llvm-tools component (llvm-profdata)" >&2
    rustup component add llvm-tools
fi

dir=$PWD/target/pgo
rm -rf "$dir/raw" "$dir/merged.profdata"
mkdir -p "$dir"

echo "pgo.sh: 1/4 building the instrumented binary" >&2
# With --target, RUSTFLAGS reach only the binary's crates, not build scripts or proc
# macros (which would write profiles of their own while compiling).
RUSTFLAGS="-Cprofile-generate=$dir/raw" CARGO_TARGET_DIR="$dir/instrumented" \
    cargo build --release --locked --target "$host" --bin mcp-session-proxy
rm -rf "$dir/raw"

echo "pgo.sh: 2/4 training it on the benchmark's quick scenarios" >&2
# The memory scenario (100,000 idle sessions) only grows maps; traces would train the
# exporter, which is off by default.
CARGO_PROFILE_BENCH_LTO=false CARGO_PROFILE_BENCH_CODEGEN_UNITS=16 \
    MCP_BENCH_PROXY_BIN="$dir/instrumented/$host/release/mcp-session-proxy" \
    benches/run.sh --quick --no-nginx --no-floor-variants --only saturation,paced,stores,eras,create \
        >/dev/null
ls "$dir"/raw/*.profraw >/dev/null 2>&1 || {
    echo "pgo.sh: the training run wrote no profile (did the proxy exit cleanly?)" >&2
    exit 1
}

echo "pgo.sh: 3/4 merging $(ls "$dir"/raw/*.profraw | wc -l) profiles" >&2
"$profdata" merge -o "$dir/merged.profdata" "$dir"/raw/*.profraw

echo "pgo.sh: 4/4 building the optimised binary" >&2
RUSTFLAGS="-Cprofile-use=$dir/merged.profdata" CARGO_TARGET_DIR="$dir/optimised" \
    cargo build --release --locked --target "$host" --bin mcp-session-proxy

mkdir -p "$(dirname "$out")"
cp "$dir/optimised/$host/release/mcp-session-proxy" "$out"
echo "pgo.sh: $out" >&2
