"""Run ``dagster dev`` (webserver + daemon) over a corpus home, as a child process group that
can be stopped reliably.

``dagster dev`` started in the background from a shell inherits an ignored SIGINT and then
ignores SIGTERM too; started here, in its own session with default signal handling, it stops on
SIGTERM, and the whole group is killed if it does not.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from corpus_index.config import Settings
from corpus_index.dagster_home import prepare

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class DevServer:
    url: str
    pid: int
    log: Path


def _restore_default_signals() -> None:  # runs in the child before exec
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextmanager
def dagster_dev(
    settings: Settings,
    *,
    sensor_interval_s: int = 10,
    log: Path | None = None,
    startup_timeout_s: float = 180.0,
    extra_env: dict[str, str] | None = None,
    postgres: bool = False,
) -> Iterator[DevServer]:
    """Start ``dagster dev`` for ``settings`` and yield once the webserver answers
    (``postgres``: on the production instance, ``CORPUS_DAGSTER_POSTGRES_URL`` in ``extra_env``
    or the environment)."""
    dagster_home = prepare(settings.dagster_home, postgres=postgres)
    port = free_port()
    log = log or settings.home / "dagster-dev.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "DAGSTER_HOME": str(dagster_home),
        "CORPUS_CONFIG": str(settings.config_path),
        "CORPUS_HOME": str(settings.home),
        **({"CORPUS_REGISTRY": settings.registry_url} if settings.registry_url else {}),
        "CORPUS_SENSOR_INTERVAL_S": str(sensor_interval_s),
        "LANCE_LOG": "error",
        "HF_HUB_OFFLINE": "1",
        **(extra_env or {}),
    }
    with open(log, "wb") as out:
        proc = subprocess.Popen(  # noqa: S603 - fixed arguments
            [
                sys.executable,
                "-m",
                "dagster",
                "dev",
                "-w",
                str(ROOT / "workspace.yaml"),
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_restore_default_signals,  # noqa: PLW1509 - only resets signal handlers
        )
    server = DevServer(url=f"http://127.0.0.1:{port}", pid=proc.pid, log=log)
    try:
        deadline = time.monotonic() + startup_timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"dagster dev exited with {proc.returncode}; see {log}")
            try:
                with urllib.request.urlopen(f"{server.url}/server_info", timeout=2):  # noqa: S310
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"dagster dev did not answer in time; see {log}") from None
                time.sleep(1.0)
        yield server
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
