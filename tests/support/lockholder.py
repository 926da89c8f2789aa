"""Another process that holds a home's lock, as a `corpus sync` in flight would."""

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
with home_lock(Path(sys.argv[1]), sys.argv[3]):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def hold(home: Path, seconds: float, purpose: str = "sync") -> subprocess.Popen[str]:
    """Start a process that holds ``home``'s lock for ``seconds``; returns once it holds it."""
    proc = subprocess.Popen(  # noqa: S603 - fixed arguments
        [sys.executable, "-c", HOLD, str(home), str(seconds), purpose],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc
