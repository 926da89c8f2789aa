"""The offline MiniLM embedder, for real, on a few texts."""

from __future__ import annotations

import numpy as np
import pytest

from corpus_index.embedders import make_embedder

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
