"""The ``corpus`` command line: sync, search and operate generations.

Domain errors become one clean line on stderr and a meaningful exit code here, and only here:
2 for bad input or configuration, 1 for a failed operation (a failed run, a refused promotion).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from corpus_index.config import Settings, settings_from_env
from corpus_index.errors import ConfigError, CorpusError, PermanentError

F = TypeVar("F", bound=Callable[..., Any])

EXIT_FAILED = 1
EXIT_USAGE = 2


def _handle_errors(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (ConfigError, PermanentError, FileNotFoundError) as exc:
            click.echo(f"error: {exc}", err=True)
            for note in getattr(exc, "__notes__", []):
                click.echo(f"  hint: {note}", err=True)
            sys.exit(EXIT_USAGE)
        except CorpusError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_FAILED)

    return wrapper  # type: ignore[return-value]


def _settings(ctx: click.Context) -> Settings:
    settings = ctx.obj
    assert isinstance(settings, Settings)  # noqa: S101 - set by the group callback
    return settings


def _emit_json(value: Any) -> None:
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
@click.version_option(package_name="corpus-index")
@click.pass_context
def main(ctx: click.Context, config_path: str | None, home: str | None) -> None:
    """corpus-index: a governed, searchable embedding index of a document corpus."""
    env = dict(os.environ)
    if config_path:
        env["CORPUS_CONFIG"] = config_path
    if home:
        env["CORPUS_HOME"] = home
    ctx.obj = settings_from_env(env)
    os.environ.setdefault("LANCE_LOG", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
@click.pass_context
@_handle_errors
def sync(ctx: click.Context, as_json: bool) -> None:
    """Run the asset graph for every configured collection (the runs show in the Dagster UI)."""
    from pipelines.runner import sync as run_sync

    settings = _settings(ctx)

    def progress(message: str) -> None:
        if not as_json:
            click.echo(f"  running {message}", err=True)

    report = run_sync(settings, progress=progress)
    if as_json:
        _emit_json(report.to_json())
    else:
        click.echo(
            f"synced {report.documents} documents: embedded {report.embedded}, "
            f"cache hits {report.cache_hits}, quarantined {report.quarantined}"
        )
        for name, c in report.collections.items():
            click.echo(
                f"  {name}: {c['documents']} documents ({c['added']} added, {c['changed']} changed, "
                f"{c['removed']} removed), {c['quarantined']} quarantined"
            )
        for profile, g in report.generations.items():
            click.echo(
                f"  profile {profile}: generation {g['generation']} {g['status']} with {g['rows']} rows"
            )
        for failure in report.failed_runs:
            click.echo(
                f"  FAILED {failure['job']} {failure['partition']}: "
                f"{failure.get('failed_checks') or failure.get('error', '')}",
                err=True,
            )
    if not report.ok:
        sys.exit(EXIT_FAILED)


@main.command()
@click.argument("query")
@click.option("--tenant", required=True, help="Tenant of the principal asking.")
@click.option("--group", "groups", multiple=True, help="A group of the principal (repeatable).")
@click.option(
    "--k", default=5, show_default=True, type=click.IntRange(1, 1000), help="Number of hits."
)
@click.option("--namespace", help="Namespace to search (default: the tenant's).")
@click.option("--generation", help="Search this generation instead of the ACTIVE one.")
@click.option("--json", "as_json", is_flag=True, help="Print {hits, trace} as JSON.")
@click.pass_context
@_handle_errors
def search(
    ctx: click.Context,
    query: str,
    tenant: str,
    groups: tuple[str, ...],
    k: int,
    namespace: str | None,
    generation: str | None,
    as_json: bool,
) -> None:
    """Search the ACTIVE generation as a principal (tenant + groups)."""
    from corpus_index.search import Principal, Searcher
    from corpus_index.service import Corpus

    searcher = Searcher(Corpus(_settings(ctx)))
    result = searcher.search(
        query,
        principal=Principal(tenant, tuple(groups)),
        k=k,
        namespace=namespace,
        generation=generation,
    )
    if as_json:
        _emit_json(result.to_json())
        return
    if not groups:
        click.echo(
            "note: no --group given; rows are visible only to principals sharing an ACL group",
            err=True,
        )
    print_hits(query, result)


def print_hits(query: str, result: Any) -> None:
    """Human-readable hits with their provenance."""
    click.echo(
        f'\n"{query}"  ({len(result.hits)} hits, generation {result.trace["generation"]}, '
        f"{result.trace['total_ms']:.0f} ms)"
    )
    for rank, hit in enumerate(result.hits, start=1):
        p = hit.provenance
        click.echo(
            f"{rank:>2}. {hit.score:.3f}  {hit.source_id}  [{hit.section}]  tenant={hit.tenant_id}"
        )
        click.echo(f"    {hit.excerpt}")
        click.echo(
            f"    {p.chunk_ref}  {p.content_hash[:19]}…  {p.backend_spec}  run {p.run_id[:8]}"
        )


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the generations as JSON.")
@click.pass_context
@_handle_errors
def generations(ctx: click.Context, as_json: bool) -> None:
    """List index generations with status, counts and check outcomes."""
    from corpus_index.registry import Registry

    reg = Registry(_settings(ctx).registry_path)
    gens = reg.generations()
    if as_json:
        _emit_json({"generations": [g.to_json() for g in gens]})
        return
    if not gens:
        click.echo("no generations yet (run `corpus sync`)")
    for g in gens:
        failed = [n for n, c in g.checks.items() if not c.get("passed")]
        checks = (
            "checks passed"
            if g.checks and not failed
            else (f"FAILED: {', '.join(failed)}" if failed else "checks not run")
        )
        click.echo(
            f"{g.id}  {g.status:<8} {g.spec.namespace}/{g.spec.profile}  {g.spec.backend_spec}  "
            f"dim={g.spec.dim}  rows={g.row_count}  {checks}"
        )


def _run_promotion(ctx: click.Context, namespace: str, generation: str, action: str) -> None:
    # the orchestration layer is imported lazily: the library itself never imports Dagster
    from pipelines.runner import run_promotion

    settings = _settings(ctx)
    result = run_promotion(settings, namespace, generation, action)
    if not result.success:
        detail = result.error or "see the run in the Dagster UI"
        click.echo(f"error: {action} refused for namespace {namespace}: {detail}", err=True)
        sys.exit(EXIT_FAILED)
    from corpus_index.registry import Registry

    active = Registry(settings.registry_path).active(namespace)
    if active is not None:
        click.echo(
            f"{namespace}: ACTIVE generation is now {active.id} ({active.spec.profile}, "
            f"{active.spec.backend_spec}, {active.row_count} rows); run {result.run_id}"
        )


@main.command()
@click.argument("generation", required=False)
@click.option(
    "--namespace", help="Namespace to promote in (default: the generation's, or every namespace)."
)
@click.pass_context
@_handle_errors
def promote(ctx: click.Context, generation: str | None, namespace: str | None) -> None:
    """Make GENERATION (default: the newest READY one) serve its namespace, after its gates passed."""
    from corpus_index.registry import Registry

    settings = _settings(ctx)
    if generation:
        gen = Registry(settings.registry_path).require(generation)
        _run_promotion(ctx, gen.spec.namespace, generation, "promote")
        return
    config = settings.load()
    namespaces = [namespace] if namespace else list(config.namespaces)
    for ns in namespaces:
        _run_promotion(ctx, ns, "", "promote")


@main.command()
@click.option(
    "--namespace",
    default=None,
    help="Namespace to roll back (default: every namespace with a previous generation).",
)
@click.pass_context
@_handle_errors
def rollback(ctx: click.Context, namespace: str | None) -> None:
    """Point a namespace back at its previous ACTIVE generation, in one step, without re-embedding."""
    from corpus_index.registry import Registry

    settings = _settings(ctx)
    reg = Registry(settings.registry_path)
    config = settings.load()
    namespaces = [namespace] if namespace else [ns for ns in config.namespaces if reg.previous(ns)]
    if not namespaces:
        click.echo("error: no namespace has a previous generation to roll back to", err=True)
        sys.exit(EXIT_FAILED)
    for ns in namespaces:
        _run_promotion(ctx, ns, "", "rollback")


@main.command()
@click.pass_context
@_handle_errors
def demo(ctx: click.Context) -> None:
    """Print example searches over the bundled sample corpus."""
    from corpus_index.demo import run_demo

    run_demo(_settings(ctx))


if __name__ == "__main__":
    main()
