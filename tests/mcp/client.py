"""MCP test client for toolgate's end-to-end proxy tests (tests/proxy_mcp.rs).

Calls one tool with the official SDK's client (streamable HTTP transport + ClientSession) and
prints one JSON line `{"isError": bool, "text": "<text content, joined by newlines>"}`, exit 0.
Transport and protocol errors go to stderr with exit code 2.

Its HTTP client is built explicitly: the proxy (`--proxy`, credentials in the URL) and the CA to
trust (`--ca`) are passed in, and the environment (HTTP(S)_PROXY, SSL_CERT_FILE) is ignored.
"""

import argparse
import asyncio
import json
import ssl
import sys
import traceback

import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client


def http_client(args):
    verify = ssl.create_default_context(cafile=args.ca) if args.ca else True
    headers = dict(h.split(":", 1) for h in args.header)
    return httpx2.AsyncClient(
        proxy=args.proxy,
        verify=verify,
        trust_env=False,
        headers={k.strip(): v.strip() for k, v in headers.items()},
        timeout=httpx2.Timeout(60.0, read=300.0),
    )


async def call(args):
    async with http_client(args) as client:
        async with streamable_http_client(args.url, http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool(args.tool, json.loads(args.args))
    text = "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")
    return {"isError": bool(result.is_error), "text": text}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True, help="the MCP endpoint, e.g. http://127.0.0.1:PORT/mcp")
    p.add_argument("--proxy", help="proxy URL, e.g. http://agent:KEY@127.0.0.1:PORT")
    p.add_argument("--ca", help="PEM file of the CA to trust for https (else system roots)")
    p.add_argument("--tool", required=True)
    p.add_argument("--args", default="{}", help="tool arguments as a JSON object")
    p.add_argument("--header", action="append", default=[], help="extra request header K: V")
    args = p.parse_args()
    try:
        out = asyncio.run(call(args))
    except BaseException:  # noqa: BLE001 - report every failure, including exception groups
        traceback.print_exc(file=sys.stderr)
        sys.exit(2)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
