"""The embedding cache on a real LanceDB folder: content-addressed, insert-only, per model."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from corpus_index import lance
from corpus_index.cache import (
    LOOKUP_CHUNK,
    EmbeddingCache,
    cache_schema,
    exact_table_name,
    folded_table_name,
)
from corpus_index.config import Settings
from corpus_index.errors import DimensionMismatchError
from corpus_index.hashing import input_hash


def cache(
    tmp_path: Path, *, spec: str = "hash:v1-4", revision: str = "v1", dim: int = 4
) -> EmbeddingCache:
    return EmbeddingCache(str(tmp_path / "lance"), backend_spec=spec, revision=revision, dim=dim)


def vectors(n: int, dim: int = 4, *, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)


def test_put_then_lookup_returns_bit_identical_float32(tmp_path: Path) -> None:
    c = cache(tmp_path)
    hashes = [input_hash("default-v1", t) for t in ("a", "b", "c")]
    vecs = vectors(3)
    # values that a lossy round trip (float64 text, rounding) would change
    vecs[0] = [np.float32(1 / 3), np.float32(-0.0), np.float32(1e-45), np.float32(3.4028235e38)]
    assert c.put(hashes, vecs) == 3
    found = c.lookup(hashes)
    assert set(found) == set(hashes)
    for h, v in zip(hashes, vecs, strict=True):
        assert found[h].dtype == np.float32
        assert found[h].shape == (4,)
        assert found[h].tobytes() == v.tobytes()


def test_lookup_reports_only_what_is_cached(tmp_path: Path) -> None:
    c = cache(tmp_path)
    assert c.lookup(["x"]) == {}  # no table yet
    assert c.count() == 0
    c.put(["x", "y"], vectors(2))
    found = c.lookup(["y", "missing", "y", "x", "also-missing"])
    assert sorted(found) == ["x", "y"]
    assert c.lookup([]) == {}


def test_put_leaves_existing_vectors_untouched(tmp_path: Path) -> None:
    c = cache(tmp_path)
    first, second = vectors(2, seed=1), vectors(2, seed=2)
    c.put(["k1", "k2"], first)
    c.put(["k2", "k3"], second)
    found = c.lookup(["k1", "k2", "k3"])
    assert found["k1"].tobytes() == first[0].tobytes()
    assert found["k2"].tobytes() == first[1].tobytes()  # not overwritten by the second put
    assert found["k3"].tobytes() == second[1].tobytes()
    assert c.count() == 3


def test_put_with_a_repeated_key_stores_it_once(tmp_path: Path) -> None:
    c = cache(tmp_path)
    vecs = vectors(3, seed=3)
    c.put(["dup", "other", "dup"], vecs)
    assert c.count() == 2
    assert c.lookup(["dup"])["dup"].tobytes() == vecs[0].tobytes()  # the first offered wins


def test_put_of_nothing_creates_nothing(tmp_path: Path) -> None:
    c = cache(tmp_path)
    assert c.put([], np.zeros((0, 4), np.float32)) == 0
    assert c.count() == 0


@pytest.mark.parametrize(
    ("other_spec", "other_revision", "other_dim"),
    [
        ("hash:v1-8", "v1", 8),
        ("hash:v1-4", "v2", 4),
        ("openai:text-embedding-3-small@4", "text-embedding-3-small", 4),
    ],
    ids=["other backend_spec", "other revision", "other backend"],
)
def test_each_backend_and_revision_has_its_own_table(
    tmp_path: Path, other_spec: str, other_revision: str, other_dim: int
) -> None:
    a = cache(tmp_path)
    b = cache(tmp_path, spec=other_spec, revision=other_revision, dim=other_dim)
    assert a.table_name != b.table_name
    a.put(["shared-hash"], vectors(1))
    assert b.lookup(["shared-hash"]) == {}
    other = vectors(1, other_dim, seed=9)
    b.put(["shared-hash"], other)
    assert b.lookup(["shared-hash"])["shared-hash"].tobytes() == other[0].tobytes()
    assert a.lookup(["shared-hash"])["shared-hash"].tobytes() == vectors(1)[0].tobytes()
    assert (a.count(), b.count()) == (1, 1)


ALIKE = [("openai:bge-m3", "bge-m3"), ("openai:BGE.M3", "BGE.M3")]  # both fold to bge_m3


def test_two_names_that_fold_alike_have_a_table_each(tmp_path: Path) -> None:
    (spec_a, rev_a), (spec_b, rev_b) = ALIKE
    a = cache(tmp_path, spec=spec_a, revision=rev_a)
    b = cache(tmp_path, spec=spec_b, revision=rev_b)
    assert folded_table_name(spec_a, rev_a) == folded_table_name(spec_b, rev_b)
    assert a.table_name != b.table_name
    assert a.table_name.startswith("cache__openai_bge_m3__bge_m3__")
    a.put(["shared-hash"], vectors(1))
    assert b.lookup(["shared-hash"]) == {}
    b.put(["shared-hash"], vectors(1, seed=9))
    assert a.lookup(["shared-hash"])["shared-hash"].tobytes() == vectors(1)[0].tobytes()
    assert b.lookup(["shared-hash"])["shared-hash"].tobytes() == vectors(1, seed=9)[0].tobytes()
    assert (a.count(), b.count()) == (1, 1)


def _folded_table(tmp_path: Path, spec: str, revision: str) -> None:
    """A cache table as a home made before names carried a digest has it, one vector in it."""
    db = lance.connect(str(tmp_path / "lance"))
    table = db.create_table(folded_table_name(spec, revision), schema=cache_schema(4))
    table.add(
        pa.table(
            {
                "input_hash": ["old-hash"],
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors(1).ravel()), 4),
                "created_at": pa.array([dt.datetime.now(dt.UTC)], pa.timestamp("us", tz="UTC")),
            },
            schema=cache_schema(4),
        )
    )


def test_a_table_named_before_names_were_exact_stays_its_models(tmp_path: Path) -> None:
    (spec_a, rev_a), (spec_b, rev_b) = ALIKE
    _folded_table(tmp_path, spec_a, rev_a)
    # the home's generations were built with bge-m3 alone: the table is bge-m3's, kept by name
    a = EmbeddingCache(
        str(tmp_path / "lance"), backend_spec=spec_a, revision=rev_a, dim=4, claimants=ALIKE[:1]
    )
    assert a.table_name == folded_table_name(spec_a, rev_a)
    assert set(a.lookup(["old-hash"])) == {"old-hash"}
    a.claim()  # what the sync's embeddings step does: the owner recorded in the table
    # BGE.M3 added since: the table was claimed for bge-m3, BGE.M3 has a table of its own
    b = EmbeddingCache(
        str(tmp_path / "lance"), backend_spec=spec_b, revision=rev_b, dim=4, claimants=ALIKE
    )
    assert b.table_name == exact_table_name(spec_b, rev_b)
    assert b.lookup(["old-hash"]) == {}
    again = EmbeddingCache(
        str(tmp_path / "lance"), backend_spec=spec_a, revision=rev_a, dim=4, claimants=ALIKE
    )
    assert set(again.lookup(["old-hash"])) == {"old-hash"}


@pytest.mark.parametrize("claimants", [ALIKE, []], ids=["both built", "none recorded"])
def test_a_table_named_before_that_no_one_name_can_claim_is_left(
    tmp_path: Path, claimants: list[tuple[str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    _folded_table(tmp_path, *ALIKE[0])
    for spec, revision in ALIKE:
        c = EmbeddingCache(
            str(tmp_path / "lance"),
            backend_spec=spec,
            revision=revision,
            dim=4,
            claimants=claimants,
        )
        assert c.table_name == exact_table_name(spec, revision)
        assert c.lookup(["old-hash"]) == {}
    folded = folded_table_name(*ALIKE[0])
    assert sum(f"table {folded} in" in r.getMessage() for r in caplog.records) == len(ALIKE)


def test_a_second_cache_object_sees_what_the_first_stored(tmp_path: Path) -> None:
    vecs = vectors(2, seed=4)
    cache(tmp_path).put(["p", "q"], vecs)
    found = cache(tmp_path).lookup(["p", "q"])
    assert found["q"].tobytes() == vecs[1].tobytes()


def test_lookup_of_more_hashes_than_one_query_takes(tmp_path: Path) -> None:
    n = LOOKUP_CHUNK + 700
    hashes = [input_hash("default-v1", f"text {i}") for i in range(n)]
    vecs = vectors(n, seed=5)
    c = cache(tmp_path)
    for start in range(0, n, 900):  # several puts: several fragments
        c.put(hashes[start : start + 900], vecs[start : start + 900])
    missing = [input_hash("default-v1", f"absent {i}") for i in range(50)]
    found = c.lookup(missing + hashes[::-1])
    assert len(found) == n
    assert all(found[h].tobytes() == v.tobytes() for h, v in zip(hashes, vecs, strict=True))


def test_put_of_more_keys_than_one_query_takes_stores_only_the_absent(tmp_path: Path) -> None:
    n = LOOKUP_CHUNK + 500
    hashes = [input_hash("default-v1", f"text {i}") for i in range(n)]
    vecs = vectors(n, seed=6)
    c = cache(tmp_path)
    c.put(hashes[::3], vecs[::3])  # every third key, spread across both lookup chunks
    assert c.put(hashes, vectors(n, seed=7)) == n
    assert c.count() == n
    found = c.lookup(hashes)
    assert all(
        found[h].tobytes() == v.tobytes() for h, v in zip(hashes[::3], vecs[::3], strict=True)
    )


def test_a_key_stored_twice_by_racing_writers_is_still_found(tmp_path: Path) -> None:
    # two runs that both missed a key and both appended it: no merge guards that, so the
    # table may hold a key twice; lookups still find every key, however many copies
    n = LOOKUP_CHUNK + 10
    hashes = [input_hash("default-v1", f"text {i}") for i in range(n)]
    vecs = vectors(n, seed=8)
    c = cache(tmp_path)
    c.put(hashes, vecs)
    table = c._table(create=False)
    stored = table.to_arrow()
    table.delete("true")
    table.add(stored.take([i // 2 for i in range(2 * n)]))  # each row twice, side by side
    assert c.count() == 2 * n
    found = c.lookup(hashes)
    assert len(found) == n
    assert all(found[h].tobytes() == v.tobytes() for h, v in zip(hashes, vecs, strict=True))


def test_delete_removes_only_the_named_entries(tmp_path: Path) -> None:
    c = cache(tmp_path)
    assert c.delete(["nothing-yet"]) == 0
    hashes = [f"h{i}" for i in range(LOOKUP_CHUNK + 10)]
    c.put(hashes, vectors(len(hashes), seed=6))
    gone = hashes[:5] + hashes[-LOOKUP_CHUNK:]
    assert c.delete([*gone, "never-stored", hashes[0]]) == len(set(gone))
    assert c.count() == len(hashes) - len(set(gone))
    assert set(c.lookup(hashes)) == set(hashes) - set(gone)
    assert c.delete([]) == 0


def test_deleted_key_can_be_stored_again(tmp_path: Path) -> None:
    c = cache(tmp_path)
    c.put(["k"], vectors(1, seed=7))
    c.delete(["k"])
    fresh = vectors(1, seed=8)
    c.put(["k"], fresh)
    assert c.lookup(["k"])["k"].tobytes() == fresh[0].tobytes()


def test_keys_with_quotes_are_literals(tmp_path: Path) -> None:
    c = cache(tmp_path)
    keys = ["it's", "' OR '1'='1", "back\\slash"]
    c.put(keys, vectors(3, seed=10))
    assert sorted(c.lookup(["' OR '1'='1"])) == ["' OR '1'='1"]
    assert c.delete(["' OR '1'='1"]) == 1
    assert sorted(c.lookup(keys)) == sorted(["it's", "back\\slash"])


def test_a_previous_partition_lends_its_vectors_only_to_the_same_embedder(tmp_path: Path) -> None:
    import pyarrow as pa

    from corpus_index.embedders import make_embedder
    from corpus_index.embedding import (
        embed_with_cache,
        reuse_split,
        vector_matrix,
        vectors_identity,
    )

    embedder = make_embedder("hash:v1-4")
    texts = {input_hash("default-v1", t): t for t in ("a", "b", "c")}
    c = cache(tmp_path)
    first = embed_with_cache(texts, embedder, c)
    assert first.embedded == 3
    identity = vectors_identity("hash:v1-4", embedder.revision, 4)
    partition = first.to_table(4, identity=identity)
    # nothing was put in the cache: only the partition can supply these vectors
    d = input_hash("default-v1", "d")
    wanted = pa.array(sorted([*texts, d]), pa.string())
    reused, todo = reuse_split(partition, identity, wanted)
    assert reused is not None
    assert sorted(reused["input_hash"].to_pylist()) == sorted(texts)
    assert todo.to_pylist() == [d]
    assert vector_matrix(reused, 4).tobytes() == first.vectors.tobytes()
    inputs = embedder.stats.inputs
    second = embed_with_cache({d: "d"}, embedder, c)
    assert (second.embedded, second.cache_hits) == (1, 0)
    assert embedder.stats.inputs == inputs + 1  # only "d" reached the embedder
    # a hash no longer wanted is not lent
    dropped, _ = reuse_split(partition, identity, pa.array([d], pa.string()))
    assert dropped is not None and dropped.num_rows == 0
    # another model, another revision, or an untagged partition: nothing is lent
    for other_identity, table in (
        (vectors_identity("hash:v1-4", "other", 4), partition),
        (vectors_identity("hash:v1-8", embedder.revision, 8), partition),
        (identity, first.to_table(4)),
        (identity, None),
    ):
        none, all_todo = reuse_split(table, other_identity, wanted)
        assert none is None and all_todo.to_pylist() == wanted.to_pylist()


def test_misses_reach_the_embedder_longest_first_in_batches(tmp_path: Path) -> None:
    """Batches of similar length pad little: the order one big sentence-transformers call uses."""
    from corpus_index.embedders import make_embedder
    from corpus_index.embedding import embed_with_cache

    real = make_embedder("hash:v1-4")
    batches: list[list[str]] = []

    class Recording:  # the real hash embedder, with the batches it was given written down
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def embed(self, texts: list[str]) -> np.ndarray:
            batches.append(list(texts))
            return real.embed(texts)

    words = [" ".join(["w"] * n) + f" {i}" for i, n in enumerate([3, 40, 7, 1, 25, 12, 9])]
    texts = {input_hash("default-v1", t): t for t in words}
    result = embed_with_cache(texts, Recording(), cache(tmp_path), batch_size=3)  # type: ignore[arg-type]
    sent = [t for b in batches for t in b]
    assert sent == sorted(words, key=len, reverse=True)
    assert [len(b) for b in batches] == [3, 3, 1]
    by_hash = dict(zip(result.hashes, result.vectors, strict=True))
    for h, t in texts.items():  # each vector still belongs to its own text
        assert by_hash[h].tobytes() == real.embed([t])[0].astype(np.float32).tobytes()


def test_a_put_racing_another_writers_creation_of_the_table_still_stores(
    tmp_path: Path,
) -> None:
    """Two processes that find the cache table missing both create it; LanceDB commits the
    second creation as an overwrite of the first, and an append made on the first then
    conflicts with it. The put that lost is made again on the table as it now is."""
    c = cache(tmp_path)
    other = cache(tmp_path)
    opened = c._table(create=True)  # the table as this writer found it (just created)

    class Racing(EmbeddingCache):
        def _table(self, *, create: bool) -> Any:
            # the other writer's creation lands after this one opened the table
            other._db.create_table(other.table_name, schema=cache_schema(4), mode="overwrite")
            return opened

    racing = Racing(str(tmp_path / "lance"), backend_spec="hash:v1-4", revision="v1", dim=4)
    hashes = [input_hash("default-v1", t) for t in ("a", "b")]
    assert racing.put(hashes, vectors(2)) == 2
    assert set(cache(tmp_path).lookup(hashes)) == set(hashes)


def test_a_table_of_another_width_under_the_same_name_is_refused_by_name(
    tmp_path: Path,
) -> None:
    narrow = cache(tmp_path, dim=3)
    narrow.put(["a", "b"], vectors(2, 3))
    wide = cache(tmp_path, dim=4)
    with pytest.raises(DimensionMismatchError, match=f"{wide.table_name} holds .* dimension 3"):
        wide.lookup(["a", "b"])
    with pytest.raises(DimensionMismatchError):
        wide.put(["c"], vectors(1))
    assert narrow.count() == 2


def test_progress_counts_cache_hits_and_ends_at_the_total(tmp_path: Path) -> None:
    from corpus_index.embedders import make_embedder
    from corpus_index.embedding import embed_with_cache

    embedder = make_embedder("hash:v1-4")
    texts = {input_hash("default-v1", t): t for t in "abcdefg"}
    c = cache(tmp_path)
    cached = sorted(texts)[:3]
    c.put(cached, embedder.embed([texts[h] for h in cached]))
    reports: list[tuple[int, int]] = []
    result = embed_with_cache(
        texts, embedder, c, batch_size=2, progress=lambda d, t: reports.append((d, t))
    )
    assert (result.cache_hits, result.embedded) == (3, 4)
    assert reports == [(3, 7), (5, 7), (7, 7)]


def test_the_steps_progress_over_windows_with_cache_hits_ends_at_the_total(
    home: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from corpus_index import steps
    from tests.test_embedding_producers import COLLECTION, ingested

    h = ingested(home)
    spec = h.spec("main")
    inputs = h.read("embedding_inputs", (COLLECTION,)).to_pydict()
    texts = dict(zip(inputs["input_hash"], inputs["text"], strict=True))
    hashes = list(dict.fromkeys(inputs["input_hash"]))  # in the order the step takes them
    warm = EmbeddingCache(
        h.settings.lance_uri,
        backend_spec=spec.backend_spec,
        revision=spec.model_revision,
        dim=spec.dim,
    )
    hits = [hashes[0], hashes[-1]]  # one in the first window, one in the last
    warm.put(hits, h.embedder("main").embed([texts[k] for k in hits]))
    monkeypatch.setattr(steps.embeddings, "EMBED_WINDOW", len(hashes) // 2)
    reports: list[tuple[int, int]] = []
    out = steps.embeddings.run(h, "main", COLLECTION, progress=lambda d, t: reports.append((d, t)))
    assert out.passed and out.cache_hits == len(hits)
    assert len(hashes) >= 6  # two windows of three at least
    assert reports[-1] == (len(hashes), len(hashes))
    assert [d for d, _ in reports] == sorted(d for d, _ in reports)
