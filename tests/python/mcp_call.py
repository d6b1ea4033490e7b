"""Calls one tool on pincer's MCP gateway with the official `mcp` Python client.

Usage: mcp_call.py MCP_URL API_KEY TOOL ARGUMENTS_JSON
Prints one JSON object: {"ok": true, "text": ...} or {"ok": false, "error": ...}.
"""

import asyncio
import json
import sys

from mcp_steps import attempt, connect


async def main() -> None:
    url, key, tool, arguments = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    async with connect(url, key) as client:
        out = await attempt(client, tool, json.loads(arguments))
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
