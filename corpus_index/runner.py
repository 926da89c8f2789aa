"""The pipeline runner the library's faces (CLI, ``CorpusIndex``, ``corpus eval``) are given.

The library never imports the orchestration layer: what runs the asset graph (by default the
Dagster runner, ``definitions.dagster_runner()``) is found through the
``corpus_index.runners`` entry-point group that the installed distribution declares, and loaded
only when a command needs it. ``CORPUS_RUNNER`` (``module:attribute``, read by
``configure_environment``) or a runner passed in explicitly override it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib import metadata
from typing import Any, Protocol, runtime_checkable

from corpus_index.config import Settings
from corpus_index.errors import ConfigError

ENTRY_POINT_GROUP = "corpus_index.runners"
DEFAULT_RUNNER = "dagster"

Progress = Callable[[str], None]


class SyncOutcome(Protocol):
    """What one sync did (the Dagster runner's ``SyncReport``)."""

    @property
    def ok(self) -> bool: ...

    @property
    def failed_runs(self) -> list[dict[str, Any]]: ...

    @property
    def embedded(self) -> int: ...

    def to_json(self) -> dict[str, Any]: ...


class RunOutcome(Protocol):
    """Whether one run succeeded, its id, and the first error if it did not."""

    @property
    def success(self) -> bool: ...

    @property
    def run_id(self) -> str: ...

    @property
    def error(self) -> str: ...


@runtime_checkable
class PipelineRunner(Protocol):
    """Runs the pipeline's jobs for one home: what the CLI and ``CorpusIndex`` ask of it."""

    def sync(
        self, settings: Settings, *, progress: Progress | None = None, retry_refused: bool = False
    ) -> SyncOutcome:
        """Run the asset graph for every configured collection; ``retry_refused``: send again
        the inputs the embedders' servers refused before (held back unasked otherwise)."""
        ...

    def promote(
        self, settings: Settings, namespace: str, generation: str, *, expect_active: str = ""
    ) -> RunOutcome:
        """Make ``generation`` (``''``: the newest READY one) serve ``namespace``.

        ``expect_active`` (``''``: none): the generation that must serve now; a retry of a
        promotion that committed is a no-op, any other mismatch is refused.
        """
        ...

    def rollback(
        self, settings: Settings, namespace: str, *, expect_active: str = ""
    ) -> RunOutcome:
        """Point ``namespace`` back at its previous ACTIVE generation (``expect_active``: as
        for ``promote``)."""
        ...

    def retire(self, settings: Settings, generation: str) -> RunOutcome:
        """Retire ``generation`` and drop its table."""
        ...

    def compact(
        self, settings: Settings, retention_hours: float
    ) -> tuple[RunOutcome, dict[str, Any]]:
        """Optimize every live table; the outcome and the compaction report."""
        ...

    def eval_report(self, settings: Settings) -> RunOutcome:
        """Publish the newest ``corpus eval`` figures where operators look."""
        ...

    def reprocess(
        self, settings: Settings, now: str, *, collection: str = ""
    ) -> tuple[RunOutcome, dict[str, Any], SyncOutcome | None]:
        """Re-process the linked groups due at ``now`` (ISO 8601) in every grouped collection
        (or ``collection``), then embed and index the collections it changed; the outcome, the
        re-processing report, and the sync's (None when nothing was taken)."""
        ...


def load_runner(
    name: str = DEFAULT_RUNNER,
    *,
    target: str | None = None,
    entry_points: Callable[..., Any] = metadata.entry_points,
) -> PipelineRunner:
    """The runner ``target`` (``module:attribute``) names, else the entry point ``name`` of
    the ``corpus_index.runners`` group, instantiated.

    Raises:
        ConfigError: no runner of that name is installed, or the target cannot be loaded.
    """
    if target:
        factory = _load_target(target)
    else:
        found = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
        if name not in found:
            installed = ", ".join(sorted(found)) or "none"
            error = ConfigError(
                f"no pipeline runner {name!r} is installed (entry points in group "
                f"{ENTRY_POINT_GROUP!r}: {installed})"
            )
            error.add_note(
                "install the pipeline with `pip install -e .` (it declares the Dagster runner), "
                "or set CORPUS_RUNNER=module:attribute"
            )
            raise error
        try:
            factory = found[name].load()
        except (ImportError, AttributeError) as exc:
            raise ConfigError(
                f"the pipeline runner {name!r} ({found[name].value}) cannot be loaded: {exc}"
            ) from None
    runner = factory()
    if not isinstance(runner, PipelineRunner):
        raise ConfigError(f"{target or name}: not a pipeline runner (see corpus_index.runner)")
    return runner


def _load_target(target: str) -> Any:
    module, _, attribute = target.partition(":")
    if not module or not attribute:
        raise ConfigError(f"CORPUS_RUNNER={target!r}: expected module:attribute")
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"CORPUS_RUNNER={target!r} cannot be loaded: {exc}") from None
