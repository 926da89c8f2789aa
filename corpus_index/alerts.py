"""Alerts for the operator: every failed pipeline run of a home, until someone acknowledges it.

A run can fail where nobody looks: a blocking check inside a run the daemon's automation
started, a backfill whose failed run is hidden from the default runs list. Each failed run is
recorded once in ``<home>/alerts.jsonl`` (by ``run_failure_alert_sensor`` in the daemon, and
by `corpus sync` for its own runs); ``corpus alerts`` lists the unacknowledged ones and
``corpus alerts --ack`` acknowledges them. The file is append-only JSON lines: an ``alert``
line per failed run, an ``ack`` line per acknowledgement, each one ``write`` of one line.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ALERTS_NAME = "alerts.jsonl"


@dataclass(frozen=True, slots=True)
class Alert:
    """One failed run: what failed, where, and when."""

    run_id: str
    job: str
    failed_at: str  # ISO 8601, UTC
    partition: str = ""
    failed_steps: tuple[str, ...] = ()
    failed_checks: tuple[str, ...] = ()  # ``asset:check`` (``[partition]`` when partitioned)
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "failed_steps": list(self.failed_steps),
            "failed_checks": list(self.failed_checks),
        }

    def summary(self) -> str:
        """One line: the time, job, partition and what failed."""
        where = f" [{self.partition}]" if self.partition else ""
        what = ", ".join(self.failed_checks) or ", ".join(self.failed_steps) or "the run"
        error = f": {self.error}" if self.error else ""
        return f"{self.failed_at}  {self.job}{where}  run {self.run_id[:8]}  failed: {what}{error}"


def alerts_path(home: Path) -> Path:
    """The alerts file of the home ``home``."""
    return home / ALERTS_NAME


def _lines(home: Path) -> list[dict[str, Any]]:
    """The file's records: each line that is an object with a string ``run_id``. A line torn
    by a crash mid-write, or damaged (bytes that are not UTF-8, a value that is no record),
    is skipped, so it neither hides the alerts beside it nor stops the next being recorded."""
    try:
        text = alerts_path(home).read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("run_id"), str):
            out.append(record)
    return out


def _strings(value: Any) -> tuple[str, ...]:
    """The strings of a record's list field (none where it holds no list)."""
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def _append(home: Path, record: dict[str, Any]) -> None:
    home.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(alerts_path(home), os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line  # after a line torn by a crash: start a line of our own
        os.write(fd, line)
    finally:
        os.close(fd)


def record_alert(home: Path, alert: Alert) -> bool:
    """Record ``alert`` unless its run has one already; returns whether it was new."""
    if any(r.get("type") == "alert" and r.get("run_id") == alert.run_id for r in _lines(home)):
        return False
    _append(home, {"type": "alert", **alert.to_json()})
    return True


def alerts(home: Path, *, unacknowledged: bool = True) -> list[Alert]:
    """The home's alerts, oldest first; only those not acknowledged unless told otherwise."""
    lines = _lines(home)
    acked = {r.get("run_id") for r in lines if r.get("type") == "ack"}
    out = []
    for r in lines:
        if r.get("type") != "alert" or (unacknowledged and r.get("run_id") in acked):
            continue
        out.append(
            Alert(
                run_id=r["run_id"],
                job=str(r.get("job", "")),
                failed_at=str(r.get("failed_at", "")),
                partition=str(r.get("partition", "")),
                failed_steps=_strings(r.get("failed_steps")),
                failed_checks=_strings(r.get("failed_checks")),
                error=str(r.get("error", "")),
            )
        )
    return out


def acknowledge(home: Path, run_ids: list[str] | None = None) -> list[Alert]:
    """Acknowledge the unacknowledged alerts of ``run_ids`` (all of them by default); returns
    the alerts acknowledged. A run id may be given by a prefix, as ``corpus alerts`` prints it."""
    now = datetime.now(UTC).isoformat(timespec="seconds")
    done = []
    for alert in alerts(home):
        if run_ids is None or any(alert.run_id.startswith(p) for p in run_ids):
            _append(home, {"type": "ack", "run_id": alert.run_id, "acknowledged_at": now})
            done.append(alert)
    return done
