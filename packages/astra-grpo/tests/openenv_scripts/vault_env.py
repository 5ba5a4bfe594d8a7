"""An OpenEnv environment astra-grpo did not make, written as OpenEnv's own environments are (finqa_env's shape):
an `MCPEnvironment` with FastMCP tools, whose `open_vault` tool ends the episode with the environment's reward.

    python vault_env.py --port 0 --port-file FILE

Rooms have vault codes (`get_code(room)`); `open_vault(code)` with the code of the room the episode was reset in
scores 1, any other code 0, and ends the episode. `pull_the_plug()` kills this server process (SIGKILL): a server
lost mid-episode. Runs under .venv-openenv.
"""

import os
import signal
import socket
import sys

import uvicorn
from fastmcp import FastMCP
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.env_server.types import Observation, State

CODES = {"red": "4711", "blue": "1234"}


class VaultEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        mcp = FastMCP("vault")
        self.room, self.opened, self.steps = "red", None, 0

        @mcp.tool
        def get_code(room: str) -> str:
            """The vault code of a room.

            Args:
                room: The room's name.
            """
            return f"The code of the {room} room is {CODES[room]}." if room in CODES else f"There is no {room} room."

        @mcp.tool
        def open_vault(code: str) -> str:
            """Try a code on the vault of this episode's room.

            Args:
                code: The vault code.
            """
            self.opened = code == CODES[self.room]
            return "The vault opens." if self.opened else "Wrong code."

        @mcp.tool
        def submit_code(code: str) -> str:
            """Submit the vault code (answered in step_async, as finqa's submit_answer is: a plain Observation).

            Args:
                code: The vault code.
            """
            return "unreachable"

        @mcp.tool
        def pull_the_plug() -> str:
            """Stop the server."""
            os.kill(os.getpid(), signal.SIGKILL)
            return "unreachable"

        super().__init__(mcp)

    def reset(self, seed=None, episode_id=None, room: str = "red", **kwargs) -> Observation:
        self.room, self.opened, self.steps = room, None, 0
        return Observation(done=False, reward=0.0, metadata={"room": room})

    def _step_impl(self, action, timeout_s=None, **kwargs) -> Observation:
        return Observation(done=False, reward=0.0, metadata={"error": "only tool calls here"})

    async def step_async(self, action, timeout_s=None, **kwargs) -> Observation:
        self.steps += 1
        if isinstance(action, CallToolAction) and action.tool_name == "submit_code":
            # finqa's shape (its submit_answer): a plain Observation, done with the reward, no MCP tool result
            right = action.arguments.get("code") == CODES.get(self.room)
            return Observation(done=True, reward=1.0 if right else 0.0, metadata={"verdict": "right" if right else "wrong"})
        observation = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        if isinstance(action, CallToolAction) and action.tool_name == "open_vault":
            observation.reward, observation.done = (1.0 if self.opened else 0.0), True
        elif isinstance(action, CallToolAction):
            observation.reward = 0.0
        return observation

    @property
    def state(self) -> State:
        return State(step_count=self.steps, room=self.room)


def main() -> None:
    port = int(sys.argv[sys.argv.index("--port") + 1])
    port_file = sys.argv[sys.argv.index("--port-file") + 1]
    app = create_app(VaultEnvironment, CallToolAction, CallToolObservation, env_name="vault", max_concurrent_envs=16)
    sock = socket.create_server(("127.0.0.1", port))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    with open(port_file + ".tmp", "w") as handle:
        handle.write(str(sock.getsockname()[1]))
    os.replace(port_file + ".tmp", port_file)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
