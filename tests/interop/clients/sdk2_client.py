"""A real MCP 2026-07-28 client: the official Python SDK 2.x, `Client(url, mode=...)`,
driven one command at a time so that a test can interleave several of them exactly.

Usage: target/interop-tools/venv2/bin/python sdk2_client.py URL [options]

Options:
  --header 'Name: value'   an extra HTTP header on every request (repeatable)
  --mode auto|legacy|2026-07-28
                           auto (the default, the SDK's): server/discover first, falling back
                           to initialize on a legacy server; legacy: initialize only;
                           2026-07-28: the 2026 era at once, no probe
  --transport http|sse     http (the default): Streamable HTTP; sse: the 2024-11-05 HTTP+SSE
                           transport (URL is then its GET /sse URL)
  --answer TEXT            answer the server's questions: elicitation is accepted with every
                           property of the requested schema set to TEXT (booleans true,
                           numbers 1), sampling answers "sampled:TEXT". Without it the client
                           declares neither capability.

Connects and prints one JSON line: {"ready": true, "protocolVersion": "...", "sdk": "<mcp
version>"}, or {"ready": false, "error": "<type>: <message>"} and exits 1 when it cannot
connect. Then it reads commands, one JSON object per line on stdin, and answers each with
one JSON line:

  {"op": "list"}                              -> {"tools": [{"name": ..., "properties": [...],
                                                  "required": [...]}, ...]}
  {"op": "call", "name": N, "arguments": {},  -> {"isError": bool, "text": "...",
   "progress": false}                             "structured": {...} | null,
                                                  "progress": [[p, total, message], ...],
                                                  "elicited": n, "sampled": n}
                                                 (progress: true sends a progress token)
  {"op": "exit"}                              -> (nothing) exits 0

A command that raises is answered {"error": "<type>: <message>"} and the client goes on.
EOF on stdin ends it like "exit".
"""

from __future__ import annotations

import asyncio
import json
import sys
from importlib.metadata import version
from typing import Any

import mcp_types as types
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

USAGE = (
    "usage: sdk2_client.py URL [--header 'N: v']... [--mode auto|legacy|2026-07-28]"
    " [--transport http|sse] [--answer TEXT]"
)


def parse_args(argv: list[str]) -> dict[str, Any]:
    if not argv or argv[0].startswith("-"):
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    opts: dict[str, Any] = {"url": argv[0], "headers": {}, "mode": "auto", "transport": "http", "answer": None}
    rest = argv[1:]
    while rest:
        flag = rest.pop(0)
        if not rest:
            sys.exit(f"missing value after {flag}\n{USAGE}")
        value = rest.pop(0)
        if flag == "--header" and ":" in value:
            name, v = value.split(":", 1)
            opts["headers"][name.strip()] = v.strip()
        elif flag == "--mode" and value in ("auto", "legacy", "2026-07-28"):
            opts["mode"] = value
        elif flag == "--transport" and value in ("http", "sse"):
            opts["transport"] = value
        elif flag == "--answer":
            opts["answer"] = value
        else:
            sys.exit(f"bad argument {flag} {value}\n{USAGE}")
    return opts


def emit(answer: dict) -> None:
    print(json.dumps(answer), flush=True)


def describe(e: BaseException) -> str:
    # anyio wraps a failure in task groups: report the first real one.
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return f"{type(e).__name__}: {e}"


def text_of(result) -> str:
    return "\n".join(block.text for block in result.content if getattr(block, "text", None))


class Answers:
    """The server's questions, answered (and counted) when --answer is given."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.elicited = 0
        self.sampled = 0

    async def elicit(self, context: ClientRequestContext, params: types.ElicitRequestParams):
        self.elicited += 1
        schema = getattr(params, "requested_schema", None) or {}
        content: dict[str, Any] = {}
        for prop, spec in (schema.get("properties") or {}).items():
            kind = spec.get("type")
            content[prop] = True if kind == "boolean" else 1 if kind in ("integer", "number") else self.answer
        return types.ElicitResult(action="accept", content=content)

    async def sample(self, context: ClientRequestContext, params: types.CreateMessageRequestParams):
        self.sampled += 1
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=f"sampled:{self.answer}"),
            model="fixture-model",
            stop_reason="endTurn",
        )


async def run(client: Client, command: dict, answers: Answers | None) -> dict:
    op = command.get("op")
    if op == "list":
        listed = await client.list_tools()
        return {
            "tools": [
                {
                    "name": tool.name,
                    "properties": sorted((tool.input_schema or {}).get("properties", {})),
                    "required": sorted((tool.input_schema or {}).get("required", [])),
                }
                for tool in listed.tools
            ]
        }
    if op == "call":
        progress: list = []

        async def on_progress(p: float, total: float | None, message: str | None) -> None:
            progress.append([p, total, message])

        before = (answers.elicited, answers.sampled) if answers else (0, 0)
        result = await client.call_tool(
            command["name"],
            command.get("arguments") or {},
            progress_callback=on_progress if command.get("progress") else None,
        )
        return {
            "isError": bool(result.is_error),
            "text": text_of(result),
            "structured": result.structured_content,
            "progress": progress,
            "elicited": (answers.elicited - before[0]) if answers else 0,
            "sampled": (answers.sampled - before[1]) if answers else 0,
        }
    raise ValueError(f"unknown op {op!r}")


async def session(opts: dict[str, Any], transport) -> bool:
    answers = Answers(opts["answer"]) if opts["answer"] is not None else None
    callbacks: dict[str, Any] = {}
    if answers:
        callbacks = {"elicitation_callback": answers.elicit, "sampling_callback": answers.sample}
    loop = asyncio.get_running_loop()
    ready = False
    try:
        async with Client(transport, mode=opts["mode"], **callbacks) as client:
            emit({"ready": True, "protocolVersion": client.protocol_version, "sdk": version("mcp")})
            ready = True
            while True:
                line = await loop.run_in_executor(None, sys.stdin.readline)
                if not line:
                    return True
                line = line.strip()
                if not line:
                    continue
                command = json.loads(line)
                if command.get("op") == "exit":
                    return True
                try:
                    emit(await run(client, command, answers))
                except Exception as e:  # noqa: BLE001 - reported to the test, which decides
                    emit({"error": describe(e)})
    except Exception as e:  # noqa: BLE001 - connecting failed (or closing did)
        if not ready:
            emit({"ready": False, "error": describe(e)})
            return False
        print(f"closing: {describe(e)}", file=sys.stderr)
    return True


async def main() -> int:
    opts = parse_args(sys.argv[1:])
    if opts["transport"] == "sse":
        return 0 if await session(opts, sse_client(opts["url"], headers=opts["headers"] or None)) else 1
    async with create_mcp_http_client(headers=opts["headers"]) as http:
        return 0 if await session(opts, streamable_http_client(opts["url"], http_client=http)) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
