"""A small MCP server over streamable HTTP, for testing the HTTP transport: `python notes_http.py PORT`."""

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("notes")
NOTES: dict[str, str] = {}


@server.tool()
def add_note(title: str, text: str) -> dict:
    """Store a note under a title and return its note_id."""
    NOTES[title] = text
    return {"note_id": title}


@server.tool()
def get_note(note_id: str) -> str:
    """Return the text of the note with this note_id."""
    return NOTES.get(note_id, "no such note")


@server.tool()
def list_notes() -> list[str]:
    """List the titles of all stored notes."""
    return sorted(NOTES)


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
