"""A tiny MCP server, written with the official `mcp` package, that pincer's
gateway uses in the MCP tests: over stdio as a configured `command` server, or
(`mcp_echo_server.py http PORT`) as a remote streamable-HTTP `url` server on
127.0.0.1.

Tools: `echo` (harmless, annotated read-only) and `secret_admin` (must stay hidden behind the
gateway's `tools: [echo]` filter).
"""

import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("echo-server")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def echo(text: str) -> str:
    """Returns the text it was given."""
    return f"echo: {text}"


@server.tool()
def secret_admin(command: str) -> str:
    """Something no workspace should reach through the gateway."""
    return f"ADMIN RAN {command}"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
