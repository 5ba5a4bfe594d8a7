"""astra-toolgraph: Tool documents -> tool-chain graph -> walks -> tasks -> multi-turn trajectories over real MCP servers and a tool emulator."""

__version__ = "0.1.0"
