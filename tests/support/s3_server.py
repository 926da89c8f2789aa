"""A real S3-compatible server on a loopback port (``moto`` in server mode), for the tests and
benchmarks of a home on object storage.

The server is a subprocess in its own session, stopped by its PID. ``env()`` is the environment a
client needs: the endpoint, a region, and the (any) credentials moto accepts, spelled the way
pyarrow, LanceDB (``AWS_ENDPOINT``, ``AWS_ALLOW_HTTP``) and boto3 read them.

    with running_s3() as s3:
        s3.create_bucket("corpus")
        os.environ.update(s3.env())
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

START_TIMEOUT_S = 60.0
REGION = "us-east-1"
ACCESS_KEY = "corpus-test"
SECRET_KEY = "corpus-test-secret"


@dataclass(frozen=True, slots=True)
class LocalS3:
    endpoint: str
    pid: int

    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT": self.endpoint,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        }

    def client(self) -> Any:
        """A boto3 S3 client of this server."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name``; return ``s3://name``."""
        self.client().create_bucket(Bucket=name)
        return f"s3://{name}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_s3(*, log: Path | None = None) -> Iterator[LocalS3]:
    """Start moto's S3 server on loopback; yield it once it answers; stop it by PID."""
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"moto server exited with {proc.returncode} (log: {log})")
            try:
                urllib.request.urlopen(endpoint, timeout=2).close()
                break
            except urllib.error.HTTPError:
                break  # it answered
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("moto server did not answer on loopback") from None
                time.sleep(0.2)
        yield LocalS3(endpoint, proc.pid)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)
        if hasattr(out, "close"):
            out.close()
