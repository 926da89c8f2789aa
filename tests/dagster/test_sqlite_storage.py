"""The engines the pooled SQLite storage keeps (pipelines.sqlite_storage): one per database
file, reused, the oldest closed past the limit, and never a parent's in a forked child. The
storage itself, on a real instance: tests/test_dagster_home.py."""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy.engine import Engine

from pipelines.sqlite_storage import Engines


def _use(engine: Engine) -> None:
    with engine.connect() as conn:
        conn.exec_driver_sql("select 1")


def test_a_process_reuses_the_engines_it_used_last_and_closes_the_others(tmp_path: Path) -> None:
    engines = Engines(2)
    a, b, c = (f"sqlite:///{tmp_path / name}.db" for name in "abc")
    first, second = engines.get(a), engines.get(b)
    _use(first)
    _use(second)
    assert engines.get(a) is first and first.pool.checkedin() == 1  # kept open between uses
    engines.get(c)  # three files: the one used longest ago (b) is closed
    assert second.pool.checkedin() == 0
    assert engines.get(a) is first and engines.get(b) is not second
    engines.dispose()
    assert first.pool.checkedin() == 0 and engines.get(a) is not first


def test_a_forked_child_opens_its_own_connections(tmp_path: Path) -> None:
    engines = Engines(2)
    url = f"sqlite:///{tmp_path / 'a'}.db"
    parent = engines.get(url)
    _use(parent)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a new engine, its own from then on
        mine = engines.get(url)
        _use(mine)
        os.write(write, b"1" if mine is not parent and engines.get(url) is mine else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    assert engines.get(url) is parent and parent.pool.checkedin() == 1
