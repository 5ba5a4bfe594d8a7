"""Context parallelism under DeepSpeed ZeRO-2 and ZeRO-3 (2 CPU processes, gloo, DP=1 x CP=2): the
GRPO and SFT updates equal the per-token reference, so the engine's averaging over the processes and
division by the accumulation steps leave no CP-size factor. Slow: DeepSpeed compiles its shm_comm op
on first use and its imports are heavy; the default run covers the same updates under DDP
(test_context_parallel.py)."""

import pytest
import torch
from cp_support import GRPO_UPDATES, SFT_UPDATES, reference_grpo_update, reference_sft_update
from cp_worker import UPDATE_FAMILIES
from test_data_parallel import launch_worker


@pytest.mark.slow
@pytest.mark.parametrize("stage", [2, 3])
def test_zero_updates_under_cp2_equal_reference(stage, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"cp-zero{stage}")
    launch_worker(f"cpu_2proc_zero{stage}.yaml", str(out), "--updates-only", worker="cp_worker.py")
    for family in UPDATE_FAMILIES:
        for case in GRPO_UPDATES:
            result = torch.load(out / f"grpo_{family}_{case}_cp2.pt")
            assert result["distributed_type"] == "DistributedType.DEEPSPEED" and result["grid"] == (1, 2)
            assert result["accumulation"] > 1
            torch.testing.assert_close(result["params"], reference_grpo_update(family, case), rtol=1e-4, atol=1e-6)
        for case in SFT_UPDATES:
            result = torch.load(out / f"sft_{family}_{case}_cp2.pt")
            assert result["distributed_type"] == "DistributedType.DEEPSPEED"
            torch.testing.assert_close(result["params"], reference_sft_update(family, case)[0], rtol=1e-4, atol=1e-6)
