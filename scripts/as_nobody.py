#!/usr/bin/env python3
"""Run a command as nobody (uid 65534), the way a user without root runs it: how the sandbox is shown and
tested without root on a machine where only root is at hand.

    sudo .venv/bin/python scripts/as_nobody.py COMMAND [ARG ...]

One change besides the user, for reachability only: the command runs in a private mount namespace in which
every directory on the way to this Python, its virtualenv and the working directory that only its owner may
search (e.g. /root, 0700, holding pyenv) is covered by an empty one anyone may search, with the entries on
those ways bound back. A user's own Python and checkout are reachable to that user in the same way. HOME is
a fresh directory of nobody's, in the caller's TMPDIR where nobody can reach it (else in /tmp), and TMPDIR is
a directory in it: whatever the command leaves there is removed with it.
Also used by astra-sandbox's test_rootless.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

NOBODY = 65534


def unsearchable_steps(paths: list[str]) -> dict[str, list[str]]:
    """Each directory on the way to one of `paths` that others may not search -> its entries on those ways,
    outer directories first."""
    steps: dict[str, list[str]] = {}
    for path in paths:
        parts = Path(path).parts
        for depth in range(1, len(parts)):  # every directory above the path's last part, its parent included
            directory = os.path.join(*parts[:depth])
            if not os.stat(directory).st_mode & 0o001 and parts[depth] not in steps.get(directory, []):
                steps.setdefault(directory, []).append(parts[depth])
    return dict(sorted(steps.items(), key=lambda step: len(Path(step[0]).parts)))


def uncovered(steps: dict[str, list[str]], *, for_others: bool = False) -> str:
    """A temporary directory below none of the steps (the namespace covers those: a stash there would vanish), the
    caller's own first; `for_others`: also one anyone may reach (nobody's HOME and TMPDIR go there)."""
    for candidate in (tempfile.gettempdir(), "/tmp", "/dev/shm"):
        real = Path(os.path.realpath(candidate))
        if (real.is_dir() and not any(real.is_relative_to(directory) for directory in steps)
                and (not for_others or reachable_to_others(real))):
            return str(real)
    sys.exit(f"as_nobody.py: no temporary directory {'is reachable to nobody' if for_others else 'is below none of '
             'the directories only their owner may search'}")


def reachable_to_others(real: Path) -> bool:
    """Every directory from / down to `real` (a real path) may be searched by anyone."""
    return all(os.stat(directory).st_mode & 0o001 for directory in (real, *real.parents))


def shell_script(steps: dict[str, list[str]], stashes: str) -> str:
    """The namespace's set-up: each step's directory is bound to a stash (a directory below `stashes`, which
    the caller removes), covered, and its entries bound back from the stash."""
    lines = ["set -e"]
    for directory, entries in steps.items():
        lines += [f'stash=$(mktemp -d -p "{stashes}"); mount --bind "{directory}" "$stash"',
                  f'mount -t tmpfs -o mode=755,size=1m tmpfs "{directory}"']
        lines += [f'mkdir "{directory}/{entry}"; mount --bind "$stash/{entry}" "{directory}/{entry}"'
                  for entry in entries]
    return "\n".join([*lines, f'exec setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups "$@"'])


def main(command: list[str]) -> None:
    if not command:
        sys.exit(__doc__)
    if os.geteuid() != 0:
        sys.exit("as_nobody.py needs root (it makes a mount namespace and switches user); "
                 "without root, run the command as yourself")
    python = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    steps = unsearchable_steps([python, os.path.realpath(sys.prefix), os.getcwd()])
    with (tempfile.TemporaryDirectory(prefix="astra-nobody-", dir=uncovered(steps, for_others=True)) as home,
          tempfile.TemporaryDirectory(prefix="astra-nobody-stashes-", dir=uncovered(steps)) as stashes):  # 0700
        script = shell_script(steps, stashes)
        temporary = os.path.join(home, "tmp")  # (e.g. pytest's files as nobody: they go with it, not to /tmp)
        os.mkdir(temporary)
        for directory in (home, temporary):
            os.chown(directory, NOBODY, NOBODY)
        env = {**os.environ, "HOME": home, "TMPDIR": temporary, "PYTHONDONTWRITEBYTECODE": "1"}
        unshare = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *command]
        sys.exit(subprocess.run(unshare, env=env).returncode)


if __name__ == "__main__":
    main(sys.argv[1:])
