"""The ``corpus`` Click group, what every command shares, and the error boundary.

Domain errors become one clean line on stderr and a meaningful exit code here, and only here:
2 for bad input or configuration, 1 for a failed operation (a failed run, a refused promotion),
75 (EX_TEMPFAIL) when the home is busy with another sync or promotion: try again later;
3 for a damaged home (a file that cannot be read: `corpus doctor --repair` rebuilds it).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from corpus_index.config import Settings, registry_url
from corpus_index.environment import configure_environment
from corpus_index.errors import (
    ConfigError,
    CorpusError,
    DamagedStateError,
    HomeBusyError,
    PermanentError,
)
from corpus_index.runner import PipelineRunner, load_runner

if TYPE_CHECKING:
    from corpus_index.search import Searcher

F = TypeVar("F", bound=Callable[..., Any])

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_BUSY = 75  # EX_TEMPFAIL: another process holds the home's lock
EXIT_DAMAGED = 3


@dataclass
class Session:
    """What a command runs with: the settings, and the pipeline runner, loaded on first use."""

    settings: Settings
    runner_target: str | None = None
    _runner: PipelineRunner | None = field(default=None, repr=False)

    def runner(self) -> PipelineRunner:
        if self._runner is None:
            self._runner = load_runner(target=self.runner_target)
        return self._runner


def handle_errors(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except DamagedStateError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_DAMAGED)
        except (ConfigError, PermanentError, FileNotFoundError) as exc:
            click.echo(f"error: {exc}", err=True)
            for note in getattr(exc, "__notes__", []):
                click.echo(f"  hint: {note}", err=True)
            sys.exit(EXIT_USAGE)
        except HomeBusyError as exc:
            click.echo(f"error: {exc}", err=True)
            for note in getattr(exc, "__notes__", []):
                click.echo(f"  hint: {note}", err=True)
            sys.exit(EXIT_BUSY)
        except CorpusError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_FAILED)

    return wrapper  # type: ignore[return-value]


@contextlib.contextmanager
def writing(path: Path, what: str) -> Iterator[None]:
    """A write of ``what`` to a path the user gave: one that cannot be written (a folder not
    writable, a file where a folder should be, a read-only disk) is bad input, named with why
    (exit 2), not a traceback."""
    try:
        yield
    except OSError as exc:
        why = exc.strerror or str(exc)
        if exc.filename is not None and str(exc.filename) != str(path):
            why = f"{exc.filename}: {why}"
        click.echo(f"error: cannot write {what} to {path} ({why})", err=True)
        sys.exit(EXIT_USAGE)


def check_writable(path: Path, what: str) -> None:
    """Stop now, as :func:`writing` would at the end (exit 2, naming ``path`` and why), where
    ``path`` cannot be written: for a command that works a long time before it writes. The
    path is opened to append, which writes nothing, and a file it made is removed again."""
    existed = path.exists()
    with writing(path, what):
        with path.open("a", encoding="utf-8"):
            pass
        if not existed:
            path.unlink()


def session(ctx: click.Context) -> Session:
    obj = ctx.find_object(Session)
    if obj is None:  # pragma: no cover - set by the group callback
        raise click.UsageError("the corpus group did not run")
    return obj


def settings_of(ctx: click.Context) -> Settings:
    return session(ctx).settings


def runner_of(ctx: click.Context) -> PipelineRunner:
    return session(ctx).runner()


class _FirstSearchNote(logging.Handler):
    """Turns the library's "loading model <path>" into one stderr line for a person."""

    def emit(self, record: logging.LogRecord) -> None:
        path = str(record.args[0]) if isinstance(record.args, tuple) and record.args else ""
        name = path.rstrip("/").rsplit("/", 1)[-1] or "the model"
        click.echo(f"loading model {name} (first search)", err=True)


def announce_model_loading() -> None:
    """Say once on stderr when a search loads a local model (its progress bars are off)."""
    from corpus_index.embedders import local

    if not any(isinstance(h, _FirstSearchNote) for h in local.log.handlers):
        local.log.addHandler(_FirstSearchNote())
        local.log.setLevel(logging.INFO)
        local.log.propagate = False


def searcher(ctx: click.Context, *, record: bool = True) -> Searcher:
    """A searcher over the home, storing a trace of each query unless ``record`` is false."""
    from corpus_index.search import Searcher

    announce_model_loading()
    from corpus_index.home import Home
    from corpus_index.registry import open_registry
    from corpus_index.traces import TraceStore

    settings = settings_of(ctx)
    return Searcher(
        Home(settings),
        traces=TraceStore(open_registry(settings, lock_timeout_s=5.0)) if record else None,
    )


class FiniteFloat(click.FloatRange):
    """A float option that refuses ``nan`` and ``inf`` (which ``click.FloatRange`` lets
    through: NaN compares false with every bound), within optional bounds."""

    name = "finite float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, default=str))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="corpus.yaml (default: $CORPUS_CONFIG or ./corpus.yaml).",
)
@click.option(
    "--home",
    type=click.Path(file_okay=False),
    help="Home folder (default: $CORPUS_HOME or ./.corpus).",
)
@click.option(
    "--registry",
    metavar="URL",
    help="The registry's PostgreSQL database, postgresql://user@host:port/db "
    "(default: $CORPUS_REGISTRY, or <home>/registry.duckdb).",
)
@click.version_option(package_name="corpus-index")
@click.pass_context
def main(
    ctx: click.Context, config_path: str | None, home: str | None, registry: str | None
) -> None:
    """corpus-index: a governed, searchable embedding index of a document corpus."""
    try:
        if registry:  # named as the user gave it, not as the variable it stands in for
            registry_url(registry, setting="--registry")
        env = configure_environment(config_path=config_path, home=home, registry=registry)
    except ConfigError as exc:  # each message names the setting that is wrong
        raise click.UsageError(str(exc)) from None
    # a PipelineRunner given as the context object (``CliRunner().invoke(main, args,
    # obj=runner)``) is used instead of the installed one
    injected = ctx.obj if isinstance(ctx.obj, PipelineRunner) else None
    ctx.obj = Session(env.settings, env.runner, injected)
