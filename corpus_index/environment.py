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

# defaults for the libraries corpus-index drives; a value the operator set wins
PROCESS_DEFAULTS: dict[str, str] = {
    "LANCE_LOG": "error",  # LanceDB's Rust logger: warnings only when something fails
    "HF_HUB_OFFLINE": "1",  # the local model's weights ship in a package; never the network
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",  # no fork warnings from tokenizers' thread pool
    "GX_ANALYTICS_ENABLED": "false",  # Great Expectations sends no usage statistics
    # LanceDB's FTS builder buffers this many MiB per worker (read at the first index build)
    "LANCE_FTS_PARTITION_SIZE": memory.FTS_PARTITION_MIB,
}


@dataclass(frozen=True, slots=True)
class Environment:
    """What the environment asks for: the home and configuration, and the pipeline runner."""

    settings: Settings
    runner: str | None = None  # CORPUS_RUNNER: ``module:attribute`` of a PipelineRunner


def configure_environment(
    environ: MutableMapping[str, str] | None = None,
    *,
    config_path: str | None = None,
    home: str | None = None,
    registry: str | None = None,
) -> Environment:
    """Set the process defaults corpus-index relies on, configure the allocators once, and read
    ``CORPUS_CONFIG``, ``CORPUS_HOME``, ``CORPUS_REGISTRY`` and ``CORPUS_RUNNER``.

    Args:
        environ: the environment to read and complete (default: the process's).
        config_path: a configuration file that wins over ``CORPUS_CONFIG``.
        home: a home folder that wins over ``CORPUS_HOME``.
        registry: a registry database URL that wins over ``CORPUS_REGISTRY``.
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
    return Environment(settings=settings_from_env(view), runner=env.get("CORPUS_RUNNER") or None)
