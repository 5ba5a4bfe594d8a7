"""DeepSpeed's CPU-accelerator warning, as the real library prints it, is silenced by astra_core.quiet (and only
by it: the same import without it prints the warning, so the test notices when DeepSpeed rewords it)."""

import subprocess
import sys

PROBE = "from deepspeed.accelerator import get_accelerator; get_accelerator()"
WARNING = "Setting accelerator to CPU"


def run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "ACCELERATE_USE_DEEPSPEED": "false"})
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_deepspeed_cpu_warning_is_printed_without_quiet_and_silenced_with_it():
    assert WARNING in run(PROBE)
    assert WARNING not in run(f"from astra_core.quiet import quiet_libraries; quiet_libraries(); {PROBE}")
