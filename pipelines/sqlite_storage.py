"""The embedded instance's SQLite storage, with its connections kept open between operations.

Dagster's SQLite storages make a new engine and open a new connection for every read and
every event they write, then close it. A sync of a six-document home writes about 230
events, and this opening and closing (each new engine also compiles its statements again)
was about 40% of a sync that changes nothing: at 20 deals such a sync took 2.5 s and takes
1.4 s with the connections kept (``bench/dagster_storage.py``; ``bench/README.md``,
"Dagster's SQLite storage").

:class:`PooledSqliteStorage` uses the same files, tables and writes as Dagster's default
``DagsterSqliteStorage``. The only difference is that each process keeps one engine per
database file, and the engine's pool keeps a connection open between operations. SQLite
still coordinates the processes that share the files (the webserver, the daemon, run
workers, ``corpus sync``): an idle connection holds no lock. The event log has one file per
run, so a process keeps the engines of the :data:`RUN_SHARDS_KEPT` run files it used last
and closes the others. A forked child never uses its parent's connections: it opens its own.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from dagster._core.storage.base_storage import DagsterStorage
from dagster._core.storage.event_log.sqlite.sqlite_event_log import (
    SQLITE_BUSY_TIMEOUT_SECONDS,
    SqliteEventLogStorage,
)
from dagster._core.storage.runs.sqlite.sqlite_run_storage import SqliteRunStorage
from dagster._core.storage.schedules.sqlite.sqlite_schedule_storage import SqliteScheduleStorage
from dagster._core.storage.sqlite_storage import (
    DagsterSqliteStorage,
    _event_logs_directory,
    _runs_directory,
    _schedule_directory,
)
from dagster._serdes import ConfigurableClassData
from sqlalchemy import create_engine
from sqlalchemy.engine import Connection, Engine

# the run files whose engines a process keeps besides the index file: a run's steps write to
# their own run's file, and the webserver reads a few runs at a time
RUN_SHARDS_KEPT = 8
# connections a file's pool keeps open; more are opened while threads need them, and closed
POOL_SIZE = 1
POOL_OVERFLOW = 4


class Engines:
    """This process's engines, one per connection string, the ``limit`` used last kept open
    (an older one is disposed: its connections closed). Thread-safe."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._inherited: list[Engine] = []  # a parent's: kept from garbage collection, unused

    def get(self, conn_string: str, connect_args: Mapping[str, Any] | None = None) -> Engine:
        """The engine of ``conn_string``, made on first use in this process."""
        with self._lock:
            self._own()
            engine = self._engines.pop(conn_string, None)
            if engine is None:
                engine = create_engine(
                    conn_string,
                    pool_size=POOL_SIZE,
                    max_overflow=POOL_OVERFLOW,
                    connect_args=dict(connect_args or {}),
                )
            self._engines[conn_string] = engine
            while len(self._engines) > self._limit:
                _, oldest = self._engines.popitem(last=False)
                oldest.dispose()
            return engine

    def dispose(self) -> None:
        """Close every engine's connections (they are made again on next use)."""
        with self._lock:
            self._own()
            engines = list(self._engines.values())
            self._engines.clear()
        for engine in engines:
            engine.dispose()

    def _own(self) -> None:
        """In a forked child, set the parent's engines aside (held, never used or closed
        here: their connections are the parent's). Called under the lock."""
        if os.getpid() != self._pid:
            self._inherited.extend(self._engines.values())
            self._engines, self._pid = OrderedDict(), os.getpid()


class PooledSqliteEventLogStorage(SqliteEventLogStorage):
    """Dagster's SQLite event log, its files' connections kept open (see the module)."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None) -> None:
        self._engines = Engines(RUN_SHARDS_KEPT + 1)  # and the index file
        super().__init__(base_dir, inst_data)

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        with self._db_lock:
            engine = self._engines.get(
                self.conn_string_for_shard(shard), {"timeout": SQLITE_BUSY_TIMEOUT_SECONDS}
            )
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def wipe(self) -> None:
        self._engines.dispose()  # the run files go: nothing kept open of them
        super().wipe()

    def dispose(self) -> None:
        super().dispose()
        self._engines.dispose()


class PooledSqliteRunStorage(SqliteRunStorage):
    """Dagster's SQLite run storage, its file's connection kept open (see the module)."""

    def __init__(self, conn_string: str, inst_data: ConfigurableClassData | None = None) -> None:
        self._engines = Engines(1)
        super().__init__(conn_string, inst_data)

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        with self._engines.get(self._conn_string).connect() as conn, conn.begin():
            yield conn

    def dispose(self) -> None:
        super().dispose()
        self._engines.dispose()


class PooledSqliteStorage(DagsterSqliteStorage):
    """The embedded instance's storage: Dagster's SQLite layout under ``base_dir``, its runs
    and event logs through the pooled storages above (schedules as Dagster keeps them)."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None) -> None:
        self.base_dir = base_dir
        self._run_storage = PooledSqliteRunStorage.from_local(_runs_directory(base_dir))
        self._event_log_storage = PooledSqliteEventLogStorage(_event_logs_directory(base_dir))
        self._schedule_storage = SqliteScheduleStorage.from_local(_schedule_directory(base_dir))
        self._inst_data = inst_data
        DagsterStorage.__init__(self)  # not DagsterSqliteStorage's: it would open its own

    @classmethod
    def from_config_value(  # type: ignore[override]
        cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]
    ) -> PooledSqliteStorage:
        return cls.from_local(inst_data=inst_data, **config_value)
