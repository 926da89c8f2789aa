"""The fingerprints deletion receipts keep: a vector's prove only that vector."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from corpus_index import byte_audit
from corpus_index.embedders.hashing import HashEmbedder

SAMPLE = Path(__file__).resolve().parents[1] / "sample_corpus" / "messages"


def vector_fingerprints(vector: np.ndarray) -> set[str]:
    blob = np.asarray(vector, dtype="<f4").tobytes()
    return set(byte_audit.fingerprints(blob, min_distinct=byte_audit.VECTOR_MIN_DISTINCT_BYTES))


def test_a_dense_vector_keeps_every_fingerprint_it_may() -> None:
    rng = np.random.default_rng(7)
    for _ in range(20):
        v = rng.standard_normal(384).astype("<f4")
        assert len(vector_fingerprints(v / np.linalg.norm(v))) == byte_audit.MAX_PER_BLOB


def test_no_vector_fingerprint_of_one_text_is_found_in_anothers_vector() -> None:
    """A hashing embedder's sparse vectors share windows of zeros and repeated magnitudes:
    such windows would report a deleted text's vector inside a live one's."""
    texts = sorted(
        {
            json.loads(line)["text"]
            for path in sorted(SAMPLE.rglob("*.jsonl"))
            for line in path.read_text(encoding="utf-8").splitlines()
            if '"text"' in line
        }
    )
    assert len(texts) > 200
    for dim in (256, 384):
        blobs = [v.astype("<f4").tobytes() for v in HashEmbedder(dim).embed(texts)]
        for i, blob in enumerate(blobs):
            fps = vector_fingerprints(np.frombuffer(blob, dtype="<f4"))
            if not fps:
                continue
            others = b"\0" * 32 + b"".join(blobs[:i] + blobs[i + 1 :])
            assert not byte_audit.Needles(dict.fromkeys(fps, "vector")).find(others), (dim, i)


def test_a_dense_vector_is_found_by_its_fingerprints_in_a_lancedb_data_file(
    tmp_path: Path,
) -> None:
    """Vectors are stored plain, so a deleted row's vector is found (or proven gone) in the
    raw bytes of LanceDB's data files."""
    import lancedb
    import pyarrow as pa

    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((50, 384)).astype("<f4")
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    db = lancedb.connect(tmp_path / "lance")
    db.create_table(
        "t",
        pa.table(
            {
                "id": list(range(50)),
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 384),
            }
        ),
    )
    files = sorted((tmp_path / "lance").rglob("*.lance"))
    data = b"".join(p.read_bytes() for p in files if p.is_file())
    for v in vectors[:5]:
        fps = vector_fingerprints(v)
        assert len(fps) == byte_audit.MAX_PER_BLOB
        assert byte_audit.Needles(dict.fromkeys(fps, "vector")).find(data) == {fp[4:] for fp in fps}


def test_keyed_fingerprints_are_found_only_with_their_key() -> None:
    """A receipt's fingerprints under a key of the home: the key finds the text wherever its
    bytes lie; without it (someone holding only the receipt, guessing the text) neither the
    windows picked, nor their tags, nor their digests can be made again."""
    text = "Sarah rang at 9:40 about the seizure; her mother is on 0412 555 019, call her first."
    blob = text.encode("utf-8")
    key, other = b"k" * 32, b"o" * 32
    keyed = byte_audit.fingerprints(blob, key=key)
    assert keyed
    guessed = set(byte_audit.fingerprints(blob)) | set(byte_audit.fingerprints(blob, key=other))
    assert not set(keyed) & guessed
    assert not {fp[4:] for fp in keyed} & {fp[4:] for fp in guessed}
    haystack = b"....header...." + blob + b"....trailer...."
    found = byte_audit.Needles(dict.fromkeys(keyed, "text"), key=key).find(haystack)
    assert found == {fp[4:] for fp in keyed}
    assert byte_audit.Needles(dict.fromkeys(keyed, "text")).find(haystack) == set()
    assert byte_audit.Needles(dict.fromkeys(keyed, "text"), key=other).find(haystack) == set()
    # a vector's windows need their key too
    vector = np.random.default_rng(3).standard_normal(384).astype("<f4").tobytes()
    vec_keyed = byte_audit.fingerprints(
        vector, min_distinct=byte_audit.VECTOR_MIN_DISTINCT_BYTES, key=key
    )
    assert len(vec_keyed) == byte_audit.MAX_PER_BLOB
    assert not set(vec_keyed) & set(
        byte_audit.fingerprints(vector, min_distinct=byte_audit.VECTOR_MIN_DISTINCT_BYTES)
    )
