"""Shared fixtures: generated homes with small corpora, and environment hygiene."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("LANCE_LOG", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from corpus_index.config import Settings  # noqa: E402
from tests.corpusgen import write_home  # noqa: E402


@pytest.fixture
def home(tmp_path: Path) -> Settings:
    """A config with two tenants (3 deals each) and the hash embedder, and an empty home folder."""
    config = write_home(tmp_path)
    return Settings(config_path=config, home=tmp_path / "home")
