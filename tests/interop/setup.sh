#!/usr/bin/env bash
# Installs the third-party MCP servers used by the interop tests into
# $REPO/target/interop-tools/ (idempotent; a no-op when the stamp matches):
#   npm/   @modelcontextprotocol/server-everything, exact tree from npm/package-lock.json
#   venv/  Python venv with the official MCP Python SDK 1.x, from requirements.txt
# Needs: node >= 18 with npm, python3 >= 3.10 (override with $PYTHON), the npm
# registry and PyPI. Safe to run concurrently (serialised with flock).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(git -C "$HERE" rev-parse --show-toplevel 2>/dev/null || (cd "$HERE/../.." && pwd))"
TOOLS="$REPO/target/interop-tools"
PYTHON="${PYTHON:-python3}"

EVERYTHING_VERSION="2026.8.31" # must match npm/package.json
MCP_PY_VERSION="1.30.0"        # must match requirements.txt

mkdir -p "$TOOLS"
if command -v flock >/dev/null 2>&1; then
  exec 9>"$TOOLS/.lock"
  flock 9
fi

command -v node >/dev/null || { echo "interop setup: node not found" >&2; exit 1; }
command -v npm >/dev/null || { echo "interop setup: npm not found" >&2; exit 1; }
command -v "$PYTHON" >/dev/null || { echo "interop setup: $PYTHON not found" >&2; exit 1; }

node_major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$node_major" -lt 18 ]; then
  echo "interop setup: node >= 18 needed, found $(node --version)" >&2
  exit 1
fi
py_version="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)'; then
  echo "interop setup: python >= 3.10 needed, found $py_version" >&2
  exit 1
fi

hash_of() { sha256sum "$@" | awk '{print $1}' | tr '\n' ' '; }
STAMP_WANT="everything=$EVERYTHING_VERSION mcp-python=$MCP_PY_VERSION node-major=$node_major python=$py_version files=$(hash_of "$HERE/npm/package.json" "$HERE/npm/package-lock.json" "$HERE/requirements.txt")"
STAMP="$TOOLS/stamp"
EVERYTHING_JS="$TOOLS/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_WANT" ] &&
  [ -f "$EVERYTHING_JS" ] && [ -x "$TOOLS/venv/bin/python" ]; then
  echo "interop setup: up to date ($TOOLS)"
  exit 0
fi
rm -f "$STAMP"

start=$SECONDS

echo "interop setup: npm ci @modelcontextprotocol/server-everything@$EVERYTHING_VERSION -> $TOOLS/npm"
rm -rf "$TOOLS/npm"
mkdir -p "$TOOLS/npm"
cp "$HERE/npm/package.json" "$HERE/npm/package-lock.json" "$TOOLS/npm/"
npm ci --prefix "$TOOLS/npm" --no-audit --no-fund --loglevel=error >/dev/null
[ -f "$EVERYTHING_JS" ] || { echo "interop setup: $EVERYTHING_JS missing after npm ci" >&2; exit 1; }

echo "interop setup: python $py_version venv -> $TOOLS/venv"
rm -rf "$TOOLS/venv"
if ! "$PYTHON" -m venv "$TOOLS/venv" >/dev/null 2>&1; then
  # Debian's own python3 ships venv/ensurepip separately.
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "interop setup: python -m venv failed; apt-get install python3-venv"
    apt-get install -y -qq python3-venv >/dev/null || {
      apt-get update -qq >/dev/null && apt-get install -y -qq python3-venv >/dev/null
    }
    rm -rf "$TOOLS/venv"
    "$PYTHON" -m venv "$TOOLS/venv"
  else
    echo "interop setup: '$PYTHON -m venv' failed (install python3-venv)" >&2
    exit 1
  fi
fi

echo "interop setup: pip install mcp==$MCP_PY_VERSION (+ pinned deps)"
"$TOOLS/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
  -r "$HERE/requirements.txt"
"$TOOLS/venv/bin/python" -c 'from mcp.server.fastmcp import FastMCP, Context' ||
  { echo "interop setup: mcp import check failed" >&2; exit 1; }

printf '%s\n' "$STAMP_WANT" >"$STAMP"
echo "interop setup: done in $((SECONDS - start))s ($(du -sh "$TOOLS" | awk '{print $1}'))"
