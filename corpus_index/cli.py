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
        for row in report.stale:
            click.echo(
                f"  STALE {row['source_id']}: serving its last good version "
                f"({row['serving_version']}) since {row['since']}; {row['error']}",
                err=True,
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
@click.option(
    "--mode",
    type=click.Choice(["dense", "lexical", "hybrid"]),
    default="hybrid",
    show_default=True,
    help="Dense vectors, lexical BM25 (full-text index), or both fused.",
)
@click.option(
    "--filter",
    "filter_exprs",
    multiple=True,
    metavar="EXPR",
    help="key=value, key>=value, key!=value, key=a,b (any of), size_units_range=lo,hi, "
    "date_range=start,end, geo.state=AZ (repeatable; all must hold).",
)
@click.option(
    "--fusion",
    type=click.Choice(["rrf", "weighted"]),
    default="rrf",
    show_default=True,
    help="How hybrid mode fuses the two rankings.",
)
@click.option(
    "--rrf-k", default=60, show_default=True, type=click.IntRange(0), help="RRF constant."
)
@click.option(
    "--dense-weight",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Fusion weight.",
)
@click.option(
    "--lexical-weight",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Fusion weight.",
)
@click.option(
    "--candidates",
    type=click.IntRange(1),
    help="Rows each retriever returns before fusion (default: max(5k, 50)).",
)
@click.option(
    "--per-doc",
    default=3,
    show_default=True,
    type=click.IntRange(0),
    help="At most this many hits per document (0: no cap).",
)
@click.option("--no-dedupe", is_flag=True, help="Keep hits whose content repeats an earlier hit.")
@click.option(
    "--expand",
    type=click.Choice(["section", "neighbours"]),
    help="Return each hit's whole section, or its neighbouring chunks, as context.",
)
@click.option(
    "--window", default=1, show_default=True, type=click.IntRange(0), help="Neighbours either side."
)
@click.option(
    "--rerank-model",
    type=click.Path(file_okay=False),
    help="A local sentence-transformers cross-encoder folder to rerank the candidates with.",
)
@click.option("--no-trace", is_flag=True, help="Do not store this query's trace in the registry.")
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
    mode: str,
    filter_exprs: tuple[str, ...],
    fusion: str,
    rrf_k: int,
    dense_weight: float,
    lexical_weight: float,
    candidates: int | None,
    per_doc: int,
    no_dedupe: bool,
    expand: str | None,
    window: int,
    rerank_model: str | None,
    no_trace: bool,
    as_json: bool,
) -> None:
    """Search the ACTIVE generation as a principal (tenant + groups): dense, lexical or hybrid."""
    from corpus_index.filters import parse_expressions
    from corpus_index.rerank import make_reranker
    from corpus_index.search import Principal, Searcher
    from corpus_index.service import Corpus
    from corpus_index.traces import TraceStore

    settings = _settings(ctx)
    filters = parse_expressions(filter_exprs)
    reranker = make_reranker(rerank_model)
    traces = None if no_trace else TraceStore(settings.registry_path)
    searcher = Searcher(Corpus(settings), traces=traces)
    result = searcher.search(
        query,
        principal=Principal(tenant, tuple(groups)),
        k=k,
        namespace=namespace,
        generation=generation,
        mode=mode,
        filters=filters,
        candidates=max(candidates, k) if candidates else None,
        fusion_method=fusion,
        rrf_k=rrf_k,
        weights=(dense_weight, lexical_weight),
        dedupe=not no_dedupe,
        per_doc_cap=per_doc or None,
        rerank=reranker,
        expand=expand,
        window=window,
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
        f'\n"{query}"  ({len(result.hits)} hits, {result.trace.get("mode", "dense")}, '
        f"generation {result.trace['generation']}, {result.trace['total_ms']:.0f} ms)"
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
        for chunk in getattr(hit, "context", ()):
            marker = ">" if chunk.is_hit else " "
            click.echo(f"    {marker} [{chunk.block_key}] {' '.join(chunk.text.split())[:200]}")


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
        failed = sorted(n for n, c in g.checks.items() if not c.get("passed"))
        if not g.checks:
            checks = "checks not run"
        elif failed:
            checks = f"FAILED: {', '.join(failed)}"
        else:
            checks = f"{len(g.checks)} checks passed"
        golden = g.eval.get("golden", {})
        metrics = (
            f"  recall@5={golden['recall@5']:.3f} mrr@10={golden['mrr@10']:.3f} "
            f"ndcg@10={golden['ndcg@10']:.3f}"
            if golden
            else ""
        )
        click.echo(
            f"{g.id}  {g.status:<8} {g.spec.namespace}/{g.spec.profile}  {g.spec.backend_spec}  "
            f"dim={g.spec.dim}  rows={g.row_count}{metrics}  {checks}"
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
@click.argument("generation")
@click.pass_context
@_handle_errors
def retire(ctx: click.Context, generation: str) -> None:
    """Retire GENERATION and drop its table (never the ACTIVE one nor the rollback target, and
    only after the namespace's retire_after_hours)."""
    from corpus_index.registry import Registry
    from pipelines.runner import run_retire

    settings = _settings(ctx)
    Registry(settings.registry_path).require(generation)
    result = run_retire(settings, generation)
    if not result.success:
        detail = result.error or "see the run in the Dagster UI"
        click.echo(f"error: retire refused: {detail}", err=True)
        sys.exit(EXIT_FAILED)
    gen = Registry(settings.registry_path).require(generation)
    click.echo(f"{gen.id}: {gen.status}; table {gen.table_name} dropped; run {result.run_id}")


@main.command("plan-migration")
@click.argument("profile")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.pass_context
@_handle_errors
def plan_migration(ctx: click.Context, profile: str, as_json: bool) -> None:
    """Estimate what backfilling PROFILE would embed: inputs, cache hits, tokens and cost."""
    from corpus_index.migration import plan_migration as plan
    from corpus_index.service import Corpus

    result = plan(Corpus(_settings(ctx)), profile)
    if as_json:
        _emit_json(result.to_json())
        return
    click.echo(
        f"profile {result.profile} -> namespace {result.namespace}: {result.backend_spec} "
        f"(revision {result.model_revision}, dim {result.dim}, input format {result.input_format})"
    )
    if result.existing_generation:
        click.echo(f"  builds into existing generation {result.existing_generation}")
    else:
        click.echo("  builds a new generation (BUILDING beside the ACTIVE one)")
    click.echo(f"  {'collection':<24}{'inputs':>8}{'cached':>8}{'to embed':>10}{'tokens':>10}")
    for c in result.collections:
        note = "" if c.ingested else "  (not ingested yet: run `corpus sync`)"
        click.echo(
            f"  {c.collection:<24}{c.distinct_inputs:>8}{c.cache_hits:>8}{c.to_embed:>10}"
            f"{c.tokens_to_embed:>10}{note}"
        )
    click.echo(
        f"  {'total':<24}{result.inputs:>8}{result.cache_hits:>8}{result.to_embed:>10}"
        f"{result.tokens_to_embed:>10}"
    )
    cost = "not priced" if result.cost_usd is None else f"${result.cost_usd:.4f}"
    click.echo(f"  tokens counted by: {result.token_counter}; cost: {cost}")


@main.command()
@click.option(
    "--retention-hours",
    type=float,
    default=24.0,
    show_default=True,
    help="Keep LanceDB versions younger than this (ignored while a deletion awaits purge).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the compaction report as JSON.")
@click.pass_context
@_handle_errors
def compact(ctx: click.Context, retention_hours: float, as_json: bool) -> None:
    """Optimize every live index and cache table now (what compaction_schedule runs nightly)."""
    from pipelines.runner import run_compaction

    result, report = run_compaction(_settings(ctx), retention_hours)
    if not result.success:
        click.echo(f"error: compaction failed: {result.error}", err=True)
        sys.exit(EXIT_FAILED)
    if as_json:
        _emit_json(report)
        return
    for t in report["tables"]:
        extra = (
            f", {t['cache_entries_purged']} unused entries purged"
            if "cache_entries_purged" in t
            else ""
        )
        click.echo(
            f"{t['table']}: {t['rows']} rows, versions {t['versions_before']} -> "
            f"{t['versions_after']}{extra}"
        )
    click.echo(
        f"compacted {len(report['tables'])} tables in {report['seconds']} s; "
        f"{len(report['tombstones_purged'])} deletions physically purged"
    )


@main.command("audit-deletion")
@click.argument("source_id")
@click.option("--json", "as_json", is_flag=True, help="Print the audit as JSON.")
@click.pass_context
@_handle_errors
def audit_deletion(ctx: click.Context, source_id: str, as_json: bool) -> None:
    """Search every store (all generation tables and their old versions, caches, exports,
    warehouse) for SOURCE_ID and its hashes, and the bytes of every file of the home for
    fingerprints of its deleted texts and vectors; exit 1 if anything remains."""
    from corpus_index.deletion import audit_deletion as audit
    from corpus_index.service import Corpus

    report = audit(Corpus(_settings(ctx)), source_id)
    if as_json:
        _emit_json(report)
    else:
        tomb = report["tombstone"]
        if tomb:
            click.echo(
                f"{source_id}: deleted {tomb['removed_at']} ({tomb['reason']}); receipt "
                f"{tomb['receipt']}; purged: {tomb['purged_at'] or 'not yet (run corpus compact)'}"
            )
        else:
            click.echo(f"{source_id}: no tombstone (never deleted, or deleted and re-added)")
        for r in report["remaining"]:
            where = r.get("table") or r.get("path")
            version = (
                f" version {r['version']}{' (current)' if r.get('current') else ''}"
                if "version" in r
                else ""
            )
            count = f": {r['rows']} rows" if "rows" in r else ""
            click.echo(f"  REMAINS in {r['store']} {where}{version}{count} (by {r['match']})")
        scan = report["byte_scan"]
        cost = scan.get("cost", {})
        click.echo(
            f"  byte scan: {scan['status']}"
            + (
                f", {cost['files']} files, {cost['raw_bytes']} bytes in {cost['seconds']} s"
                if cost
                else ""
            )
        )
        for s_ in report["shared"]:
            click.echo(f"  shared: {s_['input_hashes']} input hashes ({s_['why']})")
        click.echo("clean: nothing remains" if report["clean"] else "NOT clean")
    if not report["clean"]:
        sys.exit(EXIT_FAILED)


@main.command("eval")
@click.argument("dataset_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--profile", help="Embedding profile (default: the first in corpus.yaml).")
@click.option(
    "--mode",
    "mode",
    type=click.Choice([*("dense", "lexical", "hybrid"), "all"]),
    default="hybrid",
    show_default=True,
)
@click.option("--k", "ks", default="1,5,10,100", show_default=True, help="Recall cut-offs.")
@click.option("--limit", type=int, help="Only the first N queries (a quick look).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per mode.")
@click.pass_context
@_handle_errors
def eval_command(
    ctx: click.Context,
    dataset_dir: str,
    profile: str | None,
    mode: str,
    ks: str,
    limit: int | None,
    as_json: bool,
) -> None:
    """Evaluate retrieval on a BEIR-format folder (corpus.jsonl, queries.jsonl, qrels.tsv),
    ingested through the pipeline into a namespace of its own."""
    from pathlib import Path

    from corpus_index.beir_eval import MODES, run_eval
    from pipelines.runner import run_eval_report

    try:
        cutoffs = sorted({int(k) for k in ks.split(",") if k.strip()})
    except ValueError:
        raise click.BadParameter(f"--k takes integers like 1,5,10 (got {ks!r})") from None
    if 10 not in cutoffs:
        cutoffs.append(10)
    modes = list(MODES) if mode == "all" else [mode]
    settings = _settings(ctx)
    results = run_eval(
        settings,
        Path(dataset_dir),
        profile=profile,
        modes=modes,
        ks=cutoffs,
        limit=limit,
        progress=None if as_json else (lambda m: click.echo(f"  {m}", err=True)),
    )
    run_eval_report(settings)
    if as_json:
        _emit_json(results if len(results) > 1 else results[0])
        return
    cols = ["ndcg@10", "mrr@10", *[f"recall@{k}" for k in cutoffs], "p@10"]
    click.echo(
        f"{'dataset':<12}{'mode':<9}{'gen':<7}"
        + "".join(f"{c:>11}" for c in cols)
        + f"{'p50 ms':>9}{'p95 ms':>9}"
    )
    for r in results:
        click.echo(
            f"{r['dataset']:<12}{r['mode']:<9}{r['generation']:<7}"
            + "".join(f"{r[c]:>11.4f}" for c in cols)
            + f"{r['latency_p50_ms']:>9.1f}{r['latency_p95_ms']:>9.1f}"
        )


@main.command()
@click.pass_context
@_handle_errors
def demo(ctx: click.Context) -> None:
    """Print example searches over the bundled sample corpus."""
    from corpus_index.demo import run_demo

    run_demo(_settings(ctx))


# -- RFC 0013 use cases: similar deals, calibration SQL, risk patterns; query traces ----------


def _principal_options(fn: F) -> F:
    """--tenant/--group/--namespace/--generation, shared by the commands that act as a principal."""
    fn = click.option("--generation", help="Use this generation instead of the ACTIVE one.")(fn)
    fn = click.option("--namespace", help="Namespace (default: the tenant's).")(fn)
    fn = click.option(
        "--group", "groups", multiple=True, help="A group of the principal (repeatable)."
    )(fn)
    fn = click.option("--tenant", required=True, help="Tenant of the principal asking.")(fn)
    return fn


def _searcher(ctx: click.Context, *, record: bool = True) -> Any:
    from corpus_index.search import Searcher
    from corpus_index.service import Corpus
    from corpus_index.traces import TraceStore

    settings = _settings(ctx)
    return Searcher(Corpus(settings), traces=TraceStore(settings.registry_path) if record else None)


@main.command()
@click.argument("deal")
@_principal_options
@click.option(
    "--k", default=5, show_default=True, type=click.IntRange(1, 1000), help="Number of deals."
)
@click.option("--filter", "filter_exprs", multiple=True, metavar="EXPR", help="As for search.")
@click.option("--section", "sections", multiple=True, help="Compare only these sections.")
@click.option("--json", "as_json", is_flag=True, help="Print the deals as JSON.")
@click.pass_context
@_handle_errors
def similar(
    ctx: click.Context,
    deal: str,
    tenant: str,
    groups: tuple[str, ...],
    namespace: str | None,
    generation: str | None,
    k: int,
    filter_exprs: tuple[str, ...],
    sections: tuple[str, ...],
    as_json: bool,
) -> None:
    """Deals most similar to DEAL (a deal_id, doc_id or source_id), by its own section vectors."""
    from corpus_index.filters import parse_expressions
    from corpus_index.search import Principal
    from corpus_index.use_cases import similar_deals

    result = similar_deals(
        _searcher(ctx),
        deal,
        principal=Principal(tenant, tuple(groups)),
        k=k,
        namespace=namespace,
        generation=generation,
        filters=parse_expressions(filter_exprs),
        sections=list(sections) or None,
    )
    if result is None:
        click.echo(
            f"error: no deal {deal!r} is visible to tenant {tenant!r} with groups "
            f"{', '.join(groups) or '(none)'}",
            err=True,
        )
        sys.exit(EXIT_USAGE)
    if as_json:
        _emit_json(result.to_json())
        return
    click.echo(
        f"deals like {result.deal_id or result.source_id} ({', '.join(result.sections)}; "
        f"{result.trace['total_ms']:.0f} ms)"
    )
    for rank, d in enumerate(result.deals, start=1):
        where = ", ".join(str(x) for x in (d.metro, d.state) if x)
        click.echo(
            f"{rank:>2}. {d.score:.3f}  {d.deal_id or d.source_id}  {d.asset_class or ''}  "
            f"{where}  units={d.units}  {d.deal_date or ''}"
        )
        click.echo("    " + "  ".join(f"{s}={v:.3f}" for s, v in d.sections.items()))


@main.command()
@click.argument("query")
@_principal_options
@click.option(
    "--neighbours",
    default=10,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="Neighbours per deal and section in the neighbours view.",
)
@click.option("--max-rows", default=10000, show_default=True, type=click.IntRange(1))
@click.option("--json", "as_json", is_flag=True, help="Print {columns, rows, views} as JSON.")
@click.pass_context
@_handle_errors
def sql(
    ctx: click.Context,
    query: str,
    tenant: str,
    groups: tuple[str, ...],
    namespace: str | None,
    generation: str | None,
    neighbours: int,
    max_rows: int,
    as_json: bool,
) -> None:
    """Run one read-only SELECT over the principal's views (cross-deal calibration).

    \b
    Views (only rows the tenant and groups may see):
      deals       one row per deal: deal_id, asset_class, subtype, state, metro, units, deal_date, ...
      blocks      every parsed block, financial sections included; content is JSON
      chunks      the generation's indexed rows, without vectors
      neighbours  deal_id, neighbour_deal_id, section, score, rank
    Example:
      corpus sql "SELECT median((content->>'exit_cap_rate_pct')::DOUBLE) FROM blocks
                  JOIN deals USING (source_id) WHERE section = 'debt_terms'
                  AND asset_class = 'multifamily'" --tenant meridian --group uw-team
    """
    from corpus_index.search import Principal
    from corpus_index.use_cases import run_sql

    result = run_sql(
        _searcher(ctx),
        query,
        principal=Principal(tenant, tuple(groups)),
        namespace=namespace,
        generation=generation,
        neighbours=neighbours,
        max_rows=max_rows,
    )
    if as_json:
        _emit_json(result.to_json())
        return
    rows = [[_cell(v) for v in r] for r in result.rows]
    widths = [
        min(48, max([len(c), *(len(r[i]) for r in rows)])) for i, c in enumerate(result.columns)
    ]
    click.echo("  ".join(c.ljust(w) for c, w in zip(result.columns, widths, strict=True)))
    click.echo("  ".join("-" * w for w in widths))
    for r in rows:
        click.echo("  ".join(v[:w].ljust(w) for v, w in zip(r, widths, strict=True)))
    more = " (truncated)" if result.truncated else ""
    click.echo(f"({len(rows)} rows{more}, {result.trace['total_ms']:.0f} ms)", err=True)


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    return " ".join(str(value).split())


@main.command("risk-patterns")
@click.argument("query", required=False)
@_principal_options
@click.option("--deal", help="The deal that triggered the flag (excluded; 'prior' = before it).")
@click.option("--flag", help="The flag id in --deal's risk_assessment to look for.")
@click.option("--before", help="Only deals dated before this ISO date.")
@click.option(
    "--k", default=10, show_default=True, type=click.IntRange(1, 1000), help="Number of deals."
)
@click.option(
    "--mode",
    type=click.Choice(["dense", "lexical", "hybrid"]),
    default="hybrid",
    show_default=True,
)
@click.option("--filter", "filter_exprs", multiple=True, metavar="EXPR", help="As for search.")
@click.option("--json", "as_json", is_flag=True, help="Print the matches as JSON.")
@click.pass_context
@_handle_errors
def risk_patterns_command(
    ctx: click.Context,
    query: str | None,
    tenant: str,
    groups: tuple[str, ...],
    namespace: str | None,
    generation: str | None,
    deal: str | None,
    flag: str | None,
    before: str | None,
    k: int,
    mode: str,
    filter_exprs: tuple[str, ...],
    as_json: bool,
) -> None:
    """Prior deals whose risk section matches QUERY (or --deal's --flag), with their resolution."""
    from corpus_index.filters import parse_expressions
    from corpus_index.search import Principal
    from corpus_index.use_cases import risk_patterns

    result = risk_patterns(
        _searcher(ctx),
        query,
        principal=Principal(tenant, tuple(groups)),
        deal=deal,
        flag=flag,
        before=before,
        k=k,
        mode=mode,
        namespace=namespace,
        generation=generation,
        filters=parse_expressions(filter_exprs),
    )
    if as_json:
        _emit_json(result.to_json())
        return
    click.echo(f'risk "{result.query}": {len(result.matches)} prior deals')
    for rank, m in enumerate(result.matches, start=1):
        click.echo(
            f"{rank:>2}. {m.score:.3f}  {m.deal_id or m.source_id}  {m.deal_date or ''}  "
            f"flag {m.flag_id or '-'} ({m.severity or '-'})"
        )
        for label, text in (
            ("risk", m.description),
            ("mitigant", m.mitigant),
            ("resolution", m.resolution),
        ):
            if text:
                click.echo(f"    {label}: {text}")


@main.command()
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 1000))
@click.option("--tenant", help="Only this tenant's queries.")
@click.option("--json", "as_json", is_flag=True, help="Print the traces as JSON.")
@click.pass_context
@_handle_errors
def traces(ctx: click.Context, limit: int, tenant: str | None, as_json: bool) -> None:
    """The newest query traces (the last 1000 are kept): stage times per query."""
    from corpus_index.traces import TraceStore

    rows = TraceStore(_settings(ctx).registry_path).recent(limit, tenant=tenant)
    if as_json:
        _emit_json({"traces": rows})
        return
    if not rows:
        click.echo("no queries traced yet")
    stages = ("embedding", "filter", "dense", "lexical", "fusion", "rerank")
    for r in rows:
        t = r["trace"]
        times = "  ".join(f"{s}={t[f'{s}_ms']:.1f}" for s in stages if f"{s}_ms" in t)
        click.echo(
            f"#{r['seq']}  {r['recorded_at'][:19]}  {r['kind']}/{r['mode'] or '-'}  "
            f"tenant={r['tenant']}  hits={r['hits']}  total={r['total_ms'] or 0:.1f} ms"
        )
        click.echo(f"    {' '.join(r['query'].split())[:100]}")
        if times:
            click.echo(f"    {times}")


if __name__ == "__main__":
    main()
