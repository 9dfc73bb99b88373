"""Interop fixture: a small MCP server on the official Python SDK 1.x (FastMCP).

Usage: target/interop-tools/venv/bin/python tests/interop/fastmcp_server.py PORT [OPTIONS]
       target/interop-tools/venv/bin/python tests/interop/fastmcp_server.py --stdio

Options (all optional, defaults = the SDK's defaults):
  --json-response            answer POSTs with application/json instead of SSE
  --session-idle-timeout=S   reap sessions idle for S seconds (SDK default 1800)

--stdio serves the same tools, resource and prompt over stdio instead (newline-delimited
JSON-RPC on stdin/stdout, the SDK's `mcp.run("stdio")`); it prints no READY line and
ends when stdin closes. Nothing else changes the HTTP mode below.

Serves Streamable HTTP (stateful: issues Mcp-Session-Id) at
http://127.0.0.1:PORT/mcp and binds 127.0.0.1 only. PORT may be 0: an ephemeral
port is chosen. Once the server accepts connections it prints one line
"READY <port>" (the real port) to stdout and flushes it.

Tools:
  echo(msg)                  -> msg
  counter()                  -> "1", "2", ... counted per MCP session
  slow(steps=3, delay_ms=200)-> "done", after reporting progress i/steps
  whoami()                   -> the Mcp-Session-Id the server sees
  traceparent()              -> {"meta": _meta.traceparent, "header": the traceparent
                                header (HTTP only)} of the request, as JSON
  ask(question="Your name?") -> an elicitation/create request (form {answer: string}) on the
                                call's stream; "accept:<answer>" | "decline" | "cancel"
Resource: fixture://hello (text/plain "hello from fastmcp fixture")
Prompt:   greet(name)
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys

import uvicorn
from mcp.server.fastmcp import Context, FastMCP
from pydantic import BaseModel, Field

HOST = "127.0.0.1"


class Answer(BaseModel):
    answer: str = Field(description="Your answer")


def _session_key(ctx: Context) -> str:
    """Key per MCP session: the Mcp-Session-Id header of the HTTP request."""
    sid = _session_id(ctx)
    if sid is not None:
        return sid
    # No header (should not happen in stateful mode): fall back to the
    # identity of the ServerSession object, which is per MCP session.
    return f"session-object-{id(ctx.session)}"


def _session_id(ctx: Context) -> str | None:
    request = ctx.request_context.request
    if request is None:
        return None
    headers = getattr(request, "headers", None)
    if headers is None:
        return None
    return headers.get("mcp-session-id")


def build(port: int, **settings: object) -> FastMCP:
    # host=127.0.0.1 also turns on the SDK's DNS-rebinding protection
    # (Host must be 127.0.0.1:<any port>, localhost:<any port> or [::1]:<any port>).
    mcp = FastMCP("fastmcp-fixture", host=HOST, port=port, **settings)
    counters: dict[str, int] = {}

    @mcp.tool()
    def echo(msg: str) -> str:
        """Return msg unchanged."""
        return msg

    @mcp.tool()
    def counter(ctx: Context) -> str:
        """Increment and return a counter private to the calling MCP session."""
        key = _session_key(ctx)
        counters[key] = counters.get(key, 0) + 1
        return str(counters[key])

    @mcp.tool()
    async def slow(ctx: Context, steps: int = 3, delay_ms: int = 200) -> str:
        """Report progress i/steps (needs a progressToken in _meta), sleeping delay_ms between steps."""
        for i in range(1, steps + 1):
            await asyncio.sleep(delay_ms / 1000.0)
            await ctx.report_progress(i, steps)
        return "done"

    @mcp.tool()
    def whoami(ctx: Context) -> str:
        """Return the Mcp-Session-Id header value the server sees for this request."""
        return _session_id(ctx) or ""

    @mcp.tool()
    def traceparent(ctx: Context) -> str:
        """The W3C traceparent of this request: in _meta (SEP-414) and, over HTTP, its header."""
        meta = ctx.request_context.meta
        in_meta = getattr(meta, "traceparent", None) if meta is not None else None
        request = ctx.request_context.request
        headers = getattr(request, "headers", None) if request is not None else None
        header = headers.get("traceparent") if headers is not None else None
        return json.dumps({"meta": in_meta, "header": header})

    @mcp.tool()
    async def ask(ctx: Context, question: str = "Your name?") -> str:
        """Ask the client a question (elicitation/create)."""
        result = await ctx.elicit(message=question, schema=Answer)
        if result.action == "accept":
            return f"accept:{result.data.answer}"
        return result.action

    @mcp.resource("fixture://hello", mime_type="text/plain")
    def hello() -> str:
        """A static text resource."""
        return "hello from fastmcp fixture"

    @mcp.prompt()
    def greet(name: str) -> str:
        """A one-message prompt."""
        return f"Please greet {name}."

    return mcp


def main_stdio() -> None:
    """--stdio: one MCP session on stdin/stdout (a stdio server has no port)."""
    build(0).run("stdio")


async def main() -> None:
    usage = (
        "usage: fastmcp_server.py PORT [--json-response] [--stateless-http]"
        " [--session-idle-timeout=SECONDS]\n"
        "       fastmcp_server.py --stdio"
    )
    if len(sys.argv) < 2:
        print(usage, file=sys.stderr)
        sys.exit(2)
    wanted = int(sys.argv[1])
    settings: dict[str, object] = {}
    for arg in sys.argv[2:]:
        if arg == "--json-response":
            settings["json_response"] = True
        elif arg == "--stateless-http":
            # The SDK's stateless mode: no Mcp-Session-Id is ever issued.
            settings["stateless_http"] = True
        elif arg.startswith("--session-idle-timeout="):
            settings["session_idle_timeout"] = float(arg.split("=", 1)[1])
        else:
            print(usage, file=sys.stderr)
            sys.exit(2)

    # Bind ourselves so that port 0 works and the real port is known.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, wanted))
    port = sock.getsockname()[1]

    mcp = build(port, **settings)
    config = uvicorn.Config(
        mcp.streamable_http_app(),
        log_level="warning",
        lifespan="on",
    )
    server = uvicorn.Server(config)
    serve_task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if serve_task.done():
            serve_task.result()  # raises the startup error
            sys.exit(1)
        await asyncio.sleep(0.02)
    print(f"READY {port}", flush=True)
    await serve_task


if __name__ == "__main__":
    try:
        if sys.argv[1:] == ["--stdio"]:
            main_stdio()
        else:
            asyncio.run(main())
    except KeyboardInterrupt:
        pass
