"""A generation's indexes may leave a bounded tail of its newest rows uncovered
(``index_store.tail_bound``), and search still finds those rows in every mode, through a
``doc_id`` filter, and never finds a deleted one.

Real LanceDB tables under a real home (FTS, BTREE and IVF_PQ indexes as ``refresh_indexes``
builds them); the searches go through ``Searcher`` with the tenant and ACL prefilter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from corpus_index import index_store, predicates
from corpus_index.home import Home
from corpus_index.index_store import TAIL_ALWAYS_BELOW, TAIL_MIN_ROWS, tail_bound
from corpus_index.registry import Generation
from corpus_index.search import Principal, Searcher
from tests.searchkit import scratch_home

TENANTS = {"alpha": ["a1"], "beta": ["b1"]}
ALPHA = Principal("alpha", ("a1",))
BULK = TAIL_ALWAYS_BELOW + 500
MODES = ("dense", "lexical", "hybrid")


def rows(corpus: Home, gen: Generation, start: int, n: int, *, tenant: str = "alpha") -> pa.Table:
    """``n`` rows ``doc-<start>`` on: random unit vectors and filler words, except that every
    row's text holds its own word ``tok<i>`` and a row whose index is a multiple of 97 is
    embedded from its text, so a query of that text finds it by either retriever."""
    ids = range(start, start + n)
    texts = [f"tok{i} filler words about the deal number {i % 50}" for i in ids]
    rng = np.random.default_rng(start)
    vectors = rng.standard_normal((n, gen.spec.dim)).astype("float32")
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    marked = [k for k, i in enumerate(ids) if i % 97 == 0]
    if marked:
        embedded = corpus.embedder(gen.spec.profile).embed([texts[k] for k in marked])
        vectors[marked] = np.asarray(embedded, dtype="float32")
    collection = f"{tenant}-deals"
    same = {  # the columns every row shares
        "collection": collection,
        "kind": "uw_deals",
        "source_type": "uw_block",
        "section": "property",
        "block_key": "property/0",
        "input_format": gen.spec.input_format,
        "tenant_id": tenant,
        "acl_groups": TENANTS[tenant],
        "tier": "restricted",
        "metadata": "{}",
        "backend_spec": gen.spec.backend_spec,
        "dim": gen.spec.dim,
        "normalized": True,
        "generation": gen.id,
        "namespace": gen.spec.namespace,
    }
    data: dict[str, Any] = {name: [value] * n for name, value in same.items()}
    for name, pattern in (
        ("vector_id", "v{:07d}"),
        ("chunk_ref", collection + "/doc-{:07d}#property"),
        ("source_id", collection + "/doc-{:07d}"),
        ("doc_id", "doc-{:07d}"),
    ):
        data[name] = [pattern.format(i) for i in ids]
    data["text"] = texts
    data["vector"] = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), gen.spec.dim)
    schema = index_store.vector_entry_schema(gen)
    columns = [data[f.name] if f.name in data else pa.nulls(n, f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


@pytest.fixture
def indexed(tmp_path: Path) -> tuple[Home, Generation]:
    """A home whose generation holds BULK rows (alpha's, and 500 of beta's), every index
    built by ``refresh_indexes`` and covering every row."""
    corpus = scratch_home(tmp_path, TENANTS)
    gen = corpus.registry.open_generation(corpus.spec("main"))
    table = corpus.store.ensure(gen)
    table.add(rows(corpus, gen, 0, BULK - 500))
    table.add(rows(corpus, gen, BULK - 500, 500, tenant="beta"))
    coverage = corpus.store.refresh_indexes(gen)
    assert coverage.rows == BULK and coverage.ann == "ivf_pq"
    assert coverage.fts_unindexed == coverage.ann_unindexed == 0
    return corpus, gen


def add(corpus: Home, gen: Generation, start: int, n: int, *, tenant: str = "alpha") -> None:
    corpus.store.table(gen).add(rows(corpus, gen, start, n, tenant=tenant))


def found(corpus: Home, gen: Generation, i: int, mode: str, who: Principal = ALPHA) -> list[str]:
    """The doc ids the query of row ``i``'s text finds first, as ``who``."""
    query = f"tok{i} filler words about the deal number {i % 50}"
    result = Searcher(corpus).search(
        query, principal=who, mode=mode, generation=gen.id, k=3, dedupe=False, per_doc_cap=None
    )
    return [h.doc_id for h in result.hits]


def test_the_bound_is_zero_for_small_tables_and_grows_with_large_ones() -> None:
    assert tail_bound(0) == tail_bound(TAIL_ALWAYS_BELOW - 1) == 0
    assert tail_bound(TAIL_ALWAYS_BELOW) == TAIL_MIN_ROWS
    assert tail_bound(400_000) == 4_000 and tail_bound(1_000_000) == 10_000


def test_a_small_tail_is_left_unindexed_and_found_in_every_mode(
    indexed: tuple[Home, Generation],
) -> None:
    corpus, gen = indexed
    add(corpus, gen, BULK, 300)
    version = corpus.store.table(gen).version
    coverage = corpus.store.refresh_indexes(gen)
    assert corpus.store.table(gen).version == version  # no optimize: nothing was rewritten
    assert coverage.fts_unindexed == coverage.ann_unindexed == 300
    assert coverage.tail_bound == TAIL_MIN_ROWS and coverage.within_bound
    tail = next(i for i in range(BULK, BULK + 300) if i % 97 == 0)
    head = 97 * 3  # an indexed row: both parts are searched together
    for mode in MODES:
        assert found(corpus, gen, tail, mode)[0] == f"doc-{tail:07d}", mode
        assert found(corpus, gen, head, mode)[0] == f"doc-{head:07d}", mode
    # the scalar index on doc_id leaves the tail out too, and a filter on it still finds it
    assert corpus.store.count(gen, predicates.eq("doc_id", f"doc-{tail:07d}")) == 1
    # tenancy holds over the tail: beta does not see alpha's tail row
    assert f"doc-{tail:07d}" not in found(corpus, gen, tail, "hybrid", Principal("beta", ("b1",)))


def test_a_tail_past_its_bound_is_indexed(indexed: tuple[Home, Generation]) -> None:
    corpus, gen = indexed
    add(corpus, gen, BULK, 1_500)
    assert corpus.store.refresh_indexes(gen).fts_unindexed == 1_500
    add(corpus, gen, BULK + 1_500, TAIL_MIN_ROWS - 1_500 + 1)  # one past the bound
    coverage = corpus.store.refresh_indexes(gen)
    assert coverage.fts_unindexed == coverage.ann_unindexed == 0
    last = BULK + TAIL_MIN_ROWS
    last -= last % 97
    assert found(corpus, gen, last, "lexical")[0] == f"doc-{last:07d}"


def test_small_fragments_that_pile_up_are_compacted(indexed: tuple[Home, Generation]) -> None:
    corpus, gen = indexed
    fragments = corpus.store.table(gen).stats()["fragment_stats"]["num_small_fragments"]
    for n in range(index_store.TAIL_MAX_SMALL_FRAGMENTS - fragments):  # each add makes one
        add(corpus, gen, BULK + n, 1)
        assert corpus.store.refresh_indexes(gen).fts_unindexed == n + 1
    add(corpus, gen, BULK + 100, 1)
    coverage = corpus.store.refresh_indexes(gen)
    assert coverage.fts_unindexed == coverage.ann_unindexed == 0
    stats = corpus.store.table(gen).stats()["fragment_stats"]
    assert stats["num_fragments"] <= 2


def test_under_the_size_floor_every_row_is_indexed(tmp_path: Path) -> None:
    corpus = scratch_home(tmp_path, TENANTS)
    gen = corpus.registry.open_generation(corpus.spec("main"))
    corpus.store.ensure(gen).add(rows(corpus, gen, 0, index_store.ANN_MIN_ROWS + 100))
    corpus.store.refresh_indexes(gen)
    add(corpus, gen, 10_000, 5)
    coverage = corpus.store.refresh_indexes(gen)
    assert coverage.tail_bound == 0 and coverage.fts_unindexed == coverage.ann_unindexed == 0


def test_deleted_rows_are_not_found_whether_indexed_or_in_the_tail(
    indexed: tuple[Home, Generation],
) -> None:
    corpus, gen = indexed
    add(corpus, gen, BULK, 300)
    corpus.store.refresh_indexes(gen)
    tail = next(i for i in range(BULK, BULK + 300) if i % 97 == 0)
    head = 97 * 5
    gone = [f"doc-{tail:07d}", f"doc-{head:07d}"]
    assert corpus.store.delete_where(gen, predicates.is_in("doc_id", gone)) == 2
    version = corpus.store.table(gen).version
    coverage = corpus.store.refresh_indexes(gen)
    assert corpus.store.table(gen).version == version  # a deletion does not call for optimize
    assert coverage.fts_unindexed == 300 - 1
    for mode in MODES:
        assert not set(gone) & set(found(corpus, gen, tail, mode)), mode
        assert not set(gone) & set(found(corpus, gen, head, mode)), mode
    assert corpus.store.count(gen, predicates.is_in("doc_id", gone)) == 0
