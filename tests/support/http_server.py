"""A real ``corpus serve`` on a loopback port, for the HTTP tests and the HTTP benchmark.

The server is a subprocess in its own session, started with the same CLI a user runs; it is
stopped by its PID (SIGTERM, then SIGKILL if it does not exit). ``serve_config`` adds a keys
file to a test configuration; ``keys`` are plain strings here (the file holds their hashes).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import yaml

from corpus_index.http.keys import key_hash

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120.0  # imports are slow on a loaded 2-core machine


# a key's principal and, where given, its scopes: ``(tenant, groups)`` grants search only,
# ``(tenant, groups, scopes)`` what ``scopes`` names (a tenant of None: a metrics key alone)
KeySpec = tuple[str, Sequence[str]] | tuple[str | None, Sequence[str], Sequence[str]]


def write_keys(path: Path, keys: Mapping[str, KeySpec]) -> None:
    """A keys file: ``{key: (tenant, groups[, scopes])}``, each recorded by its hash under its
    own name."""
    entries = []
    for i, (key, spec) in enumerate(keys.items()):
        entry: dict[str, object] = {"name": f"key-{i}", "sha256": key_hash(key)}
        if spec[0] is not None:
            entry |= {"tenant": spec[0], "groups": list(spec[1])}
        if len(spec) > 2:
            entry["scopes"] = list(spec[2])
        entries.append(entry)
    path.write_text(yaml.safe_dump({"keys": entries}, sort_keys=False), encoding="utf-8")


def serve_config(config: Path, keys: Mapping[str, KeySpec], **serve: object) -> Path:
    """``config`` with a ``serve`` section naming a keys file beside it (written from ``keys``)."""
    doc = yaml.safe_load(config.read_text(encoding="utf-8"))
    write_keys(config.parent / "keys.yaml", keys)
    doc["serve"] = {"api_keys_file": "keys.yaml", **serve}
    config.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return config


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_server(
    config: Path, home: Path, *, log: Path, args: Sequence[str] = ()
) -> Iterator[str]:
    """``corpus serve`` over ``config``/``home``; yields its base URL once it answers."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "corpus_index.cli", "--config", str(config), "--home", str(home)]
    cmd += ["serve", "--port", str(port), "--log-level", "warning", *args]
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(proc, url, log)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)


def _wait_until_up(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"corpus serve exited with {proc.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(f"{url}/v1/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise RuntimeError(
        f"corpus serve did not answer within {START_TIMEOUT_S:g} s:\n{log.read_text()}"
    )
