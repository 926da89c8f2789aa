"""The one function that reads and sets the process environment.

Entry points call ``configure_environment`` first (the ``corpus`` CLI, ``definitions.py``, the
benchmark scripts); no other module of corpus-index reads or sets ``os.environ`` at import
time. Library users who build a ``Home`` themselves call it too, or set what they need.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from dataclasses import dataclass

from corpus_index import memory
from corpus_index.config import Settings, settings_from_env
from corpus_index.dagster_home import POSTGRES_URL_ENV
from corpus_index.errors import ConfigError
from corpus_index.registry_sql import redact

EXECUTORS = ("in_process", "multiprocess")
# SQLAlchemy 2.1 reads a plain postgresql:// URL as psycopg 3; dagster-postgres brings psycopg2
POSTGRES_SCHEME = "postgresql+psycopg2://"

# defaults for the libraries corpus-index drives; a value the operator set wins
PROCESS_DEFAULTS: dict[str, str] = {
    "LANCE_LOG": "error",  # Lance's Rust logger: warnings only when something fails
    # LanceDB's own (it logs Lance's index builds too: "training 49 of the 113 requested IVF
    # partitions" on every small table's vector index, which LANCE_LOG leaves on)
    "LANCEDB_LOG": "error",
    "HF_HUB_OFFLINE": "1",  # the local model's weights ship in a package; never the network
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",  # no fork warnings from tokenizers' thread pool
    "GX_ANALYTICS_ENABLED": "false",  # Great Expectations sends no usage statistics
    # LanceDB's FTS builder buffers this many MiB per worker (read at the first index build)
    "LANCE_FTS_PARTITION_SIZE": memory.FTS_PARTITION_MIB,
}


@dataclass(frozen=True, slots=True)
class Environment:
    """What the environment asks for: the home and configuration, the pipeline runner, and
    how Dagster runs (its instance's storage, the executor of the runs)."""

    settings: Settings
    runner: str | None = None  # CORPUS_RUNNER: ``module:attribute`` of a PipelineRunner
    # CORPUS_DAGSTER_POSTGRES_URL is set: the Dagster instance written is the PostgreSQL one
    dagster_postgres: bool = False
    # that URL without its password, for messages (empty when it is not set)
    dagster_postgres_location: str = ""
    # CORPUS_EXECUTOR: ``in_process`` (every step of a run in one process, runs one at a time
    # per home) or ``multiprocess`` (a process per step; runs share the home, see homelock)
    executor: str = "in_process"


def configure_environment(
    environ: MutableMapping[str, str] | None = None,
    *,
    config_path: str | None = None,
    home: str | None = None,
    registry: str | None = None,
) -> Environment:
    """Set the process defaults corpus-index relies on, configure the allocators once, and read
    ``CORPUS_CONFIG``, ``CORPUS_HOME``, ``CORPUS_REGISTRY``, ``CORPUS_RUNNER``,
    ``CORPUS_DAGSTER_POSTGRES_URL`` (whether it is set, and its value without the password) and
    ``CORPUS_EXECUTOR``.

    Args:
        environ: the environment to read and complete (default: the process's).
        config_path: a configuration file that wins over ``CORPUS_CONFIG``.
        home: a home folder that wins over ``CORPUS_HOME``.
        registry: a registry database URL that wins over ``CORPUS_REGISTRY``.

    Raises:
        ConfigError: ``CORPUS_EXECUTOR`` names no executor, or ``CORPUS_DAGSTER_POSTGRES_URL``
            is not a ``postgresql+psycopg2://`` URL.
    """
    env = os.environ if environ is None else environ
    for name, value in PROCESS_DEFAULTS.items():
        env.setdefault(name, value)
    if env is os.environ:
        memory.configure()  # glibc/Arrow allocator settings, which the environment may override
    view = dict(env)
    if config_path:
        view["CORPUS_CONFIG"] = config_path
    if home:
        view["CORPUS_HOME"] = home
    if registry:
        view["CORPUS_REGISTRY"] = registry
    executor = env.get("CORPUS_EXECUTOR") or "in_process"
    if executor not in EXECUTORS:
        raise ConfigError(
            f"CORPUS_EXECUTOR={executor!r} is not an executor: use one of {', '.join(EXECUTORS)}"
        )
    postgres_url = env.get(POSTGRES_URL_ENV) or ""
    if postgres_url and not postgres_url.startswith(POSTGRES_SCHEME):
        scheme = postgres_url.split("://", 1)[0] if "://" in postgres_url else "no scheme"
        raise ConfigError(
            f"{POSTGRES_URL_ENV} must start with {POSTGRES_SCHEME} (found {scheme}): the "
            "driver installed with dagster-postgres is psycopg2, and SQLAlchemy reads a plain "
            "postgresql:// URL as psycopg 3"
        )
    return Environment(
        settings=settings_from_env(view),
        runner=env.get("CORPUS_RUNNER") or None,
        dagster_postgres=bool(postgres_url),
        dagster_postgres_location=redact(postgres_url) if postgres_url else "",
        executor=executor,
    )
