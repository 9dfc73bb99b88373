#!/usr/bin/env bash
# The project's one test command (README.md, "Tests"). On a fresh machine it first installs,
# idempotently, what the tests need, then checks formatting and lints and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

# Third-party MCP servers for the interop tests (pinned; a second run is a no-op).
tests/interop/setup.sh

cargo fmt --all -- --check
cargo clippy --locked --all-targets -- -D warnings
cargo test --locked
# The release binary the Dockerfile builds, and the benchmark (built, not run).
cargo build --release --locked --bin mcp-session-proxy
cargo bench --locked --no-run
