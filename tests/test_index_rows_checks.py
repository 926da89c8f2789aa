"""no_rows_from_removed_documents reads the generation's table, not only the step's inputs."""

from __future__ import annotations

import pyarrow as pa

from corpus_index import predicates, steps
from corpus_index.config import Settings
from corpus_index.home import Home

COLLECTION = "alpha-deals"
REMOVED = "alpha-deals/deal-alpha-000"


def synced(home: Home, run_id: str) -> steps.index_rows.IndexRowsOutcome:
    for step in (steps.source_manifest, steps.parsed_blocks, steps.embedding_inputs):
        step.run(home, COLLECTION)
    assert steps.embeddings.run(home, "main", COLLECTION, run_id=run_id).passed
    return steps.index_rows.run(home, "main", COLLECTION, run_id=run_id)


def gate(outcome: steps.index_rows.IndexRowsOutcome) -> dict[str, object]:
    (found,) = (g for g in outcome.gates if g.name == "no_rows_from_removed_documents")
    return {"passed": found.passed, **found.metadata}


def test_a_removed_documents_row_left_in_the_generation_fails_the_check(home: Settings) -> None:
    corpus = Home(home)
    assert synced(corpus, "r1").passed
    (home.config_path.parent / "sources" / "alpha" / "deal-alpha-000.uw.md").unlink()
    removed = synced(corpus, "r2")
    assert removed.passed
    assert (gate(removed)["passed"], gate(removed)["removed_document_rows"]) == (True, 0)
    generation = corpus.registry.open_generation(corpus.spec("main"), run_id="r2")
    table = corpus.store.table(generation)
    rows = table.to_arrow()
    assert REMOVED not in rows["source_id"].to_pylist()
    # a row of the removed document in the table (a writer that lost its lock, a row whose
    # source_id disagrees with its chunk_ref): the inputs know nothing of it
    planted = rows.slice(0, 1).to_pylist()[0]
    planted["source_id"], planted["vector_id"] = REMOVED, planted["vector_id"] + "-stale"
    table.add(pa.Table.from_pylist([planted], schema=rows.schema))
    out = steps.index_rows.run(corpus, "main", COLLECTION, run_id="r3")
    assert not out.passed
    assert gate(out) == {
        "passed": False,
        "removed_document_rows": 1,
        "examples": REMOVED,
        "found_in": "the generation",
    }


def test_the_rows_outside_the_live_sources_are_those_the_sql_predicate_names(
    home: Settings,
) -> None:
    """``refs_outside`` tests the sources in Arrow what a ``NOT IN`` over every live source
    (and an ``IN`` over the tombstoned ones) asked LanceDB: the same rows, with a shard's
    predicate or without."""
    corpus = Home(home)
    assert synced(corpus, "r1").passed
    generation = corpus.registry.open_generation(corpus.spec("main"), run_id="r1")
    sources = sorted(
        set(corpus.store.collection_refs(generation, COLLECTION)["source_id"].to_pylist())
    )
    assert len(sources) >= 3
    live, dead = sources[1:], sources[-1:]  # one not live, one live but tombstoned
    found = []
    shards = [predicates.in_hash_shard("source_id", k, 2) for k in range(2)]
    for where in (None, *shards):
        asked = predicates.any_of(
            [predicates.not_in("source_id", live), predicates.is_in("source_id", dead)]
        )
        scope = asked if where is None else predicates.all_of([where, asked])
        by_sql = corpus.store.collection_refs(generation, COLLECTION, where=scope)
        by_arrow = corpus.store.refs_outside(
            generation,
            COLLECTION,
            pa.array(live, pa.string()),
            also=pa.array(dead, pa.string()),
            where=where,
        )
        assert sorted(by_arrow.to_pylist(), key=str) == sorted(by_sql.to_pylist(), key=str)
        found.append(sorted(by_arrow["source_id"].to_pylist()))
    assert set(found[0]) == {sources[0], sources[-1]}
    assert sorted(found[1] + found[2]) == found[0]  # the two shards' rows are the whole's
    everything = corpus.store.refs_outside(generation, COLLECTION, pa.array([], pa.string()))
    assert everything.num_rows == corpus.store.collection_refs(generation, COLLECTION).num_rows
    none = corpus.store.refs_outside(generation, COLLECTION, pa.array(sources, pa.string()))
    assert none.num_rows == 0
