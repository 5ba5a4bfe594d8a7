"""Stopping a training run on a signal with its state saved: a batch scheduler's time limit or preemption.

On SIGTERM or SIGUSR1 a trainer finishes the step it is in, saves the training state there (whatever
`save_state_steps` says), and stops with exit 128 + the signal (143, 138); `--resume` continues from that
state exactly as from any other. Every process stops after the same step. A second signal ends the process
at once (the default action).

Slurm sends SIGTERM at the time limit and SIGKILL `KillWait` later (30 s by default), often less than a step
takes: ask for a signal ahead of time, `#SBATCH --signal=USR1@300` (five minutes before) for the job's tasks.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path

SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class Stopped(Exception):
    """A run stopped on a signal after `step`, its state saved in `state`."""

    def __init__(self, command: str, signum: int, step: int, state: str):
        super().__init__(f"{command}: {signal.Signals(signum).name}: stopped after step {step}, its training state "
                         f"saved in {state} (--resume continues from it)")
        self.exit_code = 128 + signum


class StopSignals:
    """While entered, SIGTERM and SIGUSR1 ask the run to stop after its current step (see the module docstring).
    A signal someone else handles (or ignores) is left alone, as is everything outside the main thread."""

    def __init__(self, command: str, accelerator) -> None:
        self.command, self.accelerator = command, accelerator
        self.received = 0
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                if signal.getsignal(signum) == signal.SIG_DFL:
                    self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def _on_signal(self, signum: int, frame) -> None:
        self.received = signum
        signal.signal(signum, signal.SIG_DFL)  # a second one ends the process at once

    def __exit__(self, *exc_info) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    def end_of_step(self, step: int, last_step: int, save_every: int, save_state: Callable[[], Path],
                    on_step: Callable[[int], None] | None) -> Stopped | None:
        """The end of a training step on every process: the full state when due (every `save_every` steps), the
        caller's hook, then the stop a signal asked for, with the state of this step saved whatever is due."""
        saved = save_state() if save_every and step % save_every == 0 else None
        if on_step is not None:
            on_step(step)
        if step < last_step and (signum := self.agreed()):
            return Stopped(self.command, signum, step, str(saved or save_state()))
        return None

    def agreed(self) -> int:
        """The signal any process received (0: none), the same on every process. A collective: every process
        calls it at the same point of each step."""
        import torch  # here, not at import: the CLI's error handling imports this module (`--help` stays light)

        flag = torch.tensor([self.received], device=self.accelerator.device)
        if self.accelerator.num_processes > 1:
            flag = self.accelerator.gather(flag).max()
        return int(flag.item())
