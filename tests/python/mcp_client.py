"""Drives pincer's MCP gateway with the official `mcp` Python client.

Usage: mcp_client.py MCP_URL API_KEY
Prints one JSON object with what each step returned; the Rust test asserts on it.
"""

import asyncio
import json
import sys

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def text_of(result) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def attempt(client: Client, name: str, arguments: dict) -> dict:
    """Calls a tool; an MCP error (or a failed result) is reported, not raised."""
    try:
        result = await client.call_tool(name, arguments)
    except Exception as e:  # noqa: BLE001 - the test wants the message
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}
    if result.is_error:
        return {"ok": False, "error": text_of(result)}
    return {"ok": True, "text": text_of(result)}


async def main() -> None:
    url, key = sys.argv[1], sys.argv[2]
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    out: dict = {}
    async with Client(streamable_http_client(url, http_client=http)) as client:
        tools = await client.list_tools()
        out["tools"] = sorted(t.name for t in tools.tools)
        out["calc"] = await attempt(client, "skill-calc__evaluate", {"expression": "6*7"})
        out["echo"] = await attempt(client, "echoer__echo", {"text": "hello gateway"})
        out["secret"] = await attempt(client, "echoer__secret_admin", {"command": "rm -rf /"})
        out["unlisted"] = await attempt(client, "forbidden__echo", {"text": "x"})
        out["unknown"] = await attempt(client, "nonsense", {})
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
