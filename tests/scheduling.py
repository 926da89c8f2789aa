"""How the suite runs fast on two cores: test files longest first, temporary folders in memory.

Files, longest first
--------------------
``--dist loadfile`` hands whole files to the workers in the order they were collected (with
``--no-loadscope-reorder``; otherwise xdist orders them by their number of tests, which says
little about their time). Ordering the files by their measured seconds, longest first, keeps a
long file from starting last and running alone at the end (longest-processing-time-first
scheduling). A file missing from the table counts as a median one.

``pytest --record-file-seconds`` rewrites ``tests/file_seconds.json`` from the run's own
durations (setup, call and teardown of every test, summed per file); files that did not run
keep their entry, files that no longer exist lose it. Stale figures only cost balance, never
correctness.

Temporary folders in memory
---------------------------
Most of a test's time is the Dagster runs of its syncs, and much of theirs is SQLite committing
the event log (one fsync per event). Unless ``--basetemp`` is given, the run's temporary folders
(``tmp_path``: every test home) go to a fresh folder on a memory file system (``/dev/shm``) when
one is mounted with room to spare (``CORPUS_TEST_TMP`` names another parent, or ``disk`` keeps
pytest's default); it is removed at the end of the run. Nothing a test checks depends on the
disk: a killed process leaves the same files in memory as on disk.

One thread per worker
---------------------
With two workers on two cores, the model's and numpy's thread pools (one thread per core each
by default) would run four busy threads on two cores, and OpenMP's waiting threads spin. When
the run has more than one worker, each worker (and what it starts) gets one thread for
OpenMP, OpenBLAS and MKL, unless the environment already says otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest

TABLE = Path(__file__).with_name("file_seconds.json")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-file-seconds",
        action="store_true",
        help=f"write each test file's total seconds to {TABLE.name} at the end of the run",
    )


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def read_table(path: Path = TABLE) -> dict[str, float]:
    """The recorded seconds per test file (an unreadable table counts as empty)."""
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(table, dict):
        return {}
    return {str(k): float(v) for k, v in table.items() if isinstance(v, int | float)}


def longest_first(nodeids: list[str], seconds: dict[str, float]) -> list[int]:
    """The positions of ``nodeids`` reordered file by file, longest file first; the tests of
    one file keep their order, and files of equal weight keep the order they were collected in."""
    default = statistics.median(seconds.values()) if seconds else 0.0
    first: dict[str, int] = {}
    for i, nodeid in enumerate(nodeids):
        first.setdefault(_file(nodeid), i)

    def key(i: int) -> tuple[float, int, int]:
        name = _file(nodeids[i])
        return (-seconds.get(name, default), first[name], i)

    return sorted(range(len(nodeids)), key=key)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    order = longest_first([item.nodeid for item in items], read_table())
    items[:] = [items[i] for i in order]


class _Recorder:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[_file(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        root = session.config.rootpath
        table = {name: s for name, s in read_table().items() if (root / name).is_file()}
        table.update({name: round(s, 1) for name, s in self.seconds.items()})
        TABLE.write_text(json.dumps(dict(sorted(table.items())), indent=1) + "\n", encoding="utf-8")


THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
MEMORY_FS = Path("/dev/shm")
MEMORY_FS_ROOM = 4 << 30  # bytes free on it before the suite's temporary folders go there


def memory_parent() -> Path | None:
    """Where this run's temporary folders go, if not pytest's default (see the docstring)."""
    chosen = os.environ.get("CORPUS_TEST_TMP", "")
    if chosen == "disk":
        return None
    if chosen:
        return Path(chosen)
    try:
        free = shutil.disk_usage(MEMORY_FS).free
    except OSError:
        return None
    return MEMORY_FS if free >= MEMORY_FS_ROOM and os.access(MEMORY_FS, os.W_OK) else None


@pytest.hookimpl(tryfirst=True)  # before pytest's own tmp_path factory reads the option
def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: the controller chose for it
        return
    # the controller sees every worker's reports; a worker records nothing itself
    if config.getoption("--record-file-seconds"):
        config.pluginmanager.register(_Recorder(), "file-seconds-recorder")
    workers = getattr(config.option, "numprocesses", None)
    if workers == "auto" or (isinstance(workers, int) and workers > 1):
        for name in THREAD_VARS:  # read by the workers and their children when they start
            os.environ.setdefault(name, "1")
    parent = memory_parent()
    if config.option.basetemp is None and parent is not None:
        config.option.basetemp = tempfile.mkdtemp(prefix="corpus-index-tests-", dir=parent)
        config.stash[_OURS] = Path(config.option.basetemp)


_OURS = pytest.StashKey[Path]()


def pytest_unconfigure(config: pytest.Config) -> None:
    ours = config.stash.get(_OURS, None)
    if ours is not None:
        shutil.rmtree(ours, ignore_errors=True)
