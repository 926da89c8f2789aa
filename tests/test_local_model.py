"""The offline MiniLM embedder, for real, on a few texts."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import time
from pathlib import Path

import numpy as np
import pytest

from corpus_index.cache import EmbeddingCache
from corpus_index.embedders import local, make_embedder
from corpus_index.embedders.local import weights_revision
from corpus_index.embedders.weights import MEMO_NAME, RECENT_NS
from corpus_index.embedding import embed_with_cache
from corpus_index.hashing import input_hash

pytestmark = pytest.mark.model


def test_minilm_embeds_offline_with_meaning() -> None:
    e = make_embedder("st:all-MiniLM-L6-v2")
    assert e.backend_spec == "st:all-MiniLM-L6-v2" and e.dim == 384 and e.normalized
    texts = [
        "The roof and boilers are at the end of their useful life.",
        "Major building systems need immediate capital repairs.",
        "The sponsor has a long record of hotel operations.",
    ]
    v = e.embed(texts)
    assert v.shape == (3, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-3)
    assert float(v[0] @ v[1]) > float(v[0] @ v[2]) + 0.1
    assert np.array_equal(e.embed(texts[:1])[0], v[0]) or np.allclose(
        e.embed(texts[:1])[0], v[0], atol=1e-5
    )
    assert e.revision != "unknown"


def test_loading_the_model_prints_no_progress_bar_and_the_cli_says_so_once() -> None:
    """transformers' "Loading weights" bar is off; the CLI's note is one line per process."""
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "from corpus_index.cli.app import announce_model_loading\n"
        "from corpus_index.embedders import make_embedder\n"
        "announce_model_loading()\n"
        "e = make_embedder('st:all-MiniLM-L6-v2')\n"
        "e.embed(['first search']); e.embed(['second search'])\n"
        "make_embedder('st:all-MiniLM-L6-v2').embed(['third'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    assert "Loading weights" not in out.stderr
    assert out.stderr.count("loading model all-MiniLM-L6-v2 (first search)") == 1, out.stderr


def _scale_tensor(weights: Path, name: str, factor: float) -> None:
    """Scale one tensor of a safetensors file in place: other values, the same size."""
    with weights.open("r+b") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        start, end = json.loads(fh.read(length))[name]["data_offsets"]
        fh.seek(8 + length + start)
        values = np.frombuffer(fh.read(end - start), dtype=np.float32) * np.float32(factor)
        fh.seek(8 + length + start)
        fh.write(values.astype(np.float32).tobytes())


def test_weights_of_the_same_size_with_other_values_are_another_revision_and_miss_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped = make_embedder("st:all-MiniLM-L6-v2")
    # the weights the package ships keep the revision homes built from them recorded
    assert shipped.revision == "383e88ff6394"
    copy = tmp_path / "model"
    shutil.copytree(local.model_path("all-MiniLM-L6-v2"), copy)
    monkeypatch.setattr(local, "model_path", lambda name: str(copy))
    assert make_embedder("st:all-MiniLM-L6-v2").revision == shipped.revision  # same bytes
    weights = copy / "model.safetensors"
    size = weights.stat().st_size
    _scale_tensor(weights, "encoder.layer.5.output.dense.weight", 0.5)
    assert weights.stat().st_size == size
    tuned = make_embedder("st:all-MiniLM-L6-v2")
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    assert tuned.revision == digest[:12] != shipped.revision

    texts = {input_hash("default-v1", t): t for t in ("roof and boilers", "hotel sponsor")}
    hashes = sorted(texts)
    lance_uri = str(tmp_path / "lance")
    before = embed_with_cache(texts, shipped, None)
    old = EmbeddingCache(
        lance_uri, backend_spec=shipped.backend_spec, revision=shipped.revision, dim=384
    )
    old.put(before.hashes, before.vectors)
    cache = EmbeddingCache(
        lance_uri, backend_spec=tuned.backend_spec, revision=tuned.revision, dim=384
    )
    after = embed_with_cache(texts, tuned, cache)
    assert after.cache_hits == 0 and after.embedded == 2
    assert after.producers == {(tuned.backend_spec, tuned.revision): 2}
    assert not np.allclose(after.vectors, before.vectors, atol=1e-3)
    assert set(old.lookup(hashes)) == set(hashes)  # the shipped weights' vectors stay theirs


def test_the_weights_digest_is_remembered_until_the_file_changes(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    weights = model / "model.safetensors"
    weights.write_bytes(b"\x00" * 64 + b"first values")
    memo = tmp_path / "home" / MEMO_NAME
    memo.parent.mkdir()
    assert weights_revision(str(model), digests=memo) == sha(weights)[:12]
    assert not memo.exists()  # changed just now: not remembered yet
    time.sleep(RECENT_NS / 1e9)
    assert weights_revision(str(model), digests=memo) == sha(weights)[:12]
    (entry,) = json.loads(memo.read_text())["files"].values()
    assert entry["sha256"] == sha(weights) and entry["size"] == weights.stat().st_size
    assert [p.name for p in memo.parent.iterdir()] == [MEMO_NAME]  # written by a rename

    # an unchanged file is not read again: the memo answers (here a digest put in by hand)
    entry["sha256"] = "ab" * 32
    memo.write_text(json.dumps({"files": {str(weights.resolve()): entry}}))
    assert weights_revision(str(model), digests=memo) == "ab" * 6

    # the same size, other values: the file's stamp moved, so it is hashed again
    weights.write_bytes(b"\x00" * 64 + b"other values")
    time.sleep(RECENT_NS / 1e9)
    assert weights_revision(str(model), digests=memo) == sha(weights)[:12] != "ab" * 6
    (entry,) = json.loads(memo.read_text())["files"].values()
    assert entry["sha256"] == sha(weights)

    # a memo that is no JSON is rewritten; one that cannot be written is left, and computed
    memo.write_text("{not json")
    assert weights_revision(str(model), digests=memo) == sha(weights)[:12]
    assert json.loads(memo.read_text())["files"]
    missing = tmp_path / "no-home" / MEMO_NAME  # no home folder yet: none is made for it
    assert weights_revision(str(model), digests=missing) == sha(weights)[:12]
    assert not missing.parent.exists()
    blocked = tmp_path / "file" / MEMO_NAME
    blocked.parent.write_text("a file where the home folder should be")
    assert weights_revision(str(model), digests=blocked) == sha(weights)[:12]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
