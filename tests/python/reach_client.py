"""What pincer's gateway serves to workspace keys, seen with the official
`mcp` and `openai` clients.

Usage: reach_client.py BASE_URL API_KEY SPEC_JSON [API_KEY SPEC_JSON ...]
SPEC_JSON: {"tools": ["<source>__<tool>", ...], "chats": ["alias", ...]}
Prints a JSON list with one object per key, in order: the MCP tools/list
names (sorted), each tool call's outcome, the /v1/models ids (sorted) and
each chat's outcome. (One process for many keys: importing the clients
takes seconds.)
"""

import asyncio
import json
import sys

import openai

from mcp_steps import attempt, connect


async def mcp_side(url: str, key: str, tools: list) -> dict:
    out: dict = {"calls": {}}
    async with connect(url, key) as client:
        listed = await client.list_tools()
        out["tools"] = sorted(t.name for t in listed.tools)
        for name in tools:
            out["calls"][name] = await attempt(client, name, {})
    return out


def llm_side(base: str, key: str, chats: list) -> dict:
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=30)
    out: dict = {"models": sorted(m.id for m in client.models.list().data), "chats": {}}
    for alias in chats:
        try:
            reply = client.chat.completions.create(
                model=alias, messages=[{"role": "user", "content": "hi"}], max_tokens=8
            )
            out["chats"][alias] = {"ok": True, "text": reply.choices[0].message.content}
        except openai.APIStatusError as e:
            out["chats"][alias] = {"ok": False, "status": e.status_code, "error": str(e)}
        except openai.APIError as e:  # connection problems: not a refusal
            out["chats"][alias] = {"ok": False, "status": None, "error": str(e)}
    return out


def main() -> None:
    base, pairs = sys.argv[1], sys.argv[2:]
    if not pairs or len(pairs) % 2:
        sys.exit("usage: reach_client.py BASE_URL API_KEY SPEC_JSON [API_KEY SPEC_JSON ...]")
    answers = []
    for key, spec in zip(pairs[::2], pairs[1::2]):
        spec = json.loads(spec)
        out = asyncio.run(mcp_side(f"{base}/mcp", key, spec.get("tools", [])))
        out.update(llm_side(base, key, spec.get("chats", [])))
        answers.append(out)
    print(json.dumps(answers))


if __name__ == "__main__":
    main()
