"""What the MCP test clients share: a session on pincer's gateway with a
workspace key, and tool calls whose failures are reported, not raised."""

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def connect(url: str, key: str) -> Client:
    """An official `mcp` client on `url` (streamable HTTP) with `key` as bearer."""
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    return Client(streamable_http_client(url, http_client=http))


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
