"""Interop fixture: an MCP server on the official Python SDK 2.x (mcp 2.3.0, `MCPServer`, the
renamed FastMCP) serving BOTH eras on one endpoint.

Usage: target/interop-tools/venv2/bin/python tests/interop/sdk2_server.py [--port N]
                                                [--stateless] [--json-response]
       target/interop-tools/venv2/bin/python tests/interop/sdk2_server.py --stdio

HTTP binds 127.0.0.1 only, endpoint /mcp; --port 0 (the default) picks a free port. Once
uvicorn accepts connections it prints ONE line to stdout and flushes it:

    READY http://127.0.0.1:<port>/mcp

The SDK routes by header alone: a request whose MCP-Protocol-Version header names a version
after 2025-11-25 is served the 2026-07-28 way (stateless: server/discover, the per-request
_meta envelope, Mcp-Method and Mcp-Name required, 400 -32020 without them); anything else
goes to the 2025 transport, stateful (initialize issues an Mcp-Session-Id; a session-less
request gets 400 "Missing session ID") or, with --stateless, session-less.
--stdio serves newline-delimited JSON-RPC on stdin/stdout; the first request pins the era
(`initialize`: 2025-11-25; anything with the _meta envelope: 2026-07-28, and a later
`initialize` gets -32022). Logs go to stderr.

Tools:
  echo(msg)                  -> msg
  ask(question="Your name?") -> elicitation through the SDK's era-agnostic resolver: on
                                2026-07-28 resultType "input_required" (key "__main__:ask_user",
                                a requestState the SDK seals per process), on 2025 a real
                                elicitation/create; "accept:<answer>" | "decline" | "cancel"
  sample(prompt="hi")        -> the same for sampling; "sampled:<text>"
  slow(steps=3, delay_ms=200)-> notifications/progress i/steps (with a progressToken); "done"
  forecast(region, days=1)   -> SEP-2243: region carries "x-mcp-header": "Region", days
                                "x-mcp-header": "Days"; on 2026-07-28 HTTP the SDK refuses a call
                                whose Mcp-Param-* header is missing or disagrees (400, -32020)
  whoami()                   -> the protocol version and Mcp-Session-Id this request carried
Resource: fixture://hello (text/plain).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
from typing import Annotated

import uvicorn
from mcp.server.mcpserver import Context, Elicit, ElicitationResult, MCPServer, Resolve, Sample
from mcp.types import CreateMessageResult
from mcp_types import SamplingMessage, TextContent
from pydantic import BaseModel, Field

HOST = "127.0.0.1"


class Answer(BaseModel):
    answer: str = Field(description="Your answer")


def ask_user(question: str) -> Elicit[Answer]:
    """Resolver: the tool's `question` argument becomes the elicitation message."""
    return Elicit(question, Answer)


def sample_llm(prompt: str) -> Sample:
    return Sample([SamplingMessage(role="user", content=TextContent(type="text", text=prompt))], max_tokens=20)


def build() -> MCPServer:
    mcp = MCPServer("sdk2-fixture", version="2.3.0-fixture")

    @mcp.tool()
    def echo(msg: str) -> str:
        """Return msg unchanged."""
        return msg

    @mcp.tool()
    async def ask(
        reply: Annotated[ElicitationResult[Answer], Resolve(ask_user)],
        question: str = "Your name?",
    ) -> str:
        """Ask the client a question (elicitation)."""
        if reply.action == "accept":
            return f"accept:{reply.data.answer}"
        return reply.action

    @mcp.tool()
    async def sample(
        reply: Annotated[CreateMessageResult, Resolve(sample_llm)],
        prompt: str = "hi",
    ) -> str:
        """Ask the client's model (sampling)."""
        text = getattr(reply.content, "text", None) or str(reply.content)
        return f"sampled:{text}"

    @mcp.tool()
    async def slow(ctx: Context, steps: int = 3, delay_ms: int = 200) -> str:
        """Report progress i/steps (needs a progressToken), sleeping delay_ms between steps."""
        for i in range(1, steps + 1):
            await asyncio.sleep(delay_ms / 1000)
            await ctx.report_progress(i, steps, f"step {i}")
        return "done"

    @mcp.tool()
    def forecast(
        region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})],
        days: Annotated[int, Field(json_schema_extra={"x-mcp-header": "Days"})] = 1,
    ) -> str:
        """A forecast for a region (its arguments travel in Mcp-Param-Region and Mcp-Param-Days too)."""
        return f"forecast for {region}: sunny for {days} day(s)"

    @mcp.tool()
    def whoami(ctx: Context) -> str:
        """The protocol version and Mcp-Session-Id of this request."""
        headers = ctx.headers or {}
        return f"version={ctx.protocol_version} session={headers.get('mcp-session-id')}"

    @mcp.resource("fixture://hello", mime_type="text/plain")
    def hello() -> str:
        return "hello from sdk2 fixture"

    return mcp


async def serve(mcp: MCPServer, wanted: int, stateless: bool, json_response: bool) -> None:
    # MCPServer.run("streamable-http", ...) but with our own socket, so that port 0 works.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, wanted))
    port = sock.getsockname()[1]
    app = mcp.streamable_http_app(stateless_http=stateless, json_response=json_response, host=HOST)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    serve_task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if serve_task.done():
            serve_task.result()  # raises the startup error
            sys.exit(1)
        await asyncio.sleep(0.02)
    print(f"READY http://{HOST}:{port}/mcp", flush=True)
    await serve_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--stateless", action="store_true")
    parser.add_argument("--json-response", action="store_true")
    parser.add_argument("--stdio", action="store_true")
    a = parser.parse_args()
    mcp = build()
    if a.stdio:
        mcp.run("stdio")
        return
    asyncio.run(serve(mcp, a.port, a.stateless, a.json_response))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
