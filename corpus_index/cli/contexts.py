"""``corpus`` output of group-first search on a messages namespace (whole contexts), and
``corpus person``: everything the principal may see about one person of its tenant."""

from __future__ import annotations

import datetime as dt
from typing import Any

import click

from corpus_index.cli.app import emit_json, handle_errors, main, searcher
from corpus_index.hits import Provenance

AS_OF_FORMATS = ["%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"]


def grouped(finder: Any, principal: Any, namespace: str | None) -> bool:
    """Whether the principal's search goes to a messages namespace (group-first)."""
    from corpus_index.group_search import grouped_namespace

    ns = namespace or finder.default_namespace(principal)
    return ns in finder.corpus.config.namespaces and grouped_namespace(finder.corpus, ns)


def show_contexts(
    finder: Any,
    query: str,
    principal: Any,
    k: int,
    namespace: str | None,
    generation: str | None,
    mode: str,
    filters: Any,
    as_of: dt.datetime | None,
    as_json: bool,
) -> None:
    """Run a group-first search and print its records (or the JSON response)."""
    from corpus_index.group_search import search_contexts

    result = search_contexts(
        finder,
        query,
        principal=principal,
        k=k,
        namespace=namespace,
        generation=generation,
        mode=mode,
        filters=filters,
        as_of=as_of,
    )
    if as_json:
        emit_json(result.to_json())
        return
    print_result(result)


def print_result(result: Any) -> None:
    """A group-first search's records, with the query's analysis."""
    print_contexts(result.query, result.analysis.to_json(), result.records, result.trace)


def print_contexts(
    query: str, analysis: dict[str, Any], records: Any, trace: dict[str, Any]
) -> None:
    """Human-readable records: type, title, place, date, people, then the members in order."""
    times = ", ".join(f"{t['text']} -> {t['start']}..{t['end']}" for t in analysis["times"])
    people = ", ".join(p["name"] for p in analysis["people"])
    click.echo(f'\n"{query}"  ({len(records)} results, {trace.get("total_ms", 0):.0f} ms)')
    click.echo(
        f"    time: {times or '-'}   people: {people or '-'}   topics: "
        f"{', '.join(analysis['topics']) or '-'}"
    )
    for rec in records:
        who = ", ".join(f"{p.name} ({'/'.join(p.roles)})" for p in rec.participants[:6])
        click.echo(
            f"{rec.rank:>2}. {rec.relevance:.3f}  {rec.type}: {rec.title}  "
            f"[{rec.location or '-'}, {rec.date}{'..' + rec.date_end if rec.date_end != rec.date else ''}]"
        )
        click.echo(f"    people: {who or '-'}")
        own = Provenance.of_row(rec.provenance)
        click.echo(f"    {provenance_line(own)}  generation {own.generation}")
        for m in rec.members:
            text = " ".join(m.text.split())
            click.echo(f"    {m.order:>2}. {m.unit_id} ({m.source}, {m.role}): {text[:160]}")
            for p in m.provenance:
                click.echo(f"        {provenance_line(p)}")


def provenance_line(p: Provenance) -> str:
    """A hit's or a member's provenance on one line: chunk, content hash, backend and run."""
    return f"{p.chunk_ref}  {p.content_hash[:19]}…  {p.backend_spec}  run {p.run_id[:8]}"


@main.command()
@click.argument("name")
@click.option("--tenant", required=True, help="Tenant of the principal asking.")
@click.option("--group", "groups", multiple=True, help="A group of the principal (repeatable).")
@click.option("--namespace", help="Messages namespace (default: the tenant's).")
@click.option("--generation", help="Use this generation instead of the ACTIVE one.")
@click.option(
    "--limit",
    default=50,
    show_default=True,
    type=click.IntRange(1),
    help="At most this many contexts.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the person's contexts as JSON.")
@click.pass_context
@handle_errors
def person(
    ctx: click.Context,
    name: str,
    tenant: str,
    groups: tuple[str, ...],
    namespace: str | None,
    generation: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Everything about one person of the tenant: their contexts by topic and month, their
    roles, and who they interact with most (exit 1 when the name names nobody)."""
    from corpus_index.person_search import person_contexts
    from corpus_index.search import Principal

    result = person_contexts(
        searcher(ctx, record=False),
        name,
        principal=Principal(tenant, tuple(groups)),
        namespace=namespace,
        generation=generation,
        limit=limit,
    )
    data = result.to_json()
    if as_json:
        emit_json(data)
    elif result.person is None:
        names = ", ".join(c["name"] for c in data["candidates"])
        click.echo(
            f"no one in tenant {tenant} is {name!r}" + (f" (could be: {names})" if names else "")
        )
    else:
        shown, total = len(result.records), result.total_contexts
        count = f"showing {shown} of {total}" if shown < total else str(shown)
        click.echo(f"{result.person.name} ({result.person.identity_id}): {count} contexts")
        click.echo("    roles: " + ", ".join(f"{r} x{n}" for r, n in result.roles.items()))
        click.echo(
            "    most with: " + ", ".join(f"{p['name']} ({p['contexts']})" for p in result.partners)
        )
        for topic, ids in data["by_topic"].items():
            click.echo(f"    {topic}: {len(ids)}")
        print_contexts(name, {"times": [], "people": [], "topics": []}, result.records, {})
    if result.person is None:
        ctx.exit(1)
