"""The content digest of a model's weights file, remembered while the file stays as it was.

Hashing ~90 MB of weights takes a tenth of a second or more, at every start of a process that
builds an embedder (every CLI search). The sha256 is kept in a small JSON file (the home's
``model-digests.json``), by the weights file's path, with its size, mtime, ctime, inode and
device: it is read again only when one of those changed (a file changed within the last
second is not remembered yet). A memo that cannot be read is
ignored, one that cannot be written is not written: the digest is then computed each time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from corpus_index.storage import Location

MEMO_NAME = "model-digests.json"
# a file changed less than this long ago is not remembered: file times tick coarsely (a few
# milliseconds), so a second write of the same size within the tick would leave the stamp as
# it was (git's "racy" entries)
RECENT_NS = 1_000_000_000


def _stamp(stat: os.stat_result) -> dict[str, int]:
    # what changes when the file's bytes may have: a write moves mtime and ctime (ctime
    # cannot be set back by hand), a replacement the inode
    return {
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "ctime_ns": stat.st_ctime_ns,
        "inode": stat.st_ino,
        "device": stat.st_dev,
    }


def _read_memo(memo: Path) -> dict[str, Any]:
    try:
        data = json.loads(memo.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    return files if isinstance(files, dict) else {}


def _sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def weights_sha256(path: Path, *, memo: Path | None = None) -> str:
    """The sha256 of the file at ``path``, taken from ``memo`` while the file is unchanged.

    Args:
        path: the weights file.
        memo: the JSON file remembering digests; None computes every time. It is written
            (atomically) only where its folder exists.

    Returns:
        The hex digest of the file's bytes.

    Raises:
        OSError: the weights file cannot be read.
    """
    key = str(path.resolve())
    before = _stamp(path.stat())
    files = _read_memo(memo) if memo is not None else {}
    entry = files.get(key)
    if (
        isinstance(entry, dict)
        and isinstance(entry.get("sha256"), str)
        and {k: entry.get(k) for k in before} == before
    ):
        return str(entry["sha256"])
    started = time.time_ns()
    digest = _sha256(path)
    if (
        memo is None
        or _stamp(path.stat()) != before  # changed while it was read
        or started - max(before["mtime_ns"], before["ctime_ns"]) < RECENT_NS
        or not memo.parent.is_dir()
    ):
        return digest
    files[key] = {**before, "sha256": digest}
    text = json.dumps({"files": files}, sort_keys=True, indent=1)
    with contextlib.suppress(OSError):  # a read-only home: computed again next time
        Location.local(memo).write_text(text)
    return digest
