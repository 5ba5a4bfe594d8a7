"""Ground-truth and imperfect replays through astra-eval's tau2 adapter, re-scored by tau2's own tool.

One process (tau2 takes a while to import): for the first argv[1] tasks of each domain (telecom's first
ones need the user to act on their device), plays the oracle with nothing left out and with half of the
agent's actions left out (astra_eval.tau2.run_item, what `astra-eval run tau2 --oracle` runs), then
re-scores the imperfect replay with `tau2 evaluate-trajs`.
Prints {"oracle": {id: score}, "drop": {domain: {task/trial: score}}, "tau2": {domain: {...}}}.
"""

import asyncio
import json
import sys
from pathlib import Path

from astra_eval import tau2
from astra_eval.results import make_item
from tau2_own_eval import tau2_rewards

limit, work = int(sys.argv[1]), Path(sys.argv[2])


def replay(drop_rate: float, seed: int) -> list[dict]:
    def simulate(domain, task, trial_seed):
        return tau2.simulate_oracle(domain, task, drop_rate=drop_rate, seed=trial_seed, max_steps=200, max_errors=10)

    async def play_all() -> list[dict]:
        return [await tau2.run_item(make_item("tau2", domain, name, 0, seed), simulate)
                for domain in tau2.DOMAINS for name in list(tau2.tasks(domain))[:limit]]

    return asyncio.run(play_all())


oracle, dropped = replay(0.0, 0), replay(0.5, 1)
ours: dict = {}
for record in dropped:
    ours.setdefault(record["category"], {})[f"{record['item_id']}/{record['trial']}"] = record["score"]
print(json.dumps({"oracle": {r["id"]: r["score"] for r in oracle}, "drop": ours,
                  "tau2": tau2_rewards(dropped, work)}))
