"""A real MCP 2025-11-25 client (the official Python SDK 1.x, mcp 1.30) that runs a few
steps against any of the interop fixtures and prints one JSON line per step, the same
format as tests/interop/ts2/client.mjs, for the era matrix (tests/suite/eras.rs).

Usage: target/interop-tools/venv/bin/python sdk1_steps.py URL [--steps echo,ask,slow]

Steps (default echo,ask,slow), each on the fixture's own tool of that name:
  echo   echo {msg} (or {message}): passes when the text contains "hello fixture"
  ask    ask {question}: the server asks with elicitation/create; the client accepts,
         setting every string property of the requested schema to "auto-answer";
         passes when the text contains "auto-answer"
  slow   slow {steps: 3, delay 100 ms} with a progress callback: passes with 3 progress
         notifications

Output: {"step": "connect", "ok": true, "protocolVersion": ..., "sessionId": ...,
"server": ..., "tools": [...]}, then {"step": <name>, "ok": bool, ...} per step. Exit
status 0 iff every step passed; any exception is a failed step with its message.
"""

from __future__ import annotations

import asyncio
import json
import sys

from mcp import ClientSession, types
from mcp.client.streamable_http import streamablehttp_client

failures = 0


def out(record: dict) -> None:
    global failures
    if not record.get("ok"):
        failures += 1
    print(json.dumps(record), flush=True)


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "text", None))


async def main(url: str, steps: list[str]) -> None:
    asked = {"elicitation": 0}

    async def elicit(context, params) -> types.ElicitResult:
        asked["elicitation"] += 1
        schema = getattr(params, "requestedSchema", None) or {}
        content = {}
        for name, spec in (schema.get("properties") or {}).items():
            kind = spec.get("type")
            content[name] = True if kind == "boolean" else 1 if kind in ("number", "integer") else "auto-answer"
        return types.ElicitResult(action="accept", content=content)

    async with streamablehttp_client(url) as (read, write, get_session_id):
        async with ClientSession(read, write, elicitation_callback=elicit) as session:
            try:
                init = await session.initialize()
                listed = await session.list_tools()
            except Exception as e:  # noqa: BLE001 - reported as the step's failure
                out({"step": "connect", "ok": False, "error": f"{type(e).__name__}: {e}"})
                return
            tools = {t.name: t for t in listed.tools}
            out({
                "step": "connect",
                "ok": True,
                "era": "legacy",
                "protocolVersion": init.protocolVersion,
                "sessionId": get_session_id(),
                "server": init.serverInfo.name,
                "tools": sorted(tools),
            })

            def props(name: str) -> list[str]:
                tool = tools.get(name)
                return list((tool.inputSchema or {}).get("properties", {})) if tool else []

            async def echo() -> dict:
                key = "message" if "message" in props("echo") else "msg"
                r = await session.call_tool("echo", {key: "hello fixture"})
                return {"ok": not r.isError and "hello fixture" in text_of(r), "isError": r.isError, "text": text_of(r)}

            async def ask() -> dict:
                before = asked["elicitation"]
                r = await session.call_tool("ask", {"question": "Favourite colour?"})
                return {
                    "ok": not r.isError and "auto-answer" in text_of(r),
                    "isError": r.isError,
                    "text": text_of(r),
                    "elicitations": asked["elicitation"] - before,
                }

            async def slow() -> dict:
                delay = "delay_ms" if "delay_ms" in props("slow") else "delayMs"
                progress: list = []

                async def on_progress(value, total, message):
                    progress.append(value)

                r = await session.call_tool("slow", {"steps": 3, delay: 100}, progress_callback=on_progress)
                # Progress callbacks run as tasks: give the last one a moment.
                for _ in range(20):
                    if len(progress) >= 3:
                        break
                    await asyncio.sleep(0.01)
                return {"ok": not r.isError and len(progress) == 3, "isError": r.isError, "text": text_of(r), "progress": len(progress)}

            known = {"echo": echo, "ask": ask, "slow": slow}
            for name in steps:
                run = known.get(name)
                if run is None:
                    out({"step": name, "ok": False, "error": f"no such step (known: {', '.join(known)})"})
                    continue
                if name not in tools:
                    out({"step": name, "ok": False, "error": f"the server lists no tool {name}"})
                    continue
                try:
                    out({"step": name, **await asyncio.wait_for(run(), 20)})
                except Exception as e:  # noqa: BLE001 - reported as the step's failure
                    out({"step": name, "ok": False, "error": f"{type(e).__name__}: {e}"})


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        print("usage: sdk1_steps.py URL [--steps echo,ask,slow]", file=sys.stderr)
        sys.exit(2)
    chosen = ["echo", "ask", "slow"]
    if len(args) == 3 and args[1] == "--steps":
        chosen = [s for s in args[2].split(",") if s]
    try:
        asyncio.run(main(args[0], chosen))
    except Exception as e:  # noqa: BLE001 - a transport failure after the steps
        out({"step": "close", "ok": False, "error": f"{type(e).__name__}: {e}"})
    sys.exit(1 if failures else 0)
