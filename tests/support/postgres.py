"""A real PostgreSQL server on a loopback port, for the tests and benchmarks that need one.

PostgreSQL refuses to run as root, so when this process is root the server runs as an
unprivileged user (``postgres`` where it exists, else ``nobody``) through ``runuser``; otherwise
it runs as the current user. The data folder is a fresh temporary directory owned by that user,
the server listens on 127.0.0.1 only (no Unix socket), trusts local connections, and is stopped
by its PID (SIGINT: a "fast" shutdown that does not wait for clients, then SIGKILL), then the folder is
removed. ``PG_BIN`` names the folder of ``initdb`` and ``postgres`` when they are not found on
the usual Debian path or ``PATH``.

    with running_postgres() as pg:
        url = pg.url("registry")          # postgresql://corpus@127.0.0.1:PORT/registry
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

START_TIMEOUT_S = 60.0
SUPERUSER = "corpus"


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL binaries here (the caller decides whether that skips or fails)."""


@dataclass(frozen=True, slots=True)
class LocalPostgres:
    host: str
    port: int
    user: str
    pid: int
    data_dir: Path

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create database ``name`` (if missing) and return its URL."""
        import psycopg2

        con = psycopg2.connect(self.url("postgres"))
        try:
            con.autocommit = True
            with con.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cur.fetchone() is None:
                    cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            con.close()
        return self.url(name)


def pg_bin() -> Path:
    """The folder holding ``initdb`` and ``postgres``."""
    explicit = os.environ.get("PG_BIN")
    candidates = [explicit] if explicit else []
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(str(Path(on_path).parent))
    for folder in candidates:
        if folder and (Path(folder) / "initdb").is_file() and (Path(folder) / "postgres").is_file():
            return Path(folder)
    raise PostgresUnavailable(
        "PostgreSQL binaries (initdb, postgres) not found: install PostgreSQL or set PG_BIN"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_as() -> str | None:
    """The user the server runs as when this process is root (None: run as ourselves)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise PostgresUnavailable("running as root and no unprivileged user to run PostgreSQL as")


def _command(user: str | None, argv: list[str]) -> list[str]:
    return ["runuser", "-u", user, "--", *argv] if user else argv


@contextmanager
def running_postgres(*, log: Path | None = None) -> Iterator[LocalPostgres]:
    """Start a throwaway PostgreSQL server; yield it once it accepts connections; stop it."""
    binaries = pg_bin()
    user = _run_as()
    base = Path(tempfile.mkdtemp(prefix="corpus-pg-"))
    data = base / "data"
    log = log or base / "postgres.log"
    if user:
        info = pwd.getpwnam(user)
        os.chown(base, info.pw_uid, info.pw_gid)
    proc: subprocess.Popen[bytes] | None = None
    try:
        subprocess.run(
            _command(
                user,
                [
                    str(binaries / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    SUPERUSER,
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--no-sync",
                ],
            ),
            check=True,
            capture_output=True,
            cwd=base,
        )
        port = _free_port()
        argv = [
            str(binaries / "postgres"),
            "-D",
            str(data),
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-k",
            "",  # no Unix socket: loopback TCP only
            "-c",
            "fsync=off",  # a test server: durability is not what is tested
            "-c",
            "max_connections=200",
        ]
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                _command(user, argv),
                cwd=base,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        server = LocalPostgres("127.0.0.1", port, SUPERUSER, proc.pid, data)
        _wait_until_ready(server, proc, log)
        yield server
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(base, ignore_errors=True)


def _wait_until_ready(server: LocalPostgres, proc: subprocess.Popen[bytes], log: Path) -> None:
    import psycopg2

    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"PostgreSQL exited with {proc.returncode}; see {log}")
        try:
            psycopg2.connect(server.url(), connect_timeout=2).close()
            return
        except psycopg2.OperationalError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not accept connections; see {log}") from None
            time.sleep(0.2)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT (fast shutdown) to the server's process group (runuser and postgres), then SIGKILL."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    # runuser may exit before its child: wait until nothing of the group is left
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
