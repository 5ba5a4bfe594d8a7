"""A small MCP server over stdio whose tools return what is not text (an image, audio, resources), as
server-everything's do: `python media_stdio.py`."""

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.utilities.types import Audio, Image
from mcp.types import BlobResourceContents, EmbeddedResource, ResourceLink, TextContent

server = MCPServer("media")
PNG = b"\x89PNG\r\n\x1a\n" + bytes(992)  # 1,000 bytes


@server.tool()
def snapshot() -> list:
    """A caption, then the image it captions."""
    return [TextContent(type="text", text="the shelf"), Image(data=PNG, format="png")]


@server.tool()
def recording() -> Audio:
    """Ten bytes of audio."""
    return Audio(data=bytes(10), format="wav")


@server.tool()
def attachments() -> list:
    """A binary resource and a link to another."""
    return [EmbeddedResource(type="resource", resource=BlobResourceContents(uri="file:///b.bin", blob="AAAAAAAAAA==")),
            ResourceLink(type="resource_link", uri="file:///notes.md", name="notes", description="the notes")]


if __name__ == "__main__":
    server.run("stdio")
