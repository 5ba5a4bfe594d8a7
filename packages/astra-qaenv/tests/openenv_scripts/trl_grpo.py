"""Someone else's trainer on our environment: TRL's GRPOTrainer, through its OpenEnv integration
(`environment_factory`), trains a tiny random-init model against `astra-qaenv serve-openenv`.

    python trl_grpo.py BASE_URL MODEL_DIR SAMPLE.json OUTPUT_DIR REPORT.jsonl

The environment class is what TRL's OpenEnv guide has users write: one OpenEnv session per instance (OpenEnv's
`MCPToolClient`), `reset` starting an episode of the dataset row's sample, and one method per tool of the sample
(TRL reads their signatures and docstrings as tool schemas) calling it over MCP. The reward function ends each
rollout's episode with its final answer (`Action(metadata={"answer": ...})`): the reward is the server's, ours.
Each scored rollout goes to REPORT (sample, reward, the server's reward components). Runs under .venv-openenv.
"""

import inspect
import json
import sys

from datasets import Dataset
from openenv.core.env_server.types import Action
from openenv.core.mcp_client import MCPToolClient
from trl import GRPOConfig, GRPOTrainer

BASE_URL, MODEL_DIR, SAMPLE, OUTPUT_DIR, REPORT = sys.argv[1:6]
sample = json.loads(open(SAMPLE).read())


def tool_method(spec: dict):
    function = spec["function"]
    properties = (function.get("parameters") or {}).get("properties") or {}

    def method(self, **arguments):
        try:
            return self.client.call_tool(function["name"], **arguments)
        except RuntimeError as exc:  # the environment's error result, as text for the model
            return str(exc)

    keyword = inspect.Parameter.KEYWORD_ONLY
    method.__signature__ = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [inspect.Parameter(name, keyword, annotation=str) for name in properties], return_annotation=str)
    method.__annotations__ = {**{name: str for name in properties}, "return": str}
    method.__name__ = method.__qualname__ = function["name"]
    method.__doc__ = (f"{function.get('description') or function['name']}\n\nArgs:\n"
                      + "".join(f"    {name}: {spec.get('description') or name}\n" for name, spec in properties.items())
                      + "\nReturns:\n    The tool's answer.\n")
    return method


class AstraQAEnvironment:
    """One rollout's environment: an OpenEnv session on the served environment."""

    def __init__(self):
        self.client = MCPToolClient(base_url=BASE_URL).sync()
        self.client.connect()
        self.sample_id = None

    def reset(self, sample_id: str, **row) -> None:
        observation = self.client.reset(sample_id=sample_id).observation
        self.sample_id = observation.metadata["sample_id"]
        return None  # the prompt is the dataset row's


for tool in sample["tools"]:
    setattr(AstraQAEnvironment, tool["function"]["name"], tool_method(tool))


def served_reward(completions, environments, **kwargs):
    rewards = []
    with open(REPORT, "a") as report:
        for completion, environment in zip(completions, environments, strict=True):
            last = completion[-1] if isinstance(completion, list) and completion else {}
            answer = last.get("content") if last.get("role") == "assistant" else None
            end = environment.client.step(Action(metadata={"answer": answer} if isinstance(answer, str) else {}))
            rewards.append(float(end.reward))
            tool_turns = sum(m.get("role") == "tool" for m in completion) if isinstance(completion, list) else 0
            report.write(json.dumps({"sample_id": environment.sample_id, "reward": end.reward, "done": end.done,
                                     "metadata": end.observation.metadata, "tool_turns": tool_turns}) + "\n")
    return rewards


dataset = Dataset.from_list([{"prompt": sample["messages"], "sample_id": sample["id"]}] * 4)
config = GRPOConfig(output_dir=OUTPUT_DIR, max_steps=1, per_device_train_batch_size=2, num_generations=2,
                    max_completion_length=24, max_tool_calling_iterations=2, learning_rate=1e-3, logging_steps=1,
                    report_to="none", use_cpu=True, bf16=False, save_strategy="no", seed=0)
trainer = GRPOTrainer(model=MODEL_DIR, reward_funcs=served_reward, args=config, train_dataset=dataset,
                      environment_factory=AstraQAEnvironment)
trainer.train()
print(json.dumps({"steps": trainer.state.global_step, "log": trainer.state.log_history}))
