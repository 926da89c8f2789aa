"""The embeddings step's per-vector checks look at the vectors themselves."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pytest

from corpus_index import steps
from corpus_index.cache import EmbeddingCache
from corpus_index.config import Settings
from corpus_index.embedders.hashing import HashEmbedder
from corpus_index.embedding import vector_matrix
from tests.test_embedding_producers import COLLECTION, ingested
from tests.test_embedding_producers import gate_of as gate


class AnswersNarrower(HashEmbedder):
    """A model whose table entry says 64 wide (so the profile's dim is 64) but whose weights
    answer 48-wide vectors."""

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return HashEmbedder(48).embed(texts)


def test_the_dim_check_records_the_width_the_vectors_came_at(
    home: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = ingested(home)
    narrower = AnswersNarrower(64)
    monkeypatch.setattr(h, "embedder", lambda _profile: narrower)
    assert h.spec("main").dim == 64
    out = steps.embeddings.run(h, "main", COLLECTION)
    assert not out.passed
    assert gate(out, "vectors_have_profile_dim") == {
        "passed": False,
        "expected_dim": 64,
        "actual_dim": 48,
    }
    assert h.warehouse.read("embeddings", ("main", COLLECTION)) is None


def test_a_cache_table_of_another_width_fails_the_dim_check_naming_it(home: Settings) -> None:
    h = ingested(home)
    spec = h.spec("main")
    hashes = sorted(set(h.read("embedding_inputs", (COLLECTION,))["input_hash"].to_pylist()))
    # a table under the profile's model and revision, written when it was configured 48 wide
    narrow = EmbeddingCache(
        h.settings.lance_uri, backend_spec=spec.backend_spec, revision=spec.model_revision, dim=48
    )
    narrow.put(hashes, HashEmbedder(48).embed(hashes))
    out = steps.embeddings.run(h, "main", COLLECTION)
    dim = gate(out, "vectors_have_profile_dim")
    assert not out.passed and dim["passed"] is False
    assert narrow.table_name in str(dim["error"]) and "dimension 48" in str(dim["error"])
    assert h.warehouse.read("embeddings", ("main", COLLECTION)) is None


@pytest.mark.parametrize("damage", ["off-norm", "nan"])
def test_a_damaged_partition_the_step_lends_from_fails_the_per_vector_checks(
    home: Settings, damage: str
) -> None:
    h = ingested(home)
    assert steps.embeddings.run(h, "main", COLLECTION, run_id="r1").passed
    key = ("embeddings", ("main", COLLECTION))
    part = h.warehouse.read(*key)
    assert part is not None
    m = vector_matrix(part, 64).copy()
    m[0] = m[0] * 2.0 if damage == "off-norm" else np.nan  # the file's metadata kept
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(m.ravel(), pa.float32()), 64)
    h.warehouse.write(
        *key, pa.table({"input_hash": part["input_hash"], "vector": vectors}, schema=part.schema)
    )
    out = steps.embeddings.run(h, "main", COLLECTION, run_id="r2")
    assert out.cache_hits == out.inputs and out.embedded == 0  # every vector lent
    failed = {g.name: g.metadata for g in out.gates if not g.passed}
    if damage == "off-norm":
        assert failed == {"vector_norms_match_profile": {"vectors_off_norm": 1}}
    else:
        assert failed["vectors_are_finite"]["non_finite_vectors"] == 1
