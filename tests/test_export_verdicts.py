"""The three probe verdicts of seed "Embeddings" §3.1 with three real embedders: the export's
own model (verified), the same model with its weights quantized to 5 bits (degraded: cosine
0.9-0.99), and a different embedder (incompatible, and no search across models, §7)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from click.testing import CliRunner

from corpus_index.cli import main
from corpus_index.embedders import make_embedder
from corpus_index.embedders.base import EmbedStats
from corpus_index.embedders.local import model_path
from corpus_index.errors import IncompatibleEmbedderError
from corpus_index.export_reader import load_export, probe_verdict, search_blob
from corpus_index.flat_blob import write_export
from corpus_index.flat_exports import PROBE_TEXT

pytestmark = pytest.mark.model

MODEL = "st:all-MiniLM-L6-v2"
CHUNKS = [
    "Coral reef restoration with heat-tolerant symbionts.",
    "Bayesian models of language acquisition in toddlers.",
    "Rent control and housing supply in mid-sized cities.",
]


class QuantizedMiniLM:
    """MiniLM as a consumer might run it: the same model, its linear layers' weights rounded to
    ``bits`` bits per row (a low-precision build), announcing the same backend_spec."""

    backend_spec = MODEL
    dim = 384
    normalized = True

    def __init__(self, bits: int) -> None:
        import torch
        from sentence_transformers import SentenceTransformer

        self.revision = f"{bits}-bit weights"
        self.stats = EmbedStats()
        self.model = SentenceTransformer(model_path("all-MiniLM-L6-v2"), device="cpu")
        with torch.no_grad():
            for layer in self.model.modules():
                if isinstance(layer, torch.nn.Linear):
                    w = layer.weight
                    step = w.abs().amax(dim=1, keepdim=True) / (2 ** (bits - 1) - 1)
                    layer.weight.copy_(torch.round(w / step) * step)

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        vectors = self.model.encode(list(texts), normalize_embeddings=True)
        return np.asarray(vectors, dtype=np.float32)


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("verdicts") / "embeddings"
    model = make_embedder(MODEL)
    write_export(
        folder,
        backend_spec=MODEL,
        vectors=model.embed(CHUNKS),
        rows=[0, 1, 2],
        row_key="chunk_index",
        normalized=False,
        probe={"text": PROBE_TEXT, "vector": model.embed([PROBE_TEXT])[0].tolist()},
        chunks=[
            {"source_type": "expertise", "source_id": f"people/r{i}/expertise.md",
             "chunk_index": i, "section": None, "char_count": len(c)}
            for i, c in enumerate(CHUNKS)
        ],
    )  # fmt: skip
    return folder


def test_the_same_model_verifies_and_searches(export: Path) -> None:
    loaded = load_export(str(export))
    verdict = probe_verdict(loaded, make_embedder(MODEL))
    assert verdict.verdict == "verified" and verdict.similarity is not None
    assert verdict.similarity > 0.999
    hits = search_blob(loaded, "children learning words", embedder=make_embedder(MODEL), k=1)
    assert [h.source_id for h in hits] == ["people/r1/expertise.md"]


def test_a_quantized_build_of_the_model_is_degraded_but_usable(export: Path) -> None:
    loaded = load_export(str(export))
    quantized = QuantizedMiniLM(bits=5)
    verdict = probe_verdict(loaded, quantized)
    assert verdict.verdict == "degraded", verdict
    assert verdict.similarity is not None and 0.9 <= verdict.similarity <= 0.99
    hits = search_blob(loaded, "restoring coral reefs", embedder=quantized, k=1)
    assert [h.source_id for h in hits] == ["people/r0/expertise.md"]


def test_a_different_embedder_is_incompatible_and_may_not_search(export: Path) -> None:
    loaded = load_export(str(export))
    other = make_embedder("hash:v1-384")  # same dimension, another embedder
    verdict = probe_verdict(loaded, other)
    assert verdict.verdict == "incompatible" and not verdict.same_backend_spec
    assert verdict.similarity is not None and verdict.similarity < 0.9
    with pytest.raises(IncompatibleEmbedderError, match="cosine across models is meaningless"):
        search_blob(loaded, "housing", embedder=other)
    result = CliRunner().invoke(
        main, ["export", "verify", str(export), "--model", "hash:v1-384", "--json"]
    )
    assert result.exit_code == 1
    assert json.loads(result.output)["verdict"] == "incompatible"
