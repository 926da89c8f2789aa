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
