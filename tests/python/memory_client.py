"""Drives pincer's memory tools through the MCP gateway with the official `mcp` client.

Usage: memory_client.py MCP_URL API_KEY
Lists the tools, then memorize -> recall (Chinese query) -> forget -> recall, and
prints one JSON object with what each step returned; the Rust test asserts on it.
"""

import asyncio
import json
import re
import sys

from mcp_steps import attempt, connect


async def main() -> None:
    url, key = sys.argv[1], sys.argv[2]
    out: dict = {}
    async with connect(url, key) as client:
        tools = await client.list_tools()
        out["tools"] = sorted(t.name for t in tools.tools)
        out["schemas"] = {t.name: t.input_schema for t in tools.tools}
        out["memorize"] = await attempt(
            client, "memory__memorize", {"text": "用户喜欢靠窗的座位", "kind": "preference"}
        )
        out["other"] = await attempt(
            client, "memory__memorize", {"text": "Deploys go through GitHub Actions"}
        )
        found = re.search(r"#(\d+)", out["memorize"].get("text", ""))
        memory_id = int(found.group(1)) if found else -1
        out["id"] = memory_id
        out["recall"] = await attempt(client, "memory__recall", {"query": "座位偏好"})
        out["forget"] = await attempt(client, "memory__forget", {"id": memory_id})
        out["forget_again"] = await attempt(client, "memory__forget", {"id": memory_id})
        out["recall_after"] = await attempt(client, "memory__recall", {"query": "座位偏好"})
        out["bad_args"] = await attempt(client, "memory__recall", {"limit": 3})
    print(json.dumps(out, ensure_ascii=False))


if __name__ == "__main__":
    asyncio.run(main())
