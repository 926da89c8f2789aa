"""Another process that holds a home's lock, as a `corpus sync` in flight would, or a scope
lock, as another machine's step would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOLD = """
import sys, time
from pathlib import Path
from corpus_index.homelock import home_lock
shared, across = sys.argv[4] == "shared", sys.argv[5] or None
with home_lock(Path(sys.argv[1]), sys.argv[3], shared=shared, across=across):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""
HOLD_SCOPE = """
import sys, time
from pathlib import Path
from corpus_index.homelock import scope_lock
with scope_lock(Path(sys.argv[1]), sys.argv[3], sys.argv[4], across=sys.argv[5] or None):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def hold(
    home: Path,
    seconds: float,
    purpose: str = "sync",
    *,
    shared: bool = False,
    across: str | None = None,
) -> subprocess.Popen[str]:
    """Start a process that holds ``home``'s lock for ``seconds`` (``shared``: as a step of a
    run sharing the home does; ``across``: in the registry database at that URL too); returns
    once it holds it."""
    mode = "shared" if shared else "exclusive"
    return _holding(HOLD, str(home), str(seconds), purpose, mode, across or "")


def hold_scope(
    home: Path, seconds: float, scope: str, purpose: str, across: str | None = None
) -> subprocess.Popen[str]:
    """Start a process that holds the scope lock ``scope`` of ``home`` (and its advisory lock
    in the database ``across``) for ``seconds``; returns once it holds it."""
    return _holding(HOLD_SCOPE, str(home), str(seconds), scope, purpose, across or "")


def _holding(script: str, *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(  # noqa: S603 - fixed arguments
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc
