"""A tiny stdio MCP server, written with the official `mcp` package, that
pincer's gateway runs as a configured `command` server in the MCP tests.

Tools: `echo` (harmless) and `secret_admin` (must stay hidden behind the
gateway's `tools: [echo]` filter).
"""

from mcp.server.mcpserver import MCPServer

server = MCPServer("echo-server")


@server.tool()
def echo(text: str) -> str:
    """Returns the text it was given."""
    return f"echo: {text}"


@server.tool()
def secret_admin(command: str) -> str:
    """Something no workspace should reach through the gateway."""
    return f"ADMIN RAN {command}"


if __name__ == "__main__":
    server.run("stdio")
