"""``corpus`` commands that read the index as a principal: search, the demo, the RFC 0013 use
cases (similar deals, calibration SQL, risk patterns) and query traces."""

from __future__ import annotations

import datetime as dt
import sys
from typing import Any

import click
from click.core import ParameterSource

from corpus_index.cli.app import (
    EXIT_USAGE,
    F,
    FiniteFloat,
    emit_json,
    handle_errors,
    main,
    searcher,
    settings_of,
)
from corpus_index.cli.contexts import (
    AS_OF_FORMATS,
    grouped,
    print_result,
    provenance_line,
    show_contexts,
)
from corpus_index.retrieval import MAX_CANDIDATES, SECTION_CONTEXT

# the options of a unit search; a group-first search ranks, caps and expands its records its own
# way, so on a messages namespace they are refused without --units rather than dropped
UNIT_SEARCH_OPTIONS = {
    "fusion": "--fusion",
    "rrf_k": "--rrf-k",
    "feedback": "--feedback/--no-feedback",
    "dense_weight": "--dense-weight",
    "lexical_weight": "--lexical-weight",
    "candidates": "--candidates",
    "per_doc": "--per-doc",
    "no_dedupe": "--no-dedupe",
    "expand": "--expand",
    "window": "--window",
    "rerank_model": "--rerank-model",
}


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
    type=click.Choice(["zscore", "rrf", "weighted"]),
    help="How hybrid mode fuses the two rankings (default: the namespace's retrieval settings).",
)
@click.option("--rrf-k", type=click.IntRange(0), help="RRF constant (default: the namespace's).")
@click.option(
    "--feedback/--no-feedback",
    default=None,
    help="Rocchio feedback round of hybrid mode (default: the namespace's retrieval settings).",
)
@click.option(
    "--dense-weight",
    type=FiniteFloat(0),
    help="Fusion weight (default: the namespace's; 1.0 when only --lexical-weight is given).",
)
@click.option(
    "--lexical-weight",
    type=FiniteFloat(0),
    help="Fusion weight (default: the namespace's; 1.0 when only --dense-weight is given).",
)
@click.option(
    "--candidates",
    type=click.IntRange(1, MAX_CANDIDATES),
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
    help=f"Return each hit's section (up to {SECTION_CONTEXT} chunks either side of it), or its "
    "neighbouring chunks, as context.",
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
@click.option(
    "--units",
    is_flag=True,
    help="On a messages namespace, search units only (hits, as on any other namespace).",
)
@click.option(
    "--as-of",
    type=click.DateTime(AS_OF_FORMATS),
    help="Reference time (UTC) of the query's time hints in a group-first search of a messages "
    "namespace (default now; refused on a unit search, which reads no time hints).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print {hits, trace} as JSON ({query, analysis, results, total_hits, trace} for groups).",
)
@click.pass_context
@handle_errors
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
    fusion: str | None,
    rrf_k: int | None,
    feedback: bool | None,
    dense_weight: float | None,
    lexical_weight: float | None,
    candidates: int | None,
    per_doc: int,
    no_dedupe: bool,
    expand: str | None,
    window: int,
    rerank_model: str | None,
    no_trace: bool,
    units: bool,
    as_of: dt.datetime | None,
    as_json: bool,
) -> None:
    """Search the ACTIVE generation as a principal (tenant + groups): dense, lexical or hybrid.

    On a messages namespace the search is group-first: whole conversations, incidents with
    their shift notes and questions with their answers, then units (``--units``: units only,
    the one way there to use the fusion, candidate, dedupe, expand and rerank options).
    """
    from corpus_index.filters import parse_expressions
    from corpus_index.rerank import make_reranker
    from corpus_index.search import Principal

    filters = parse_expressions(filter_exprs)
    principal = Principal(tenant, tuple(groups))
    finder = searcher(ctx, record=not no_trace)
    if not units and grouped(finder, principal, namespace):
        given = [
            flag
            for name, flag in UNIT_SEARCH_OPTIONS.items()
            if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)
        ]
        if given:
            ns = namespace or finder.default_namespace(principal)
            click.echo(
                f"error: {', '.join(given)} apply to a unit search only: namespace {ns!r} holds "
                "messages and is searched group-first; add --units to search its units with them",
                err=True,
            )
            sys.exit(EXIT_USAGE)
        when = as_of.replace(tzinfo=dt.UTC) if as_of else None
        show_contexts(
            finder, query, principal, k, namespace, generation, mode, filters, when, as_json
        )
        return
    ns = namespace or finder.default_namespace(principal)
    if as_of is not None and ns in finder.corpus.config.namespaces:  # else: named unknown below
        # the reference time of the query's time hints, which only a group-first search reads:
        # a unit search ranks by the words alone, so the option would change nothing
        why = "--units searches units" if units else f"namespace {ns!r} holds no messages"
        click.echo(
            "error: --as-of applies to a group-first search only (the reference time of the "
            f"query's time hints, which a unit search does not read): {why}",
            err=True,
        )
        sys.exit(EXIT_USAGE)
    reranker = make_reranker(rerank_model)
    result = finder.search(
        query,
        principal=principal,
        k=k,
        namespace=namespace,
        generation=generation,
        mode=mode,
        filters=filters,
        candidates=max(candidates, k) if candidates else None,
        fusion_method=fusion,
        rrf_k=rrf_k,
        weights=None
        if dense_weight is None and lexical_weight is None
        else (
            1.0 if dense_weight is None else dense_weight,
            1.0 if lexical_weight is None else lexical_weight,
        ),
        feedback=feedback,
        dedupe=not no_dedupe,
        per_doc_cap=per_doc or None,
        rerank=reranker,
        expand=expand,
        window=window,
    )
    if as_json:
        emit_json(result.to_json())
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
        click.echo(f"    {provenance_line(p)}")
        for chunk in getattr(hit, "context", ()):
            marker = ">" if chunk.is_hit else " "
            click.echo(f"    {marker} [{chunk.block_key}] {' '.join(chunk.text.split())[:200]}")


@main.command()
@click.pass_context
@handle_errors
def demo(ctx: click.Context) -> None:
    """Print example searches over the bundled sample corpus."""
    from corpus_index.demo import run_demo, run_text_demo

    run_demo(settings_of(ctx), show=print_hits, show_contexts=print_result)
    run_text_demo(settings_of(ctx), show=print_hits)


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
@handle_errors
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
        searcher(ctx),
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
        emit_json(result.to_json())
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
@click.option(
    "--max-rows",
    default=10000,
    show_default=True,
    type=click.IntRange(1),
    help="Return at most this many rows.",
)
@click.option(
    "--timeout",
    "timeout_s",
    default=30.0,
    show_default=True,
    type=FiniteFloat(0, 3600, min_open=True),
    help="Stop the query after this many seconds.",
)
@click.option(
    "--memory-limit",
    default="1GB",
    show_default=True,
    help="Most memory the query may use (DuckDB size: 512MB, 2GB); nothing spills to disk.",
)
@click.option("--json", "as_json", is_flag=True, help="Print {columns, rows, views} as JSON.")
@click.pass_context
@handle_errors
def sql(
    ctx: click.Context,
    query: str,
    tenant: str,
    groups: tuple[str, ...],
    namespace: str | None,
    generation: str | None,
    neighbours: int,
    max_rows: int,
    timeout_s: float,
    memory_limit: str,
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
        searcher(ctx),
        query,
        principal=Principal(tenant, tuple(groups)),
        namespace=namespace,
        generation=generation,
        neighbours=neighbours,
        max_rows=max_rows,
        timeout_s=timeout_s,
        memory_limit=memory_limit,
    )
    if as_json:
        emit_json(result.to_json())
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
    help="As for search.",
)
@click.option("--filter", "filter_exprs", multiple=True, metavar="EXPR", help="As for search.")
@click.option("--json", "as_json", is_flag=True, help="Print the matches as JSON.")
@click.pass_context
@handle_errors
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
        searcher(ctx),
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
        emit_json(result.to_json())
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
@click.option(
    "--limit",
    default=20,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="Number of traces, newest first.",
)
@click.option("--tenant", help="Only this tenant's queries.")
@click.option("--json", "as_json", is_flag=True, help="Print the traces as JSON.")
@click.pass_context
@handle_errors
def traces(ctx: click.Context, limit: int, tenant: str | None, as_json: bool) -> None:
    """The newest query traces (the last 1000 are kept): stage times per query."""
    from corpus_index.registry import open_registry
    from corpus_index.traces import TraceStore

    rows = TraceStore(open_registry(settings_of(ctx), lock_timeout_s=5.0)).recent(
        limit, tenant=tenant
    )
    if as_json:
        emit_json({"traces": rows})
        return
    if not rows:
        click.echo("no queries traced yet")
    stages = ("embedding", "filter", "dense", "lexical", "fusion", "feedback", "dedupe", "rerank")
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
