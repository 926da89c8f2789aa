"""no_rows_from_removed_documents reads the generation's table, not only the step's inputs."""

from __future__ import annotations

import pyarrow as pa

from corpus_index import steps
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
