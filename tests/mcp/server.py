"""MCP test server for toolgate's end-to-end proxy tests (tests/proxy_mcp.rs).

A streamable-HTTP MCP server (the official SDK's MCPServer, mcp 2.x's name for FastMCP) with
four tools: add, send_email, wire_transfer, run_shell. It serves on a socket bound here to
127.0.0.1:0 (optionally over TLS), prints `LISTENING <port>` on stdout once the app has started,
and appends every `tools/call` it actually receives to the `--record` file as one JSON line
`{"name": ..., "arguments": ...}` -- recorded from the raw HTTP body before the SDK handles it,
so the file shows exactly what reached the server. It exits when its stdin closes, so a test
that dies cannot leave it behind.
"""

import argparse
import asyncio
import json
import os
import socket
import sys
import threading

import uvicorn
from mcp.server.mcpserver import MCPServer

server = MCPServer("toolgate-test-tools")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def send_email(to: str, subject: str, body: str) -> str:
    """Send an e-mail (pretend); echoes what would be sent."""
    return f"sent to {to}: {subject} / {body}"


@server.tool()
def wire_transfer(amount: float, to_account: str) -> str:
    """Wire money (pretend)."""
    return f"transferred {amount:.2f} to {to_account}"


@server.tool()
def run_shell(command: str) -> str:
    """Run a shell command (pretend)."""
    return f"ran {command}"


class Recorder:
    """ASGI wrapper: records tools/call requests from POST bodies, prints LISTENING at startup."""

    def __init__(self, app, record_path, port):
        self.app = app
        self.record_path = record_path
        self.port = port

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await self.app(scope, receive, self._announce(send))
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before sending its body
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        self._record(body)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _announce(self, send):
        async def wrapped(message):
            await send(message)
            if message["type"] == "lifespan.startup.complete":
                print(f"LISTENING {self.port}", flush=True)

        return wrapped

    def _record(self, body):
        try:
            parsed = json.loads(body)
        except ValueError:
            return
        messages = parsed if isinstance(parsed, list) else [parsed]
        lines = []
        for m in messages:
            if isinstance(m, dict) and m.get("method") == "tools/call":
                params = m.get("params") or {}
                lines.append(
                    json.dumps({"name": params.get("name"), "arguments": params.get("arguments")})
                )
        if lines:
            with open(self.record_path, "a", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines))
                f.flush()
                os.fsync(f.fileno())


def exit_when_stdin_closes():
    def watch():
        sys.stdin.buffer.read()
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--record", required=True, help="file to append received tools/call lines to")
    p.add_argument("--certfile", help="PEM server certificate (chain); enables TLS")
    p.add_argument("--keyfile", help="PEM private key of --certfile")
    p.add_argument("--json-response", action="store_true", help="answer with JSON, not SSE")
    p.add_argument("--stateless", action="store_true", help="no Mcp-Session-Id sessions")
    args = p.parse_args()

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]

    app = server.streamable_http_app(
        json_response=args.json_response, stateless_http=args.stateless, host="127.0.0.1"
    )
    config = uvicorn.Config(
        Recorder(app, args.record, port),
        log_level="warning",
        lifespan="on",
        ssl_certfile=args.certfile,
        ssl_keyfile=args.keyfile,
    )
    exit_when_stdin_closes()
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
