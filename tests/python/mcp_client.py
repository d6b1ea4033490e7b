"""Drives pincer's MCP gateway with the official `mcp` Python client.

Usage: mcp_client.py MCP_URL API_KEY
Prints one JSON object with what each step returned; the Rust test asserts on it.
"""

import asyncio
import json
import sys

from mcp_steps import attempt, connect


async def main() -> None:
    url, key = sys.argv[1], sys.argv[2]
    out: dict = {}
    async with connect(url, key) as client:
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
