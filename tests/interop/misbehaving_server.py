"""Test fixture: a stdio MCP server (2025-11-25) that misbehaves on demand.

Usage: python3 tests/interop/misbehaving_server.py [OPTIONS]

Python 3 standard library only. Newline-delimited JSON-RPC on stdin/stdout; free-form
text on stderr. It answers `initialize`, accepts `notifications/initialized`, `ping`,
`tools/list` and `tools/call`. Every tool call runs in its own thread, so a slow or
hanging call does not hold up the others.

Options:
  --ignore-sigterm     ignore SIGTERM (the proxy must escalate to SIGKILL); inherited
                       by the grandchild, so only SIGKILL to the group ends both
  --linger             keep running when stdin closes (default: exit at once)
  --spawn-grandchild   start `sleep 300` (same process group) at start-up and print
                       "GRANDCHILD <pid>" on stderr
  --slow-start=MS      sleep MS milliseconds before reading stdin (a slow `initialize`)

Tools (all answer `content:[{type:text,text:…}]`):
  echo{text}                 -> text
  pid{}                      -> this process's pid, as text
  grandchild{}               -> the grandchild's pid ("" without --spawn-grandchild)
  crash{}                    -> exits with status 1 at once, answering nothing
  garbage{}                  -> writes a line that is not JSON to stdout, answers nothing
  flood{bytes=2097152}       -> writes one valid JSON-RPC response line of about `bytes`
  hang{}                     -> never answers
  sleep{ms}                  -> answers "slept <ms>" after ms milliseconds
  stderr{text}               -> writes text on stderr, then answers "logged"
  stderr_long{bytes, then}   -> writes one stderr line of `bytes` bytes, then the line
                                `then`, then answers "logged"
  stderr_flood{lines, text}  -> writes `lines` stderr lines "<text> <n>" as fast as it
                                can, then answers "logged"
  same_id_check{tag, delay_ms=0}
                             -> after delay_ms, answers JSON text
                                {"received_id": <the id it received>, "tag": tag}
  cancellable{ms=1500}       -> waits up to ms for notifications/cancelled naming its
                                own request id; answers "cancelled" or "finished"
  log_then_echo{text}        -> sends notifications/message (no progress token), then
                                answers text
  notify_later{text, delay_ms=300}
                             -> answers "scheduled" at once, then after delay_ms sends
                                notifications/message {level:"info", data: text}
  burst{count=200}           -> writes `count` notifications/progress for the request's
                                progressToken and then its answer "after <count>", all in
                                one write
  environ{}                  -> its whole environment, as a JSON object text
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

PROTOCOL_VERSION = "2025-11-25"
OUT = threading.Lock()
GRANDCHILD: subprocess.Popen | None = None
# Ids named by notifications/cancelled, as JSON text.
CANCELLED: set[str] = set()
CANCELLED_CHANGED = threading.Condition()

TOOLS = [
    ("echo", "Answer the text argument.", {"text": {"type": "string"}}),
    ("pid", "Answer this process's pid.", {}),
    ("grandchild", "Answer the grandchild's pid.", {}),
    ("crash", "Exit with status 1 at once.", {}),
    ("garbage", "Write a line that is not JSON to stdout.", {}),
    ("flood", "Write one very long line to stdout.", {"bytes": {"type": "integer"}}),
    ("hang", "Never answer.", {}),
    ("sleep", "Answer after ms milliseconds.", {"ms": {"type": "integer"}}),
    ("stderr", "Write text on stderr, then answer.", {"text": {"type": "string"}}),
    (
        "stderr_long",
        "Write one long line on stderr, then a short one, then answer.",
        {"bytes": {"type": "integer"}, "then": {"type": "string"}},
    ),
    (
        "stderr_flood",
        "Write many stderr lines as fast as possible, then answer.",
        {"lines": {"type": "integer"}, "text": {"type": "string"}},
    ),
    (
        "same_id_check",
        "Answer the JSON-RPC id this server received.",
        {"tag": {"type": "string"}, "delay_ms": {"type": "integer"}},
    ),
    ("cancellable", "Wait for a cancellation of this request.", {"ms": {"type": "integer"}}),
    ("log_then_echo", "Send a log notification, then answer.", {"text": {"type": "string"}}),
    (
        "notify_later",
        "Answer, then send a log notification after delay_ms.",
        {"text": {"type": "string"}, "delay_ms": {"type": "integer"}},
    ),
    ("environ", "Answer this process's environment, as JSON.", {}),
]


def write_line(line: bytes) -> None:
    with OUT:
        sys.stdout.buffer.write(line + b"\n")
        sys.stdout.buffer.flush()


def send(message: dict) -> None:
    write_line(json.dumps(message, separators=(",", ":")).encode())


def result(request_id, value: dict) -> None:
    send({"jsonrpc": "2.0", "id": request_id, "result": value})


def text_result(request_id, text: str) -> None:
    result(request_id, {"content": [{"type": "text", "text": text}], "isError": False})


def log(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def call_tool(request_id, params: dict) -> None:
    name = params.get("name")
    args = params.get("arguments") or {}
    if name == "echo":
        text_result(request_id, str(args.get("text", "")))
    elif name == "pid":
        text_result(request_id, str(os.getpid()))
    elif name == "grandchild":
        text_result(request_id, str(GRANDCHILD.pid) if GRANDCHILD else "")
    elif name == "crash":
        log("misbehaving: crashing on purpose")
        os._exit(1)
    elif name == "garbage":
        write_line(b"this line is not JSON-RPC, just garbage")
    elif name == "flood":
        size = int(args.get("bytes", 2 * 1024 * 1024))
        head = b'{"jsonrpc":"2.0","id":' + json.dumps(request_id).encode()
        head += b',"result":{"content":[{"type":"text","text":"'
        tail = b'"}],"isError":false}}'
        write_line(head + b"x" * max(size - len(head) - len(tail), 0) + tail)
    elif name == "hang":
        pass
    elif name == "sleep":
        ms = int(args.get("ms", 100))
        time.sleep(ms / 1000.0)
        text_result(request_id, f"slept {ms}")
    elif name == "stderr":
        log(str(args.get("text", "")))
        text_result(request_id, "logged")
    elif name == "stderr_long":
        log("E" * int(args.get("bytes", 100_000)))
        log(str(args.get("then", "")))
        text_result(request_id, "logged")
    elif name == "stderr_flood":
        text = str(args.get("text", "flood"))
        sys.stderr.write("".join(f"{text} {n}\n" for n in range(int(args.get("lines", 10_000)))))
        sys.stderr.flush()
        text_result(request_id, "logged")
    elif name == "same_id_check":
        time.sleep(int(args.get("delay_ms", 0)) / 1000.0)
        text_result(request_id, json.dumps({"received_id": request_id, "tag": args.get("tag")}))
    elif name == "cancellable":
        deadline = time.monotonic() + int(args.get("ms", 1500)) / 1000.0
        key = json.dumps(request_id)
        with CANCELLED_CHANGED:
            while key not in CANCELLED and time.monotonic() < deadline:
                CANCELLED_CHANGED.wait(max(deadline - time.monotonic(), 0))
            cancelled = key in CANCELLED
        text_result(request_id, "cancelled" if cancelled else "finished")
    elif name == "log_then_echo":
        text = str(args.get("text", ""))
        send({"jsonrpc": "2.0", "method": "notifications/message",
              "params": {"level": "info", "logger": "misbehaving", "data": text}})
        time.sleep(0.05)
        text_result(request_id, text)
    elif name == "notify_later":
        text = str(args.get("text", ""))
        delay = int(args.get("delay_ms", 300)) / 1000.0
        text_result(request_id, "scheduled")
        time.sleep(delay)
        send({"jsonrpc": "2.0", "method": "notifications/message",
              "params": {"level": "info", "logger": "misbehaving", "data": text}})
    elif name == "burst":
        count = int(args.get("count", 200))
        token = ((params.get("_meta") or {}).get("progressToken"))
        lines = [json.dumps({"jsonrpc": "2.0", "method": "notifications/progress",
                             "params": {"progressToken": token, "progress": n + 1,
                                        "total": count}}).encode()
                 for n in range(count)]
        lines.append(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {
            "content": [{"type": "text", "text": f"after {count}"}]}}).encode())
        write_line(b"\n".join(lines))
    elif name == "environ":
        text_result(request_id, json.dumps(dict(os.environ)))
    else:
        send({"jsonrpc": "2.0", "id": request_id,
              "error": {"code": -32602, "message": f"Unknown tool: {name}"}})


def handle(message: dict) -> None:
    method = message.get("method")
    request_id = message.get("id")
    if method is None:
        return  # a response to a request of ours (none are sent)
    if "id" not in message:
        if method == "notifications/cancelled":
            with CANCELLED_CHANGED:
                CANCELLED.add(json.dumps((message.get("params") or {}).get("requestId")))
                CANCELLED_CHANGED.notify_all()
        return  # notifications/initialized, ...
    if method == "initialize":
        result(request_id, {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {"tools": {}, "logging": {}},
            "serverInfo": {"name": "misbehaving", "version": "1.0.0"},
        })
    elif method == "ping":
        result(request_id, {})
    elif method == "tools/list":
        result(request_id, {"tools": [
            {"name": name, "description": description,
             "inputSchema": {"type": "object", "properties": properties}}
            for name, description, properties in TOOLS
        ]})
    elif method == "tools/call":
        worker = threading.Thread(
            target=call_tool, args=(request_id, message.get("params") or {}), daemon=True
        )
        worker.start()
    else:
        send({"jsonrpc": "2.0", "id": request_id,
              "error": {"code": -32601, "message": f"Method not found: {method}"}})


def main() -> None:
    global GRANDCHILD
    linger = False
    for arg in sys.argv[1:]:
        if arg == "--ignore-sigterm":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        elif arg == "--linger":
            linger = True
        elif arg == "--spawn-grandchild":
            GRANDCHILD = subprocess.Popen(
                ["sleep", "300"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
            )
            log(f"GRANDCHILD {GRANDCHILD.pid}")
        elif arg.startswith("--slow-start="):
            time.sleep(int(arg.split("=", 1)[1]) / 1000.0)
        else:
            log(f"misbehaving: unknown option {arg}")
            sys.exit(2)
    for raw in sys.stdin.buffer:
        raw = raw.strip()
        if not raw:
            continue
        try:
            message = json.loads(raw)
        except ValueError:
            log("misbehaving: a line from the client is not JSON")
            continue
        if isinstance(message, dict):
            handle(message)
    # stdin closed: a well-behaved stdio server exits now.
    if linger:
        while True:
            time.sleep(3600)
    os._exit(0)


if __name__ == "__main__":
    main()
