"""Interop fixture: a small MCP server on the official Python SDK 1.x (FastMCP) served
over the HTTP+SSE transport of MCP 2024-11-05: GET /sse opens a session and names
POST /messages/?session_id=<32 hex> in its first event (`endpoint`); every POST is
answered 202 and every response, notification and server request comes on the stream.

Usage: target/interop-tools/venv/bin/python tests/interop/sse_server.py PORT

Binds 127.0.0.1 only (FastMCP then refuses a foreign Host with 421). PORT may be 0: an
ephemeral port is chosen. Once the server accepts connections it prints one line
"READY <port>" (the real port) to stdout and flushes it.

The app is FastMCP's own `sse_app()`, run under uvicorn as `mcp.run("sse")` would (the
script drives uvicorn itself only to learn the real port).

Tools:
  echo(msg)                   -> msg
  ask(question="Your name?")  -> elicitation/create (form, schema {answer: string});
                                 "accept:<answer>" | "decline" | "cancel"
  sample(prompt="hi", max_tokens=20)
                              -> sampling/createMessage; "sampled:<text>"
  slow(steps=3, delay_ms=200) -> progress i/steps (with _meta.progressToken); "done"
  bump()                      -> changes fixture://counter, notifies its subscribers
  notify_later(text, delay_ms=200)
                              -> "scheduled"; a notifications/message with `text` follows
                                 on the session's stream once the call is over
  whoami()                    -> the session_id of the endpoint this session POSTs to
  live()                      -> how many HTTP+SSE sessions the server holds now
Resources: fixture://hello (text), fixture://counter (subscribable; FastMCP 1.30 would
declare resources.subscribe=false, so the capability is set to the truth).
"""

from __future__ import annotations

import asyncio
import sys

import uvicorn
from pydantic import BaseModel, Field
from starlette.routing import Mount

from mcp import types
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.session import ServerSession

HOST = "127.0.0.1"


class Answer(BaseModel):
    answer: str = Field(description="Your answer")


def build(port: int) -> FastMCP:
    mcp = FastMCP("sse-fixture", host=HOST, port=port)
    counter = {"n": 0}
    subscribers: dict[str, list[ServerSession]] = {}
    transport: dict[str, object] = {}

    @mcp.tool()
    def echo(msg: str) -> str:
        """Return msg unchanged."""
        return msg

    @mcp.tool()
    async def ask(ctx: Context, question: str = "Your name?") -> str:
        """Ask the client a question through elicitation."""
        result = await ctx.elicit(message=question, schema=Answer)
        if result.action == "accept":
            return f"accept:{result.data.answer}"
        return result.action

    @mcp.tool()
    async def sample(ctx: Context, prompt: str = "hi", max_tokens: int = 20) -> str:
        """Ask the client's LLM (sampling/createMessage)."""
        result = await ctx.session.create_message(
            messages=[
                types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))
            ],
            max_tokens=max_tokens,
            related_request_id=ctx.request_id,
        )
        text = getattr(result.content, "text", None) or str(result.content)
        return f"sampled:{text}"

    @mcp.tool()
    async def slow(ctx: Context, steps: int = 3, delay_ms: int = 200) -> str:
        """Report progress i/steps, sleeping delay_ms between steps."""
        for i in range(1, steps + 1):
            await asyncio.sleep(delay_ms / 1000)
            await ctx.report_progress(i, steps, f"step {i}")
        return "done"

    @mcp.tool()
    async def bump(ctx: Context) -> str:
        """Change fixture://counter and notify its subscribers."""
        counter["n"] += 1
        for session in list(subscribers.get("fixture://counter", [])):
            try:
                await session.send_resource_updated("fixture://counter")
            except Exception as e:  # noqa: BLE001 - a gone session
                print(f"notify failed: {e!r}", file=sys.stderr)
        return str(counter["n"])

    @mcp.tool()
    async def notify_later(ctx: Context, text: str, delay_ms: int = 200) -> str:
        """Send a log notification with `text` on the session's stream after the call."""
        session = ctx.session

        async def later() -> None:
            await asyncio.sleep(delay_ms / 1000)
            await session.send_log_message(level="info", data=text)

        asyncio.get_running_loop().create_task(later())
        return "scheduled"

    @mcp.tool()
    def whoami(ctx: Context) -> str:
        """The session_id of the endpoint this session's messages are POSTed to."""
        request = ctx.request_context.request
        return request.query_params.get("session_id", "") if request is not None else ""

    @mcp.tool()
    def live() -> str:
        """How many HTTP+SSE sessions the server holds (its transport's table)."""
        return str(len(transport["sse"]._read_stream_writers))  # type: ignore[attr-defined]

    @mcp.resource("fixture://hello", mime_type="text/plain")
    def hello() -> str:
        return "hello from sse fixture"

    @mcp.resource("fixture://counter", mime_type="text/plain")
    def counter_resource() -> str:
        return str(counter["n"])

    low = mcp._mcp_server

    @low.subscribe_resource()
    async def on_subscribe(uri) -> None:
        subscribers.setdefault(str(uri), []).append(low.request_context.session)

    @low.unsubscribe_resource()
    async def on_unsubscribe(uri) -> None:
        listed = subscribers.get(str(uri), [])
        if low.request_context.session in listed:
            listed.remove(low.request_context.session)

    original = low.get_capabilities

    def get_capabilities(notification_options, experimental_capabilities):
        caps = original(notification_options, experimental_capabilities)
        if caps.resources is not None:
            caps.resources.subscribe = True
        return caps

    low.get_capabilities = get_capabilities  # type: ignore[method-assign]
    mcp._fixture_transport = transport  # type: ignore[attr-defined]
    return mcp


async def serve(mcp: FastMCP) -> None:
    app = mcp.sse_app()
    # The POST endpoint is mounted as the transport's bound method: its table of sessions
    # is what `live` counts.
    for route in app.routes:
        if isinstance(route, Mount):
            mcp._fixture_transport["sse"] = route.app.__self__  # type: ignore[attr-defined]
    config = uvicorn.Config(app, host=HOST, port=mcp.settings.port, log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            await task  # the bind error
            return
        await asyncio.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    print(f"READY {port}", flush=True)
    await task


def main() -> None:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    mcp = build(int(sys.argv[1]))
    try:
        asyncio.run(serve(mcp))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
