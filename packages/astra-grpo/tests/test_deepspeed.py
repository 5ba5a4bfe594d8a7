"""DeepSpeed ZeRO-2 with 2 CPU processes (gloo): the GRPO update equals the per-token reference,
so the engine's own division by the accumulation steps and averaging over processes are undone
exactly once. Slow: the first run compiles DeepSpeed's shm_comm op (~35 s) and deepspeed imports
are heavy; the default run covers the same update with plain data parallelism."""

import pytest
import torch
from dp_worker import GRPO_CASES
from test_data_parallel import launch_worker, reference_grpo


@pytest.mark.slow
def test_zero2_update_equals_reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("zero2")
    launch_worker("cpu_2proc_zero2.yaml", str(out))
    for case in GRPO_CASES:
        result = torch.load(out / f"grpo_{case}.pt")
        assert result["distributed_type"] == "DistributedType.DEEPSPEED" and result["processes"] == 2
        assert result["accumulation"] > 1
        torch.testing.assert_close(result["params"], reference_grpo(case), rtol=1e-4, atol=1e-6)
