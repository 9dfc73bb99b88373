#!/usr/bin/env bash
# Smoke test of the interop fixtures with curl (no proxy involved): starts each
# server on an ephemeral 127.0.0.1 port, does the 2025-11-25 Streamable HTTP
# handshake, lists and calls tools, deletes the session, checks the listen
# address. Run tests/interop/setup.sh first. Prints "N passed, N failed".
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(git -C "$HERE" rev-parse --show-toplevel 2>/dev/null || (cd "$HERE/../.." && pwd))"
TOOLS="$REPO/target/interop-tools"
WORK="$(mktemp -d)"
cleanup() {
  local f p
  for f in "$WORK"/*.pid; do
    [ -f "$f" ] || continue
    p=$(cat "$f")
    kill "$p" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

pass=0
fail=0
check() { # check DESC COMMAND...
  if "${@:2}" >/dev/null 2>&1; then pass=$((pass + 1)); echo "ok   $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi
}

# start NAME CMD... : starts a server, waits for "READY <port>" on stdout and
# prints the port (runs in $(...), so the pid goes to a file for cleanup)
start() {
  local name=$1
  shift
  "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  echo $! >"$WORK/$name.pid"
  local i
  for i in $(seq 1 150); do
    if grep -q '^READY ' "$WORK/$name.out"; then
      awk '/^READY /{print $2; exit}' "$WORK/$name.out"
      return 0
    fi
    sleep 0.1
  done
  echo "$name did not become ready" >&2
  cat "$WORK/$name.err" >&2
  return 1
}

# post URL SID BODY -> body in $WORK/body, headers in $WORK/hdr
post() {
  local h=(-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream')
  [ -n "$2" ] && h+=(-H "Mcp-Session-Id: $2" -H 'MCP-Protocol-Version: 2025-11-25')
  curl -sS -N -D "$WORK/hdr" -o "$WORK/body" "${h[@]}" --data "$3" "$1"
}
status() { head -1 "$WORK/hdr" | awk '{print $2}'; }
sid() { awk 'tolower($1)=="mcp-session-id:"{print $2}' "$WORK/hdr" | tr -d '\r'; }
body_has() { grep -qF -- "$1" "$WORK/body"; }
INIT='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
INITIALIZED='{"jsonrpc":"2.0","method":"notifications/initialized"}'
call() { echo "{\"jsonrpc\":\"2.0\",\"id\":$1,\"method\":\"tools/call\",\"params\":{\"name\":\"$2\",\"arguments\":$3${4:-}}}"; }
listens_loopback_only() { # PORT
  ss -ltn "sport = :$1" | awk 'NR>1{print $4}' | grep -q . &&
    ! ss -ltn "sport = :$1" | awk 'NR>1{print $4}' | grep -vq '^127\.0\.0\.1:'
}

# ---------------- everything server ----------------
P=$(start everything env PORT=0 GZIP_ALLOWED_DOMAINS=127.0.0.1 node \
  --require "$HERE/everything-loopback.cjs" \
  "$TOOLS/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js" streamableHttp)
U="http://127.0.0.1:$P/mcp"
check "everything: listens on 127.0.0.1 only" listens_loopback_only "$P"
post "$U" "" "$INIT"
S=$(sid)
check "everything: initialize 200 + session id" test "$(status)" = 200 -a -n "$S"
check "everything: negotiated 2025-11-25" body_has '"protocolVersion":"2025-11-25"'
post "$U" "$S" "$INITIALIZED"
check "everything: initialized -> 202" test "$(status)" = 202
post "$U" "$S" '{"jsonrpc":"2.0","id":2,"method":"tools/list"}'
check "everything: tools/list has echo" body_has '"name":"echo"'
post "$U" "$S" "$(call 3 echo '{"message":"hi"}')"
check "everything: echo" body_has '"text":"Echo: hi"'
post "$U" "$S" "$(call 4 get-sum '{"a":2,"b":3}')"
check "everything: get-sum" body_has 'The sum of 2 and 3 is 5.'
post "$U" "$S" "$(call 5 trigger-long-running-operation '{"duration":0.6,"steps":3}' ',"_meta":{"progressToken":"p1"}')"
check "everything: long-running op sends 3 progress notifications" test "$(grep -c 'notifications/progress' "$WORK/body")" = 3
check "everything: long-running op result" body_has 'Long running operation completed'
post "$U" "deadbeef" '{"jsonrpc":"2.0","id":6,"method":"tools/list"}'
check "everything: unknown session -> 400" test "$(status)" = 400
check "everything: DELETE -> 200" test "$(curl -sS -o /dev/null -w '%{http_code}' -X DELETE -H "Mcp-Session-Id: $S" -H 'MCP-Protocol-Version: 2025-11-25' "$U")" = 200
post "$U" "$S" '{"jsonrpc":"2.0","id":7,"method":"tools/list"}'
check "everything: deleted session -> 400" test "$(status)" = 400

# ---------------- FastMCP (Python SDK 1.x) ----------------
P=$(start fastmcp "$TOOLS/venv/bin/python" "$HERE/fastmcp_server.py" 0)
U="http://127.0.0.1:$P/mcp"
check "fastmcp: listens on 127.0.0.1 only" listens_loopback_only "$P"
post "$U" "" "$INIT"
A=$(sid)
check "fastmcp: initialize 200 + session id" test "$(status)" = 200 -a -n "$A"
check "fastmcp: negotiated 2025-11-25" body_has '"protocolVersion":"2025-11-25"'
post "$U" "$A" "$INITIALIZED"
check "fastmcp: initialized -> 202" test "$(status)" = 202
post "$U" "" "$INIT"
B=$(sid)
post "$U" "$B" "$INITIALIZED"
post "$U" "$A" '{"jsonrpc":"2.0","id":2,"method":"tools/list"}'
check "fastmcp: tools/list" body_has '"name":"whoami"'
post "$U" "$A" "$(call 3 echo '{"msg":"hi"}')"
check "fastmcp: echo" body_has '"text":"hi"'
post "$U" "$A" "$(call 4 counter '{}')"
check "fastmcp: counter A=1" body_has '"text":"1"'
post "$U" "$A" "$(call 5 counter '{}')"
check "fastmcp: counter A=2" body_has '"text":"2"'
post "$U" "$B" "$(call 6 counter '{}')"
check "fastmcp: counter B=1 (independent)" body_has '"text":"1"'
post "$U" "$A" "$(call 7 counter '{}')"
check "fastmcp: counter A=3" body_has '"text":"3"'
post "$U" "$A" "$(call 8 whoami '{}')"
check "fastmcp: whoami = session id" body_has "\"text\":\"$A\""
post "$U" "$A" "$(call 9 slow '{"steps":3,"delay_ms":100}' ',"_meta":{"progressToken":"t1"}')"
check "fastmcp: slow sends 3 progress notifications" test "$(grep -c 'notifications/progress' "$WORK/body")" = 3
check "fastmcp: slow result" body_has '"text":"done"'
check "fastmcp: wrong Host -> 421" test "$(curl -sS -o /dev/null -w '%{http_code}' -H 'Host: evil.example:80' -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -H "Mcp-Session-Id: $A" --data '{"jsonrpc":"2.0","id":10,"method":"ping"}' "$U")" = 421
post "$U" "deadbeef" '{"jsonrpc":"2.0","id":11,"method":"tools/list"}'
check "fastmcp: unknown session -> 404" test "$(status)" = 404
check "fastmcp: DELETE -> 200" test "$(curl -sS -o /dev/null -w '%{http_code}' -X DELETE -H "Mcp-Session-Id: $A" -H 'MCP-Protocol-Version: 2025-11-25' "$U")" = 200
post "$U" "$A" '{"jsonrpc":"2.0","id":12,"method":"tools/list"}'
check "fastmcp: deleted session -> 404" test "$(status)" = 404

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
