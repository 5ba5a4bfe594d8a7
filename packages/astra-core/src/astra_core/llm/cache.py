"""On-disk response cache keyed by the full request (sqlite, safe across processes).

On a local disk it uses sqlite's write-ahead log (fast; readers never wait). On a network file system (a
cluster's home or project directory, shared by the shards of a job array on several machines) it uses a
rollback journal instead: the write-ahead log keeps its index in memory shared on one machine, and sqlite
says plainly that it does not work over a network file system (corruption, not an error).
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import threading
from pathlib import Path

import orjson

NETWORK_FILE_SYSTEMS = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph", "glusterfs",
                        "fuse.glusterfs", "fuse.sshfs", "9p", "afs"}


_OCTAL = re.compile(r"\\([0-7]{3})")  # mountinfo's escapes of spaces, tabs, newlines and backslashes


def file_system_type(path: str | Path, mountinfo: str | None = None) -> str | None:
    """The type of the file system holding `path` (Linux's /proc/self/mountinfo), or None where that is unknown."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return None
    resolved = os.path.realpath(path)
    longest, found = -1, None
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields[6:]:
            continue
        mount_point = _OCTAL.sub(lambda escape: chr(int(escape.group(1), 8)), fields[4])  # a space is \040
        inside = resolved == mount_point or resolved.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) > longest:
            longest, found = len(mount_point), fields[fields.index("-", 6) + 1]
    return found


class ResponseCache:
    def __init__(self, directory: str | Path):
        path = Path(directory).expanduser()
        path.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(path / "llm-cache.sqlite", check_same_thread=False, timeout=30)
        shared = file_system_type(path) in NETWORK_FILE_SYSTEMS
        self._conn.execute(f"PRAGMA journal_mode={'DELETE' if shared else 'WAL'}")
        self._conn.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, body BLOB)")
        self._lock = threading.Lock()

    @staticmethod
    def key(url: str, body: dict) -> str:
        blob = orjson.dumps([url, body], option=orjson.OPT_SORT_KEYS)
        return hashlib.sha256(blob).hexdigest()

    def get(self, key: str) -> dict | None:
        with self._lock:
            row = self._conn.execute("SELECT body FROM responses WHERE key = ?", (key,)).fetchone()
        return orjson.loads(row[0]) if row else None

    def put(self, key: str, body: dict) -> None:
        with self._lock, self._conn:
            self._conn.execute("INSERT OR REPLACE INTO responses VALUES (?, ?)", (key, orjson.dumps(body)))

    def close(self) -> None:
        self._conn.close()
