"""Lists the tools pincer's MCP gateway offers, with their input schemas,
and calls one, with the official `mcp` Python client.

Usage: mcp_tools.py MCP_URL API_KEY TOOL ARGUMENTS_JSON...
Prints one JSON object: {"tools": [{name, description, input_schema}],
"calls": [attempt, ...]} (one attempt per ARGUMENTS_JSON).
"""

import asyncio
import json
import sys

from mcp_steps import attempt, connect


async def main() -> None:
    url, key, tool = sys.argv[1], sys.argv[2], sys.argv[3]
    out: dict = {}
    async with connect(url, key) as client:
        tools = await client.list_tools()
        out["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in tools.tools
        ]
        out["calls"] = [await attempt(client, tool, json.loads(a)) for a in sys.argv[4:]]
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
