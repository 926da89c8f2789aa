"""vectors_share_one_backend_spec checks the producer recorded for every window of vectors."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from corpus_index import steps
from corpus_index.cache import EmbeddingCache
from corpus_index.config import Settings
from corpus_index.embedders.hashing import HashEmbedder
from corpus_index.home import Home

COLLECTION = "alpha-deals"


class SwappedWeights(HashEmbedder):
    """A backend whose answers come from other weights than it declared when the generation
    was opened (a server that swapped its model): after each call it reports what answered."""

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        vectors = super().embed(texts)
        self.revision = "swapped-weights"
        return vectors


def ingested(settings: Settings) -> Home:
    home = Home(settings)
    steps.source_manifest.run(home, COLLECTION)
    steps.parsed_blocks.run(home, COLLECTION)
    steps.embedding_inputs.run(home, COLLECTION)
    return home


def gate_of(
    outcome: steps.embeddings.EmbeddingsOutcome, name: str = "vectors_share_one_backend_spec"
) -> dict[str, object]:
    """The outcome of the step's check ``name`` (the producer check by default), as a dict."""
    (gate,) = (g for g in outcome.gates if g.name == name)
    return {"passed": gate.passed, **gate.metadata}


def test_vectors_from_another_revision_fail_the_gate_and_reach_no_store(
    home: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = ingested(home)
    swapped = SwappedWeights(64)
    monkeypatch.setattr(h, "embedder", lambda _profile: swapped)
    spec = h.spec("main")
    assert spec.model_revision == "v1"  # what the generation records, before any call
    out = steps.embeddings.run(h, "main", COLLECTION)
    gate = gate_of(out)
    assert not out.passed and gate["passed"] is False
    assert gate["vectors_from_other_embedders"] == out.inputs > 0
    assert gate["produced_by"] == f"hash:v1-64 swapped-weights: {out.inputs}"
    # the per-vector checks pass (the vectors are well formed): only the producer check sees it
    assert all(g.passed for g in out.gates if g.name != "vectors_share_one_backend_spec")
    # nothing committed, nothing cached under the generation's identity
    assert h.warehouse.read("embeddings", ("main", COLLECTION)) is None
    cache = EmbeddingCache(
        h.settings.lance_uri, backend_spec=spec.backend_spec, revision="v1", dim=spec.dim
    )
    assert cache.count() == 0


def test_fresh_cached_and_lent_vectors_each_name_their_producer(home: Settings) -> None:
    h = ingested(home)
    fresh = steps.embeddings.run(h, "main", COLLECTION)
    n = fresh.inputs
    assert fresh.passed and gate_of(fresh)["produced_by"] == f"hash:v1-64 v1: {n}"
    # lent by the partition as last written (its recorded identity)
    lent = steps.embeddings.run(h, "main", COLLECTION)
    assert lent.passed and lent.embedded == 0
    assert gate_of(lent) == {
        "passed": True,
        "produced_by": f"hash:v1-64 v1: {n}",
        "vectors_from_other_embedders": 0,
    }
    # from the cache table (its identity), once the partition is gone
    h.warehouse.path("embeddings", "main", COLLECTION).unlink()
    cached = steps.embeddings.run(h, "main", COLLECTION)
    assert cached.passed and (cached.embedded, cached.cache_hits) == (0, n)
    assert gate_of(cached)["produced_by"] == f"hash:v1-64 v1: {n}"


def test_cache_hits_of_another_model_fail_the_gate_when_embedded_again(home: Settings) -> None:
    h = ingested(home)
    spec = h.spec("main")
    # a stale or foreign cache under the profile's model and revision: unit vectors of no model
    hashes = sorted(set(h.read("embedding_inputs", (COLLECTION,))["input_hash"].to_pylist()))
    foreign = np.random.default_rng(7).normal(size=(len(hashes), spec.dim)).astype(np.float32)
    foreign /= np.linalg.norm(foreign, axis=1, keepdims=True)
    cache = EmbeddingCache(
        h.settings.lance_uri,
        backend_spec=spec.backend_spec,
        revision=spec.model_revision,
        dim=spec.dim,
    )
    cache.put(hashes, foreign)
    out = steps.embeddings.run(h, "main", COLLECTION)
    assert (out.embedded, out.cache_hits) == (0, out.inputs)
    gate = gate_of(out)
    # recorded as the cache table's producer, which is the generation's: only the vectors
    # embedded again show what they are
    assert gate["vectors_from_other_embedders"] == 0
    assert gate["passed"] is False and not out.passed
    assert gate["cache_hits_embedded_again"] == steps.embeddings.CACHE_HITS_AGAIN
    assert gate["cache_hits_not_reproduced"] == steps.embeddings.CACHE_HITS_AGAIN
    assert h.warehouse.read("embeddings", ("main", COLLECTION)) is None
    # the model's own vectors in the cache: the same hits are reproduced
    cache.delete(hashes)
    cache.put(hashes, h.embedder("main").embed([texts_of(h)[x] for x in hashes]))
    again = steps.embeddings.run(h, "main", COLLECTION)
    assert again.passed and again.cache_hits == again.inputs
    assert gate_of(again)["cache_hits_not_reproduced"] == 0
    assert gate_of(again)["min_cache_hit_cosine"] >= 0.99  # type: ignore[operator]


def texts_of(h: Home) -> dict[str, str]:
    inputs = h.read("embedding_inputs", (COLLECTION,))
    return dict(zip(inputs["input_hash"].to_pylist(), inputs["text"].to_pylist(), strict=True))
