#!/usr/bin/env bash
# Installs the third-party tools used by the interop tests into
# $REPO/target/interop-tools/ (or $INTEROP_TOOLS), idempotently: every part has
# its own stamp and is reinstalled only when its pinned inputs change; a run with
# nothing to do takes well under a second.
#   npm/               @modelcontextprotocol/server-everything, from npm/package-lock.json
#   venv/              Python venv with the official MCP Python SDK 1.x, from requirements.txt
#   venv2/             Python venv with the official MCP Python SDK 2.x (its 2026-07-28
#                      client), from requirements-sdk2.txt
#   node22/            Node.js 22 (npm package `node`, exact version), from node22/package-lock.json;
#                      the conformance suite needs Node >= 22
#   conformance-2025/  @modelcontextprotocol/conformance 0.1.16 (--spec-version 2025-11-25)
#   conformance-2026/  @modelcontextprotocol/conformance 0.2.0-alpha.12 (adds 2026-07-28)
#   sdk/               @modelcontextprotocol/sdk 1.x + zod (conformance/fixture-server.mjs,
#                      TypeScript SDK client tests)
#   inspector/         @modelcontextprotocol/inspector 2.12.0, the official MCP Inspector; its
#                      connection CLI `mcpdo` (tests/suite/inspector.rs) runs on node22/
#   ts2/               the MCP TypeScript SDK 2.x: @modelcontextprotocol/server 2.4.0, client 2.4.0,
#                      node 2.1.2 (node:http adapter), ext-tasks 0.2.2, from ts2/package-lock.json;
#                      tests/interop/ts2/*.mjs load it: server.mjs (a 2026-07-28 server, modern-only
#                      or dual), client.mjs (the v2 Client) and tasks-client.mjs (ext-tasks), Node >= 20
#   oauth/             oidc-provider 9.13.3, a real OAuth 2.1 authorization server, from
#                      oauth/package-lock.json; tests/interop/oauth/server.mjs runs on it
#   mdbook/            mdBook 0.5.4 (cargo install --locked --debug, without its server and watcher):
#                      .ci/test.sh builds the book in docs/ with it
# The fixtures in this directory that run on these (tests/interop/README.md, "Peers of every era"):
#   ts2/server.mjs     TypeScript SDK 2.x server: --mode reject (2026-07-28 only; initialize
#                      refused, 400 -32022 with data.supported), --mode stateless (dual; 2025
#                      served per request, no session), --mode stdio [--legacy serve|reject]
#   ts2/client.mjs, ts2/tasks-client.mjs   the v2 Client (modern, legacy, auto) and ext-tasks
#   sdk2_server.py     Python SDK 2.x server on venv2/: dual (2026-07-28 by header, 2025 with
#                      sessions), HTTP or --stdio
#   sse_server.py      FastMCP on venv/, HTTP+SSE (2024-11-05): GET /sse, POST to the endpoint
#   fastmcp_server.py  FastMCP on venv/, Streamable HTTP 2025-11-25 (or --stdio)
#   oauth/server.mjs   the authorization server (client_credentials, RS256 JWT access tokens
#                      with aud = the resource indicator); clients/oauth_client.mjs, the
#                      TypeScript SDK 1.x client with its ClientCredentialsProvider, on sdk/
# and, from Debian's packages with apt-get when missing (system-wide; root or sudo):
#   curl, openssl      tests/docs runs the shell examples of README.md and the book as written
#   redis-server, nginx-light   the fleet tests (tests/suite/replicas.rs): a real Redis store
#                      and a real load balancer in front of two proxy processes
# Needs: node >= 20 with npm (the TypeScript SDK 2.x needs 20), python3 >= 3.10
# (override with $PYTHON), cargo (mdBook), the npm registry, PyPI and crates.io. Safe to run concurrently
# (serialised with flock).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(git -C "$HERE" rev-parse --show-toplevel 2>/dev/null || (cd "$HERE/../.." && pwd))"
TOOLS="${INTEROP_TOOLS:-$REPO/target/interop-tools}"
PYTHON="${PYTHON:-python3}"

# Each must match the package.json / requirements.txt it names.
EVERYTHING_VERSION="2026.8.31"         # npm/package.json
MCP_PY_VERSION="1.30.0"                # requirements.txt
MCP_PY2_VERSION="2.3.0"                # requirements-sdk2.txt
NODE22_VERSION="22.23.3"               # node22/package.json
CONFORMANCE_2025_VERSION="0.1.16"      # conformance-2025/package.json
CONFORMANCE_2026_VERSION="0.2.0-alpha.12" # conformance-2026/package.json
SDK_VERSION="1.32.2"                   # sdk/package.json
INSPECTOR_VERSION="2.12.0"             # inspector/package.json
TS2_VERSION="2.4.0"                    # ts2/package.json (@modelcontextprotocol/server and client)
OIDC_PROVIDER_VERSION="9.13.3"         # oauth/package.json
MDBOOK_VERSION="0.5.4"                 # crates.io, built with its Cargo.lock (--locked)

mkdir -p "$TOOLS"
# The real path: npm ci with a --prefix reached through a symlink (a worktree's
# target/interop-tools shared with another checkout) takes the root package for a link
# to itself and refuses the lock file ("Missing: <dir>@ from lock file").
TOOLS="$(cd "$TOOLS" && pwd -P)"
if command -v flock >/dev/null 2>&1; then
  exec 9>"$TOOLS/.lock"
  flock 9
fi

# Debian packages: curl for the README's examples; the tests start their own
# redis-server and nginx (no service is enabled or started here). Installed only when
# missing, so a second run is a no-op.
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }
debian=()
have curl || debian+=(curl)
have openssl || debian+=(openssl)
have redis-server || debian+=(redis-server)
have nginx || debian+=(nginx-light)
if [ "${#debian[@]}" -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 || { echo "interop setup: ${debian[*]} missing and no apt-get to install them" >&2; exit 1; }
  SUDO=()
  [ "$(id -u)" = 0 ] || SUDO=(sudo -n)
  echo "interop setup: apt-get install ${debian[*]}"
  if ! "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${debian[@]}" >/dev/null; then
    "${SUDO[@]}" apt-get update -qq >/dev/null
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${debian[@]}" >/dev/null
  fi
  # Debian's packages may start their service; the tests start their own.
  for service in redis-server nginx; do
    if command -v service >/dev/null 2>&1; then "${SUDO[@]}" service "$service" stop >/dev/null 2>&1 || true; fi
  done
  have curl && have openssl && have redis-server && have nginx || { echo "interop setup: ${debian[*]} still missing after apt-get" >&2; exit 1; }
fi

command -v node >/dev/null || { echo "interop setup: node not found" >&2; exit 1; }
command -v npm >/dev/null || { echo "interop setup: npm not found" >&2; exit 1; }
command -v "$PYTHON" >/dev/null || { echo "interop setup: $PYTHON not found" >&2; exit 1; }

node_major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$node_major" -lt 20 ]; then
  echo "interop setup: node >= 20 needed, found $(node --version)" >&2
  exit 1
fi
py_version="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)'; then
  echo "interop setup: python >= 3.10 needed, found $py_version" >&2
  exit 1
fi

hash_of() { sha256sum "$@" | awk '{print $1}' | tr '\n' ' '; }
npm_stamp() { echo "$1 node-major=$node_major files=$(hash_of "$HERE/$2/package.json" "$HERE/$2/package-lock.json")"; }

NODE22="$TOOLS/node22/node_modules/node/bin/node"
C2025_JS="$TOOLS/conformance-2025/node_modules/@modelcontextprotocol/conformance/dist/index.js"
C2026_JS="$TOOLS/conformance-2026/node_modules/@modelcontextprotocol/conformance/dist/index.js"
EVERYTHING_JS="$TOOLS/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
SDK_PKG="$TOOLS/sdk/node_modules/@modelcontextprotocol/sdk/package.json"
MCPDO_JS="$TOOLS/inspector/node_modules/@modelcontextprotocol/inspector/clients/mcpdo/build/mcp-bin.js"
TS2_PKG="$TOOLS/ts2/node_modules/@modelcontextprotocol/server/package.json"
OIDC_PROVIDER_PKG="$TOOLS/oauth/node_modules/oidc-provider/package.json"

# part | stamp it must carry | file that must exist
PARTS=(
  "npm|$(npm_stamp "everything=$EVERYTHING_VERSION" npm)|$EVERYTHING_JS"
  "venv|mcp-python=$MCP_PY_VERSION python=$py_version files=$(hash_of "$HERE/requirements.txt")|$TOOLS/venv/bin/python"
  "venv2|mcp-python=$MCP_PY2_VERSION python=$py_version files=$(hash_of "$HERE/requirements-sdk2.txt")|$TOOLS/venv2/bin/python"
  "node22|$(npm_stamp "node=$NODE22_VERSION" node22)|$NODE22"
  "conformance-2025|$(npm_stamp "conformance=$CONFORMANCE_2025_VERSION" conformance-2025)|$C2025_JS"
  "conformance-2026|$(npm_stamp "conformance=$CONFORMANCE_2026_VERSION" conformance-2026)|$C2026_JS"
  "sdk|$(npm_stamp "sdk=$SDK_VERSION" sdk)|$SDK_PKG"
  "inspector|$(npm_stamp "inspector=$INSPECTOR_VERSION" inspector)|$MCPDO_JS"
  "ts2|$(npm_stamp "ts2=$TS2_VERSION" ts2)|$TS2_PKG"
  "oauth|$(npm_stamp "oidc-provider=$OIDC_PROVIDER_VERSION" oauth)|$OIDC_PROVIDER_PKG"
  "mdbook|mdbook=$MDBOOK_VERSION features=search debug|$TOOLS/mdbook/bin/mdbook"
)
part_ok() { # name stamp file
  [ -f "$TOOLS/.stamp-$1" ] && [ "$(cat "$TOOLS/.stamp-$1")" = "$2" ] && [ -e "$3" ]
}

todo=()
for p in "${PARTS[@]}"; do
  IFS='|' read -r name stamp file <<<"$p"
  part_ok "$name" "$stamp" "$file" || todo+=("$name")
done
if [ "${#todo[@]}" -eq 0 ]; then
  echo "interop setup: up to date ($TOOLS)"
  exit 0
fi
rm -f "$TOOLS/stamp" # stamp of the single-stamp layout before this one

start=$SECONDS

npm_ci() { # part: exact tree from tests/interop/<part>/package-lock.json
  rm -rf "${TOOLS:?}/$1"
  mkdir -p "$TOOLS/$1"
  cp "$HERE/$1/package.json" "$HERE/$1/package-lock.json" "$TOOLS/$1/"
  npm ci --prefix "$TOOLS/$1" --no-audit --no-fund --loglevel=error >/dev/null
}
fail() { echo "interop setup: $*" >&2; exit 1; }

install_npm() {
  echo "interop setup: npm ci @modelcontextprotocol/server-everything@$EVERYTHING_VERSION -> $TOOLS/npm"
  npm_ci npm
  [ -f "$EVERYTHING_JS" ] || fail "$EVERYTHING_JS missing after npm ci"
}

make_venv() { # dir
  rm -rf "$1"
  if ! "$PYTHON" -m venv "$1" >/dev/null 2>&1; then
    # Debian's own python3 ships venv/ensurepip separately.
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "interop setup: python -m venv failed; apt-get install python3-venv"
      apt-get install -y -qq python3-venv >/dev/null || {
        apt-get update -qq >/dev/null && apt-get install -y -qq python3-venv >/dev/null
      }
      rm -rf "$1"
      "$PYTHON" -m venv "$1"
    else
      fail "'$PYTHON -m venv' failed (install python3-venv)"
    fi
  fi
}

pip_install() { # venv requirements
  "$1/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$2"
}

install_venv() {
  echo "interop setup: python $py_version venv -> $TOOLS/venv"
  make_venv "$TOOLS/venv"
  echo "interop setup: pip install mcp==$MCP_PY_VERSION (+ pinned deps)"
  pip_install "$TOOLS/venv" "$HERE/requirements.txt"
  "$TOOLS/venv/bin/python" -c 'from mcp.server.fastmcp import FastMCP, Context' ||
    fail "mcp import check failed"
}

install_venv2() {
  echo "interop setup: python $py_version venv -> $TOOLS/venv2"
  make_venv "$TOOLS/venv2"
  echo "interop setup: pip install mcp==$MCP_PY2_VERSION (+ pinned deps)"
  pip_install "$TOOLS/venv2" "$HERE/requirements-sdk2.txt"
  "$TOOLS/venv2/bin/python" - "$MCP_PY2_VERSION" <<'PY' || fail "mcp $MCP_PY2_VERSION import check failed"
import sys
from importlib.metadata import version
from mcp import Client  # noqa: F401  the 2026-07-28 client
from mcp.client.streamable_http import streamable_http_client  # noqa: F401
got = version("mcp")
sys.exit(0 if got == sys.argv[1] else f"mcp is {got}, expected {sys.argv[1]}")
PY
}

install_node22() {
  # The `node` package's preinstall script fetches node-<os>-<arch>@<same version>
  # from the registry and links its binary to node_modules/node/bin/node.
  echo "interop setup: npm ci node@$NODE22_VERSION -> $TOOLS/node22"
  npm_ci node22
  [ -x "$NODE22" ] || fail "$NODE22 missing after npm ci (were install scripts disabled?)"
  local got
  got="$("$NODE22" --version)" || fail "$NODE22 does not run"
  [ "$got" = "v$NODE22_VERSION" ] || fail "$NODE22 is $got, expected v$NODE22_VERSION"
}

install_conformance() { # part version js
  echo "interop setup: npm ci @modelcontextprotocol/conformance@$2 -> $TOOLS/$1"
  npm_ci "$1"
  [ -f "$3" ] || fail "$3 missing after npm ci"
  local got
  got="$("$NODE22" "$3" --version)" || fail "conformance $2 does not start on node $NODE22_VERSION"
  [ "$got" = "$2" ] || fail "$3 reports version $got, expected $2"
}

install_sdk() {
  echo "interop setup: npm ci @modelcontextprotocol/sdk@$SDK_VERSION -> $TOOLS/sdk"
  npm_ci sdk
  (cd "$TOOLS/sdk" && node -e '
    const r = require("module").createRequire(process.cwd() + "/package.json");
    const v = JSON.parse(require("fs").readFileSync("node_modules/@modelcontextprotocol/sdk/package.json", "utf8")).version;
    if (v !== process.argv[1]) { console.error("sdk is " + v + ", expected " + process.argv[1]); process.exit(1); }
    r("@modelcontextprotocol/sdk/server/mcp.js"); r("@modelcontextprotocol/sdk/client/index.js"); r("zod");
  ' "$SDK_VERSION") || fail "sdk import check failed"
}

install_inspector() {
  # Its own postinstall only installs client packages in a source checkout (a no-op here).
  echo "interop setup: npm ci @modelcontextprotocol/inspector@$INSPECTOR_VERSION -> $TOOLS/inspector"
  npm_ci inspector
  [ -f "$MCPDO_JS" ] || fail "$MCPDO_JS missing after npm ci"
  [ -x "$NODE22" ] || fail "the inspector needs Node >= 22.19: $NODE22 is missing"
  local got
  got="$(HOME="$TOOLS/inspector" "$NODE22" "$MCPDO_JS" --version)" ||
    fail "mcpdo does not start on node $NODE22_VERSION"
  [ "$got" = "$INSPECTOR_VERSION" ] || fail "mcpdo reports version $got, expected $INSPECTOR_VERSION"
}

install_ts2() {
  echo "interop setup: npm ci @modelcontextprotocol/server@$TS2_VERSION (+ client, node, ext-tasks) -> $TOOLS/ts2"
  npm_ci ts2
  # The fixtures import the packages through tests/interop/ts2/load.mjs, the same way.
  INTEROP_TOOLS="$TOOLS" node --input-type=module -e '
    const { load } = await import(process.argv[1]);
    const { version } = JSON.parse((await import("node:fs")).readFileSync(process.argv[2], "utf8"));
    if (version !== process.argv[3]) { console.error(`server is ${version}, expected ${process.argv[3]}`); process.exit(1); }
    await load("@modelcontextprotocol/server"); await load("@modelcontextprotocol/server/stdio");
    await load("@modelcontextprotocol/client"); await load("@modelcontextprotocol/client/stdio");
    await load("@modelcontextprotocol/node"); await load("@modelcontextprotocol/ext-tasks/client");
    await load("zod/v4");
  ' "$(node -p 'require("url").pathToFileURL(process.argv[1]).href' "$HERE/ts2/load.mjs")" "$TS2_PKG" "$TS2_VERSION" ||
    fail "ts2 import check failed"
}

install_oauth() {
  echo "interop setup: npm ci oidc-provider@$OIDC_PROVIDER_VERSION -> $TOOLS/oauth"
  npm_ci oauth
  # ESM only: oauth/server.mjs imports lib/index.js the same way. Its output is kept for a
  # failure: on Node 20 it warns "Unsupported runtime" (and runs).
  local out
  out="$(cd "$TOOLS/oauth" && node --input-type=module -e '
    const { readFileSync } = await import("node:fs");
    const { version } = JSON.parse(readFileSync("node_modules/oidc-provider/package.json", "utf8"));
    if (version !== process.argv[1]) { console.error(`oidc-provider is ${version}, expected ${process.argv[1]}`); process.exit(1); }
    const { default: Provider } = await import(process.cwd() + "/node_modules/oidc-provider/lib/index.js");
    if (typeof Provider !== "function") { console.error("no Provider export"); process.exit(1); }
  ' "$OIDC_PROVIDER_VERSION" 2>&1)" || fail "oidc-provider import check failed: $out"
}

install_mdbook() {
  echo "interop setup: cargo install mdbook@$MDBOOK_VERSION -> $TOOLS/mdbook"
  command -v cargo >/dev/null || fail "cargo not found (mdBook is built from crates.io)"
  rm -rf "${TOOLS:?}/mdbook"
  # Only the search index besides the HTML renderer: no `serve` or `watch` (a web server
  # and a file watcher the check does not use, and most of the build time). Unoptimised
  # (--debug): it builds in about half the time and still renders this book in a second.
  # Without debug info: 76 CPU-seconds to build instead of 88 (it shares the cores with
  # clippy in .ci/test.sh) and a 25 MB binary instead of 87. Its own target directory,
  # removed after: the binary is all that is kept.
  CARGO_PROFILE_DEV_DEBUG=0 CARGO_TARGET_DIR="$TOOLS/mdbook-build" cargo install --quiet --locked --debug \
    --version "$MDBOOK_VERSION" --no-default-features --features search \
    --root "$TOOLS/mdbook" mdbook
  rm -rf "${TOOLS:?}/mdbook-build"
  "$TOOLS/mdbook/bin/mdbook" --version | grep -q "$MDBOOK_VERSION" || fail "mdbook is not $MDBOOK_VERSION"
}

for p in "${PARTS[@]}"; do
  IFS='|' read -r name stamp file <<<"$p"
  case " ${todo[*]} " in *" $name "*) ;; *) continue ;; esac
  rm -f "$TOOLS/.stamp-$name"
  case "$name" in
    npm) install_npm ;;
    venv) install_venv ;;
    venv2) install_venv2 ;;
    node22) install_node22 ;;
    conformance-2025) install_conformance conformance-2025 "$CONFORMANCE_2025_VERSION" "$C2025_JS" ;;
    conformance-2026) install_conformance conformance-2026 "$CONFORMANCE_2026_VERSION" "$C2026_JS" ;;
    sdk) install_sdk ;;
    inspector) install_inspector ;;
    ts2) install_ts2 ;;
    oauth) install_oauth ;;
    mdbook) install_mdbook ;;
  esac
  printf '%s\n' "$stamp" >"$TOOLS/.stamp-$name"
done

echo "interop setup: done in $((SECONDS - start))s: ${todo[*]} ($(du -sh "$TOOLS" | awk '{print $1}'))"
