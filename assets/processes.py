"""Which process executes a run: the tag a run carries so that a run whose process is gone can
be told apart from one still executing (see :mod:`pipelines.orphans`).

A `corpus` command executes its runs in its own process and tags them as it starts them. A run
launched by the daemon or the UI is executed by a run worker the code server starts; it is
tagged by its first step (:class:`~assets.resources.CorpusResource` as it is set up), naming
the run worker: the step's own process with the in-process executor, and the process that
started the step's with the multiprocess executor (each step a process of its own). Before its
first step, a run worker is known by the pid Dagster records as it starts
(:func:`recorded`, read with the time of the record, see :mod:`pipelines.orphans`).
"""

from __future__ import annotations

import multiprocessing
import os
import socket
from dataclasses import dataclass
from pathlib import Path

PROCESS_TAG = "corpus/process"  # "<host> <pid> <start>" of the process executing the run
# how much later than a record of it a process may seem to have started and still be the one
# recorded: its start is known to the clock tick after boot, the boot time to the second, and
# the wall clock may have been stepped since
CLOCK_SLACK_S = 2.0
_REUSED = "reused"  # the start of a pid's process that started after the record naming the pid


@dataclass(frozen=True, slots=True)
class Process:
    """One process of one host: its pid and its start time (clock ticks after boot, as
    ``/proc/<pid>/stat`` gives it; empty where there is no ``/proc``)."""

    host: str
    pid: int
    start: str

    @property
    def tag(self) -> str:
        return f"{self.host} {self.pid} {self.start}".rstrip()

    @classmethod
    def of_tag(cls, tag: str) -> Process | None:
        """The process a :data:`PROCESS_TAG` value names; None when it is not one."""
        parts = tag.split(" ")
        if len(parts) not in (2, 3) or not parts[1].isdigit():
            return None
        return cls(parts[0], int(parts[1]), parts[2] if len(parts) == 3 else "")

    def alive(self) -> bool:
        """Whether this process (of this host) still runs: its pid exists and started when
        this one did."""
        if self.pid <= 0:
            return False
        start = _start_of(self.pid)
        if start is None:
            return _exists(self.pid)
        return bool(start) and start == self.start


def this_process() -> Process:
    """The process calling."""
    return _local(os.getpid())


def run_worker(*, step_processes: bool) -> Process:
    """The process executing the run this step belongs to: this one, or with
    ``step_processes`` (the multiprocess executor) the one that started this step's process
    (this one where no process started it, as in ``execute_in_process``)."""
    parent = multiprocessing.parent_process() if step_processes else None
    return _local(parent.pid if parent is not None and parent.pid is not None else os.getpid())


def recorded(pid: int, at: float) -> Process:
    """Process ``pid`` of this host as a record made at ``at`` (seconds since the epoch) names
    it: the process holding that pid now if it had started by then, otherwise one that no
    longer runs (the pid ended, or the system has given it to a later process)."""
    start = _start_of(pid)
    if start:
        started = _started_at(start)
        if started is not None and started > at + CLOCK_SLACK_S:
            start = _REUSED
    return Process(socket.gethostname(), pid, start or "")


def _local(pid: int) -> Process:
    """Process ``pid`` of this host."""
    return Process(socket.gethostname(), pid, _start_of(pid) or "")


def _start_of(pid: int) -> str | None:
    """The start time of ``pid`` (field 22 of ``/proc/<pid>/stat``); '' when the process does
    not exist, None when there is no ``/proc`` to ask."""
    if not Path("/proc/self/stat").exists():
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return ""
    # the command name (field 2) is in parentheses and may hold spaces: count after it
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else ""


def _started_at(start: str) -> float | None:
    """A start time as :func:`_start_of` gives it (clock ticks after boot) in seconds since
    the epoch; None when the boot time cannot be read."""
    try:
        stat = Path("/proc/stat").read_text(encoding="ascii", errors="replace")
        boot = next(int(line.split()[1]) for line in stat.splitlines() if line.startswith("btime "))
        return boot + int(start) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, StopIteration, IndexError):
        return None


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
