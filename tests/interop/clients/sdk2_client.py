"""A real MCP 2026-07-28 client: the official Python SDK 2.x, `Client(url, mode="auto")`,
driven one command at a time so that a test can interleave several of them exactly.

Usage: target/interop-tools/venv2/bin/python sdk2_client.py URL [--header 'Name: value']...

Connects the way the SDK does by default (`server/discover`, falling back to `initialize`
on a legacy server), with the given HTTP headers on every request, and prints one JSON
line: {"ready": true, "protocolVersion": "...", "sdk": "<mcp version>"}. Then it reads
commands, one JSON object per line on stdin, and answers each with one JSON line:

  {"op": "list"}                              -> {"tools": [{"name": ..., "properties": [...],
                                                  "required": [...]}, ...]}
  {"op": "call", "name": N, "arguments": {}}  -> {"isError": bool, "text": "...",
                                                  "structured": {...} | null}
  {"op": "exit"}                              -> (nothing) exits 0

A command that raises is answered {"error": "<type>: <message>"} and the client goes on.
EOF on stdin ends it like "exit".
"""

from __future__ import annotations

import asyncio
import json
import sys
from importlib.metadata import version

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def parse_args(argv: list[str]) -> tuple[str, dict[str, str]]:
    if not argv:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    url, rest = argv[0], argv[1:]
    headers: dict[str, str] = {}
    while rest:
        if rest[0] != "--header" or len(rest) < 2 or ":" not in rest[1]:
            print(f"bad arguments: {rest}", file=sys.stderr)
            sys.exit(2)
        name, value = rest[1].split(":", 1)
        headers[name.strip()] = value.strip()
        rest = rest[2:]
    return url, headers


def emit(answer: dict) -> None:
    print(json.dumps(answer), flush=True)


def text_of(result) -> str:
    return "\n".join(block.text for block in result.content if getattr(block, "text", None))


async def run(client: Client, command: dict) -> dict:
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
        result = await client.call_tool(command["name"], command.get("arguments") or {})
        return {
            "isError": bool(result.is_error),
            "text": text_of(result),
            "structured": result.structured_content,
        }
    raise ValueError(f"unknown op {op!r}")


async def main() -> None:
    url, headers = parse_args(sys.argv[1:])
    loop = asyncio.get_running_loop()
    async with create_mcp_http_client(headers=headers) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="auto") as client:
            emit({"ready": True, "protocolVersion": client.protocol_version, "sdk": version("mcp")})
            while True:
                line = await loop.run_in_executor(None, sys.stdin.readline)
                if not line:
                    return
                line = line.strip()
                if not line:
                    continue
                command = json.loads(line)
                if command.get("op") == "exit":
                    return
                try:
                    emit(await run(client, command))
                except Exception as e:  # noqa: BLE001 - reported to the test, which decides
                    emit({"error": f"{type(e).__name__}: {e}"})


if __name__ == "__main__":
    asyncio.run(main())
