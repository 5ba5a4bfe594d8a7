"""On-disk response cache keyed by the full request (sqlite, safe across processes)."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from pathlib import Path

import orjson


class ResponseCache:
    def __init__(self, directory: str | Path):
        path = Path(directory).expanduser()
        path.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(path / "llm-cache.sqlite", check_same_thread=False, timeout=30)
        self._conn.execute("PRAGMA journal_mode=WAL")
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
