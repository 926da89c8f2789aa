"""The ``index_generation`` step: a profile's generation with current indexes, and its gates
(row counts reconcile, indexes cover every row, no orphan vectors, retrieval not worse)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from corpus_index import gates, index_store, predicates
from corpus_index.embedding import embeddable
from corpus_index.group_records import generation_formats
from corpus_index.held_locks import confirm_held
from corpus_index.home import Home
from corpus_index.lifecycle import required_checks
from corpus_index.refusals import held_sources
from corpus_index.registry import Generation
from corpus_index.steps.eval_gate import eval_plot, run_eval_gate


@dataclass(slots=True)
class GenerationOutcome:
    """What the ``index_generation`` step found for one profile's generation."""

    generation: Generation
    coverage: index_store.Coverage
    gates: list[gates.Gate]
    rows_by_collection: dict[str, int]
    eval: dict[str, Any] = field(default_factory=dict)
    eval_plot: bytes | None = None


def run(home: Home, profile: str, *, run_id: str | None = None) -> GenerationOutcome:
    """Bring the profile's generation's indexes up to date and evaluate its gates."""
    generation = home.registry.open_generation(home.spec(profile), run_id=run_id)
    home.store.ensure(generation)
    coverage = home.store.refresh_indexes(generation)
    ns = generation.spec.namespace
    collections = [c.name for c in home.config.collections_in(ns)]
    expected: dict[str, int] = {}
    formats = pa.array(generation_formats(generation.spec.input_format))
    for c in home.config.collections_in(ns):
        expected[c.name] = 0
        for key in c.partitions:  # a sharded collection's inputs: the sum of its shards'
            inputs = home.warehouse.read(
                "embedding_inputs", (key,), columns=["input_format", "source_id"]
            )
            if inputs is None:
                continue
            mine = pc.is_in(inputs["input_format"], formats)
            # a source with a refused input holds the rows it held (see index_rows)
            held = held_sources(home.warehouse, profile, key)
            if len(held):
                mine = pc.and_(mine, pc.invert(pc.is_in(inputs["source_id"], held)))
                expected[c.name] += home.store.count(
                    generation,
                    predicates.all_of(
                        [
                            predicates.eq("collection", c.name),
                            predicates.is_in("source_id", held.to_pylist()),
                        ]
                    ),
                )
            expected[c.name] += int(pc.sum(mine).as_py() or 0)
    actual = {
        name: home.store.count(generation, predicates.eq("collection", name))
        for name in collections
    }
    # 0 = 0 is no reconciliation when the collection has blocks to embed: its inputs in this
    # format were never built (embedding_inputs not run since the profile was added). Live
    # documents none of whose blocks is embedded (irc logs of system lines only, empty or
    # unreadable files) have none to build
    live = {name: _live_documents(home, name) for name in collections}
    empty = sorted(
        n for n in collections if live[n] and not expected[n] and _has_blocks_to_embed(home, n)
    )
    mismatched = sorted({n for n in collections if expected[n] != actual[n]} | set(empty))
    orphan_rows = coverage.rows - sum(actual.values())
    checks = [
        gates.Gate(
            "row_counts_reconcile",
            not mismatched,
            "rows per collection equal the embeddable inputs of that collection, and a "
            "collection with live documents and blocks to embed has inputs in the "
            "generation's format",
            {
                "expected_rows": sum(expected.values()),
                "actual_rows": sum(actual.values()),
                "mismatched_collections": ", ".join(mismatched),
                "live_documents": sum(live.values()),
                "collections_with_documents_but_no_inputs": ", ".join(empty),
                **(
                    {
                        "hint": f"materialize embedding_inputs for {', '.join(empty)}, then "
                        f"embeddings and index_rows for profile {profile} (input format "
                        f"{generation.spec.input_format})"
                    }
                    if empty
                    else {}
                ),
            },
        ),
        gates.Gate(
            "indexes_cover_every_row",
            coverage.within_bound,
            "the FTS and ANN indexes cover every row but a bounded tail of the newest, which "
            f"search reads exactly (none under {index_store.TAIL_ALWAYS_BELOW:,} rows; else at "
            f"most the larger of {index_store.TAIL_MIN_ROWS:,} rows and "
            f"{index_store.TAIL_SHARE:.0%} of the table)",
            {
                "fts_unindexed": coverage.fts_unindexed,
                "ann_unindexed": coverage.ann_unindexed,
                "ann": coverage.ann,
                "unindexed_bound": coverage.tail_bound,
            },
        ),
        gates.Gate(
            "no_orphan_vectors",
            orphan_rows == 0,
            "every row belongs to a collection of the namespace",
            {"orphan_rows": orphan_rows},
        ),
    ]
    eval_gate, metrics = run_eval_gate(home, generation)
    checks.append(eval_gate)
    keyed = {gates.check_key("index_generation", g.name): g.to_json() for g in checks}
    required = required_checks(home, profile)
    recorded = {**generation.checks, **keyed}
    # READY: built and every integrity gate passed; the eval gate is judged at promotion
    ready = all(
        recorded.get(name, {}).get("passed", False)
        for name in required
        if name != gates.check_key("index_generation", gates.EVAL_GATE)
    )
    # gates measured on a table that another machine's step may have written since this one
    # lost its lock are not recorded (nor the generation made READY on them)
    confirm_held()
    # the eval gate stays on record even where promotion does not require it
    home.registry.record_checks(generation.id, keyed, keep=required | set(keyed))
    generation = home.registry.record_build(
        generation.id, row_count=coverage.rows, checks={}, ready=ready
    )
    plot = eval_plot(home, ns, highlight=generation.id) if metrics else None
    return GenerationOutcome(
        generation=generation,
        coverage=coverage,
        gates=checks,
        rows_by_collection=actual,
        eval=metrics,
        eval_plot=plot,
    )


def _live_documents(home: Home, collection: str) -> int:
    """Documents of the collection's last scan (of each of its shards') that were not removed
    (0 if never scanned)."""
    live = 0
    for key in home.config.collections[collection].partitions:
        manifest = home.warehouse.read("source_manifest", (key,), columns=["change"])
        if manifest is not None:
            live += int(pc.sum(pc.not_equal(manifest["change"], "removed")).as_py() or 0)
    return live


def _has_blocks_to_embed(home: Home, collection: str) -> bool:
    """Whether the collection's parsed blocks (of any of its shards) hold one its kind embeds;
    a shard never parsed may hold some."""
    for key in home.config.collections[collection].partitions:
        blocks = home.warehouse.read("parsed_blocks", (key,), columns=["kind", "section"])
        if blocks is None:
            return True
        if blocks.num_rows and pc.any(embeddable(blocks, home.config.sections)).as_py():
            return True
    return False
