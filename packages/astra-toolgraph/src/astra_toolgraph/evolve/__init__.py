"""AReaL-SEA's self-evolving data engine (paper §4): diversified plans, task synthesis with
executable checkers, task verification, rollouts with a user simulator, trajectory verification
with TASK/TRAJECTORY attribution, reflection; K iterations per independent stream."""

from astra_toolgraph.evolve.config import EvolveConfig
from astra_toolgraph.evolve.domains import Domain, domain_of
from astra_toolgraph.evolve.export import rl_sample_record, user_sft_record
from astra_toolgraph.evolve.plans import AgentFailed, generate_plans
from astra_toolgraph.evolve.reflection import reflect
from astra_toolgraph.evolve.stream import StreamResult, run_stream
from astra_toolgraph.evolve.tasks import replay, synthesize_task, verify_task
from astra_toolgraph.evolve.trajectories import check_trajectory, roll_out, verify_trajectory

__all__ = ["AgentFailed", "Domain", "EvolveConfig", "StreamResult", "check_trajectory", "domain_of", "generate_plans",
           "reflect", "replay", "rl_sample_record", "roll_out", "run_stream", "synthesize_task", "user_sft_record",
           "verify_task", "verify_trajectory"]
