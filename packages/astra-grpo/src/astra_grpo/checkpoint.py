"""Checkpoints as the paper keeps them (section 3.1): weights often, full training state rarely.

    OUTPUT_DIR/weights/step-000050/   model + tokenizer in HF format (transformers / vLLM load it), all kept
    OUTPUT_DIR/state/step-000050/     optimizer, scheduler, RNG of every process, data position, ABF
                                      buffer (accelerate's save_state + trainer_state.pt), newest K kept
    OUTPUT_DIR/final/                 weights at the end of training

Directories appear atomically (written under a temporary name, then renamed), so a run killed
mid-save leaves the previous state as the newest.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import torch

STATE_FILE = "trainer_state.pt"
_STEP = re.compile(r"^step-(\d+)$")


def step_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:06d}"


class CheckpointError(Exception):
    """A checkpoint that could not be written (a full disk, a quota); its half-written copy is removed."""


@contextlib.contextmanager
def _writing(what: str, partial: Path) -> Iterator[None]:
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - torch, safetensors and the OS each raise their own types
        shutil.rmtree(partial, ignore_errors=True)  # frees what the attempt took
        said = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())[:300]
        raise CheckpointError(f"could not save the {what} in {partial.with_suffix('')} "
                              f"({type(exc).__name__}: {said})") from exc


def resume_hint(output: Path) -> str:
    """What a rerun of a stopped run in `output` starts from."""
    newest = latest_state(output / "state")
    return f"--resume continues from {newest}" if newest else "no training state was saved: a rerun starts over"


def save_weights(accelerator, model, tokenizer, directory: Path) -> None:
    """HF-format weights of the (possibly sharded) model; every process must call it."""
    state_dict = accelerator.get_state_dict(model)  # gathers ZeRO-3 shards
    if accelerator.is_main_process:
        partial = directory.with_name(directory.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        with _writing("weights", partial):
            accelerator.unwrap_model(model).save_pretrained(partial, state_dict=state_dict)
            tokenizer.save_pretrained(partial)
        shutil.rmtree(directory, ignore_errors=True)
        partial.rename(directory)
    accelerator.wait_for_everyone()


def save_training_state(accelerator, root: Path, step: int, trainer_state: dict, keep: int) -> Path:
    """Full state under root/step-N (every process writes its part); prunes all but the newest `keep`."""
    directory = step_dir(root, step)
    partial = directory.with_name(directory.name + ".partial")
    if accelerator.is_main_process:
        shutil.rmtree(partial, ignore_errors=True)
    accelerator.wait_for_everyone()
    with _writing("training state", partial):
        accelerator.save_state(str(partial), safe_serialization=False)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        with _writing("training state", partial):
            torch.save(trainer_state, partial / STATE_FILE)
        shutil.rmtree(directory, ignore_errors=True)
        partial.rename(directory)
        for old in saved_steps(root)[:-keep]:
            shutil.rmtree(step_dir(root, old), ignore_errors=True)
    accelerator.wait_for_everyone()
    return directory


def saved_steps(root: Path) -> list[int]:
    """Steps with a complete saved state, oldest first."""
    if not root.exists():
        return []
    steps = [int(m.group(1)) for p in root.iterdir() if p.is_dir() and (m := _STEP.match(p.name))
             and (p / STATE_FILE).exists()]
    return sorted(steps)


def latest_state(root: Path) -> Path | None:
    steps = saved_steps(root)
    return step_dir(root, steps[-1]) if steps else None


def load_training_state(accelerator, directory: Path) -> dict:
    """Restore model, optimizer, registered objects and RNG; return the trainer's own state."""
    accelerator.load_state(str(directory))
    return torch.load(directory / STATE_FILE, weights_only=False)
