"""A loopback HTTP proxy in front of an S3 server that can answer chosen requests with an S3
error (503 SlowDown, 403 InvalidAccessKeyId...), for the tests of a store that throttles, fails
or refuses requests. Every other request passes through to the server.

    with faulty_proxy(s3.endpoint) as proxy:
        proxy.fail("PUT", "/warehouse/", status=503, code="SlowDown")
        ...
        proxy.heal()
"""

from __future__ import annotations

import http.client
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


@dataclass
class Proxy:
    """The proxy's endpoint, its rules (method or ``*``, a pattern searched in the request's
    path, the status and S3 error code answered) and the requests it failed."""

    endpoint: str
    rules: list[tuple[str, re.Pattern[str], int, str]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail(self, method: str, pattern: str, *, status: int = 503, code: str = "SlowDown") -> None:
        with self.lock:
            self.rules.append((method, re.compile(pattern), status, code))

    def heal(self) -> None:
        with self.lock:
            self.rules.clear()

    def heal_once_given_up(self, *, quiet_s: float = 3.0, limit_s: float = 300.0) -> None:
        """Heal, on a thread of its own, once the client gave up: requests failed, then none
        for ``quiet_s`` (a client's own retries follow each other faster)."""

        def watch() -> None:
            deadline = time.monotonic() + limit_s
            seen, since = 0, time.monotonic()
            while time.monotonic() < deadline:
                time.sleep(0.1)
                with self.lock:
                    count = len(self.failed)
                if count != seen:
                    seen, since = count, time.monotonic()
                elif seen and time.monotonic() - since >= quiet_s:
                    break
            self.heal()

        threading.Thread(target=watch, daemon=True).start()

    def match(self, method: str, path: str) -> tuple[int, str] | None:
        with self.lock:
            for m, pat, status, code in self.rules:
                if (m == "*" or m == method) and pat.search(path):
                    self.failed.append(f"{method} {path}")
                    return status, code
        return None


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        out = b""
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return out
            out += handler.rfile.read(size)
            handler.rfile.readline()
    n = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(n) if n else b""


@contextmanager
def faulty_proxy(upstream: str) -> Iterator[Proxy]:
    up = urlsplit(upstream)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proxy = Proxy(f"http://127.0.0.1:{port}")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _any(self) -> None:
            body = _read_body(self)
            hit = proxy.match(self.command, self.path)
            if hit:
                status, code = hit
                payload = (
                    f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                    f"<Message>injected {code}</Message><RequestId>x</RequestId></Error>"
                ).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            con = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
            headers = {
                k: v
                for k, v in self.headers.items()
                if k.lower() not in ("transfer-encoding", "connection")
            }
            headers["Content-Length"] = str(len(body))
            con.request(self.command, self.path, body=body, headers=headers)
            resp = con.getresponse()
            data = resp.read()
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(k, v)
            length = resp.getheader("Content-Length") if self.command == "HEAD" else None
            self.send_header("Content-Length", length or str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            con.close()

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: object, client_address: object) -> None:
            pass  # a client that hangs up on an error answer (its retries) is no news

    server = Server(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()
