#!/usr/bin/env bash
# The project's one test command (README.md, "Test it"). On a fresh machine it first installs,
# idempotently, what the tests need, then checks formatting and lints and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

# One build from a clean tree: incremental compilation's caches (gigabytes) would never
# be read again.
export CARGO_INCREMENTAL=0

# Each step's start, in seconds since this script's: where the suite's time goes.
step() { echo "== .ci/test.sh +${SECONDS}s: $*" >&2; }

# Third-party MCP servers for the interop tests (pinned; a second run is a no-op),
# installed while the lints run: on a fresh machine most of it is waiting on the
# registries, which overlaps the compiler's work. Its output is shown once it is done.
mkdir -p target
setup_log=target/interop-setup.log
tests/interop/setup.sh >"$setup_log" 2>&1 &
setup=$!
trap 'kill "$setup" 2>/dev/null || true' EXIT

step "fmt, clippy"
cargo fmt --all -- --check
cargo clippy --locked --workspace --all-targets -- -D warnings
if ! wait "$setup"; then
    cat "$setup_log"
    echo "tests/interop/setup.sh failed (above)" >&2
    exit 1
fi
cat "$setup_log"
step "the book"
# The book (docs/, mdBook; setup.sh installed it): it must build. Its links, examples,
# configuration reference and dashboard are checked by the tests (tests/docs/).
# A warning (an HTML tag left open, which hides text) fails it too.
book="$("${INTEROP_TOOLS:-target/interop-tools}/mdbook/bin/mdbook" build docs 2>&1)" || { echo "$book"; exit 1; }
if grep -E '^ *(WARN|ERROR) ' <<<"$book"; then echo "mdbook build docs: warnings above" >&2; exit 1; fi
# Every test side by side (.config/nextest.toml says how many at once and
# which run alone); the tools are installed already, so no test process runs setup.sh
# again. Without cargo-nextest, cargo's own runner: one binary after another, the tests of
# each on threads of one process, but the integration suite's modules that run alone
# under nextest last, one test at a time.
export MCP_PROXY_TEST_TOOLS_READY=1
step "the tests"
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --locked --workspace
    step "the doc tests"
    cargo test --locked --doc
else
    alone=(overload:: limits:: upgrade:: redis_ha:: eras_conformance::)
    cargo test --locked --workspace --lib --bins --test docs --test fuzz_corpus
    cargo test --locked --test suite -- "${alone[@]/#/--skip=}"
    cargo test --locked --test suite -- --test-threads=1 "${alone[@]}"
    cargo test --locked --doc
fi
# The binary, checked with the features a release build has (without the
# dev-dependencies', which the tests' build unifies in): code that compiles only in test
# builds fails here. Checked in the dev profile, whose dependency checks clippy's run
# above mostly made already (35 s; `--release` would check every dependency again, 1½
# minutes, for no code of the proxy's that differs: it has no `cfg(debug_assertions)`).
# Not built: the 5-minute optimised build would add nothing but codegen the tests cannot
# reach. The benches are type-checked by clippy above; benches/run.sh builds them.
step "the binary checked"
cargo check --locked --bin mcp-session-proxy
step "done"
