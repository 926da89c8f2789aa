"""Example searches over the bundled sample corpus, printed by ``make run`` (``corpus demo``)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable

import click
import pyarrow.compute as pc

from corpus_index.config import Settings
from corpus_index.conversation_timeline import collection_timeline, strips
from corpus_index.embedders import make_embedder
from corpus_index.export_reader import load_export, probe_verdict, verdict_line
from corpus_index.flat_exports import export_roots
from corpus_index.group_search import ContextResult, search_contexts
from corpus_index.home import Home
from corpus_index.kinds import kind_of
from corpus_index.search import Principal, Searcher, SearchResult

EXAMPLES = [
    (
        "One risk pattern, many wordings: aging building systems that need immediate capital repairs",
        "aging building systems that need immediate capital repairs",
        Principal("meridian", ("uw-team", "credit-committee")),
        "deferred maintenance",
    ),
    (
        "A large tenant's lease is about to roll, and nobody knows if they stay",
        "major tenant lease expiring soon with renewal uncertainty",
        Principal("harbor", ("harbor-analysts", "harbor-credit")),
        "lease expiration",
    ),
    (
        "Insurance cost shocks from storm and flood exposure",
        "rising property insurance premiums from hurricane exposure",
        Principal("meridian", ("uw-team",)),
        "insurance premium",
    ),
]


# (title, query, principal, namespace) over the plain documents and the researcher profiles
TEXT_EXAMPLES = [
    (
        "A handbook question, answered by the section that holds it",
        "how many weeks off do new parents get",
        Principal("university", ("staff",)),
        "handbook",
    ),
    (
        "Researchers by what they work on, not by keyword",
        "who works on plastic pollution",
        Principal("university", ("staff",)),
        "researchers",
    ),
]

# the seed's own example (Linked Context V2 §6.1), asked two weeks after Christmas
MESSAGES_EXAMPLE = (
    "What happened with pumpkin at Christmas?",
    Principal("wattle", ("wattle-staff", "wattle-managers")),
    "messages",
    dt.datetime(2026, 1, 10, tzinfo=dt.UTC),
)
# the channel of the Christmas thread in the sample messages
DEMO_CHANNEL = "discord_chat/#picton-sil"


def keyword_matches(corpus: Home, phrase: str, principal: Principal, generation: str) -> set[str]:
    """Deals whose indexed text contains ``phrase`` literally (what grep would find)."""
    gen = corpus.registry.require(generation)
    table = corpus.store.table(gen).to_arrow()
    mask = pc.and_(
        pc.equal(table["tenant_id"], principal.tenant),
        pc.match_substring_regex(table["text"], re.escape(phrase), ignore_case=True),
    )
    return set(table.filter(mask)["source_id"].to_pylist())


def run_demo(
    settings: Settings,
    *,
    show: Callable[[str, SearchResult], None],
    show_contexts: Callable[[ContextResult], None] | None = None,
    k: int = 5,
) -> None:
    """Run the example searches and print their hits with provenance, then one group-first
    search over the sample messages (when the home serves them).

    Args:
        settings: the home holding the sample corpus.
        show: prints one query's hits (the CLI's ``print_hits``).
        show_contexts: prints a group-first search's records.
        k: hits per query.
    """
    corpus = Home(settings)
    searcher = Searcher(corpus)
    for title, query, principal, phrase in EXAMPLES:
        click.echo(f"\n=== {title}")
        click.echo(f"    as tenant {principal.tenant}, groups {', '.join(principal.groups)}")
        result = searcher.search(query, principal=principal, k=k)
        show(query, result)
        deals = {h.source_id for h in result.hits if h.section == "risk_assessment"}
        literal = keyword_matches(corpus, phrase, principal, result.trace["generation"])
        click.echo(
            f"    -> {len(deals)} deals' risk sections found by meaning; "
            f'the literal phrase "{phrase}" appears in {len(literal)} of this tenant\'s deals'
        )

    ns = MESSAGES_EXAMPLE[2]
    if show_contexts is None or ns not in corpus.config.namespaces:
        return
    if corpus.registry.active(ns) is None:
        return
    query, principal, _, as_of = MESSAGES_EXAMPLE
    click.echo("\n=== Whole contexts, not fragments: a question about the sample messages")
    click.echo(
        f"    as tenant {principal.tenant}, groups {', '.join(principal.groups)}, as of {as_of:%d %b %Y}"
    )
    show_contexts(
        search_contexts(searcher, query, principal=principal, k=3, namespace=ns, as_of=as_of)
    )
    _conversations(corpus, principal.tenant)


def _conversations(corpus: Home, tenant: str) -> None:
    """How the sample staff chat was told apart into conversations (``corpus conversations``),
    for the tenant's first messages collection, when its links name the sample's channel."""
    for name, cfg in sorted(corpus.config.collections.items()):
        if cfg.kind != "messages" or cfg.tenant != tenant:
            continue
        try:
            t = collection_timeline(corpus.warehouse, name, channel=DEMO_CHANNEL, messages=80)
        except ValueError:  # not this sample's channel, or links of an earlier version
            return
        if t is None:
            return
        click.echo(f"\n=== How the staff chat was told apart (corpus conversations {name})")
        click.echo("    a line per conversation, o where it speaks; the Christmas thread is one")
        for line in strips(t):
            click.echo(f"    {line}")
        return


def run_text_demo(
    settings: Settings, *, show: Callable[[str, SearchResult], None], k: int = 3
) -> None:
    """Search the documents and profiles samples, then verify one researcher's flat-blob export
    as a consumer would (``corpus export verify``)."""
    corpus = Home(settings)
    namespaces = {c.namespace for c in corpus.config.collections.values()}
    searcher = Searcher(corpus)
    for title, query, principal, namespace in TEXT_EXAMPLES:
        if namespace not in namespaces or corpus.registry.active(namespace) is None:
            continue
        click.echo(f"\n=== {title}")
        click.echo(f"    as tenant {principal.tenant}, groups {', '.join(principal.groups)}")
        show(query, searcher.search(query, principal=principal, k=k, namespace=namespace))
    for name, collection in sorted(corpus.config.collections.items()):
        if not kind_of(collection).flat_exports:
            continue
        for profile in sorted(corpus.config.profiles):
            public, _ = export_roots(corpus, profile, name)
            folders = sorted(p / "embeddings" for p in public.glob("*") if p.name != "collection")
            if not folders:
                continue
            export = load_export(str(folders[0]))
            embedder = make_embedder(export.index["backend_spec"])
            click.echo(f"\n=== corpus export verify {folders[0]}")
            click.echo(f"    {verdict_line(export, embedder, probe_verdict(export, embedder))}")
            return
