"""A real MCP 2025-11-25 client (the official Python SDK, mcp 1.x) run through the proxy.

Usage: python_client.py URL
Connects with the SDK's Streamable HTTP client, exercises tools (with progress and a
sampling request from the server), resources and prompts, and prints one JSON object
with what it saw. Any failure exits non-zero with the traceback.
"""

import asyncio
import json
import sys

from mcp import ClientSession, types
from mcp.client.streamable_http import streamablehttp_client


async def sampling(context, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    prompt = params.messages[0].content.text if params.messages else ""
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=f"sampled: {prompt}"),
        model="python-test-model",
        stopReason="endTurn",
    )


async def main(url: str) -> None:
    seen: dict = {}
    async with streamablehttp_client(url) as (read, write, get_session_id):
        async with ClientSession(read, write, sampling_callback=sampling) as session:
            init = await session.initialize()
            seen["server"] = init.serverInfo.name
            seen["protocolVersion"] = init.protocolVersion
            seen["sessionId"] = get_session_id()

            tools = await session.list_tools()
            seen["tools"] = sorted(t.name for t in tools.tools)
            echo = await session.call_tool("echo", {"message": "from python"})
            seen["echo"] = echo.content[0].text

            progress: list = []

            async def on_progress(value, total, message):
                progress.append(value)

            done = await session.call_tool(
                "trigger-long-running-operation",
                {"duration": 0.6, "steps": 3},
                progress_callback=on_progress,
            )
            seen["progress"] = progress
            seen["longRunning"] = done.content[0].text

            if "trigger-sampling-request" in seen["tools"]:
                sampled = await session.call_tool(
                    "trigger-sampling-request", {"prompt": "hello", "maxTokens": 20}
                )
                seen["sampling"] = " ".join(
                    c.text for c in sampled.content if getattr(c, "text", None)
                )

            resources = await session.list_resources()
            seen["resources"] = len(resources.resources)
            first = resources.resources[0]
            contents = await session.read_resource(first.uri)
            seen["read"] = {"uri": str(first.uri), "contents": len(contents.contents)}

            prompts = await session.list_prompts()
            seen["prompts"] = sorted(p.name for p in prompts.prompts)
            simple = next(p for p in prompts.prompts if not p.arguments)
            prompt = await session.get_prompt(simple.name)
            seen["prompt"] = {"name": simple.name, "messages": len(prompt.messages)}
    print(json.dumps(seen), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
