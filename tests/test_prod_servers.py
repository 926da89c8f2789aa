"""The servers the production tests start: a real PostgreSQL and an S3-compatible server, both on
loopback, both stopped by PID when the session ends."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.prod


def test_postgres_runs_unprivileged_on_loopback(postgres_server) -> None:
    import psycopg2

    url = postgres_server.create_database("smoke")
    con = psycopg2.connect(url)
    try:
        with con, con.cursor() as cur:
            cur.execute("CREATE TABLE t (k TEXT PRIMARY KEY)")
            cur.execute("INSERT INTO t VALUES (%s)", ("a",))
            cur.execute(
                "SELECT (SELECT k FROM t), inet_server_addr()::text,"
                " current_setting('data_directory')"
            )
            key, addr, data = cur.fetchone()
    finally:
        con.close()
    assert key == "a"
    assert addr.startswith("127.0.0.1")
    assert data == str(postgres_server.data_dir)
    os.kill(postgres_server.pid, 0)  # the PID the fixture will stop is alive
    owner = os.stat(postgres_server.data_dir).st_uid
    assert owner != 0  # the server runs as an unprivileged user, never root


def test_s3_server_round_trips_an_object(s3_server) -> None:
    from pyarrow import fs

    s3_server.create_bucket("smoke")
    env = s3_server.env()
    store = fs.S3FileSystem(
        endpoint_override=s3_server.endpoint,
        scheme="http",
        access_key=env["AWS_ACCESS_KEY_ID"],
        secret_key=env["AWS_SECRET_ACCESS_KEY"],
        region=env["AWS_REGION"],
    )
    with store.open_output_stream("smoke/a/b.bin") as out:
        out.write(b"\x00\x01corpus")
    with store.open_input_stream("smoke/a/b.bin") as src:
        assert src.read() == b"\x00\x01corpus"
    assert store.get_file_info("smoke/missing").type == fs.FileType.NotFound
