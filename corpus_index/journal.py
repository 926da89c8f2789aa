"""An append-only JSON-lines journal of what the registry must never forget: which generation
serves each namespace (every pointer move, with the generation's record) and every tombstone.

Each line is written and flushed to disk right after the registry transaction it mirrors
commits, so a lost or corrupt ``registry.duckdb`` can be rebuilt with its pointers and its
deletions (``corpus doctor --repair``). Replaying the lines in order gives the last state.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class Journal:
    """``registry.journal.jsonl`` beside the registry."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def append(self, op: str, **fields: Any) -> None:
        """Append one entry and flush it to disk."""
        self.extend([{"op": op, **fields}])

    def extend(self, entries: list[dict[str, Any]]) -> None:
        """Append entries (each with its ``op``) in one write, flushed to disk once; after a
        torn last line they start a new line."""
        if not entries:
            return
        text = "".join(json.dumps(e, sort_keys=True, default=str) + "\n" for e in entries)
        data = text.encode("utf-8")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a+b") as f:
            end = f.seek(0, os.SEEK_END)
            if end:
                f.seek(end - 1)
                if f.read(1) != b"\n":
                    # after a line torn by a crash: start a line of our own, or these entries
                    # would be read as part of it and skipped with it
                    data = b"\n" + data
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def entries(self) -> Iterator[dict[str, Any]]:
        """Every complete entry, oldest first (a line torn by a crash, or damaged, is skipped:
        :meth:`skipped` names it)."""
        for _, entry in self._read():
            if isinstance(entry, dict):
                yield entry

    def skipped(self) -> list[str]:
        """The lines :meth:`entries` skips, each as ``line N: why``."""
        return [f"line {n}: {why}" for n, why in self._read() if isinstance(why, str)]

    def _read(self) -> Iterator[tuple[int, dict[str, Any] | str]]:
        """Each line's number and its entry, or why it is none."""
        if not self.path.is_file():
            return
        with self.path.open("rb") as f:
            for n, raw in enumerate(f, start=1):
                try:
                    entry = json.loads(raw.decode("utf-8"))
                except UnicodeDecodeError:
                    yield n, "bytes that are not UTF-8"
                    continue
                except json.JSONDecodeError:
                    yield n, "torn or not JSON"
                    continue
                if isinstance(entry, dict) and "op" in entry:
                    yield n, entry
                else:
                    yield n, "no journal entry"
