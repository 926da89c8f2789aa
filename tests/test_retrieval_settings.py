"""A namespace's retrieval settings: the one default, overrides only where corpus.yaml declares them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from corpus_index.config import load_config
from corpus_index.errors import ConfigError
from corpus_index.retrieval_settings import DEFAULT_RETRIEVAL, RetrievalSettings


def write(tmp_path: Path, retrieval: Any = None) -> Path:
    (tmp_path / "docs").mkdir(exist_ok=True)
    ns: dict[str, Any] = {"eval_gate": "off"}
    if retrieval is not None:
        ns["retrieval"] = retrieval
    config = {
        "collections": {
            "notes": {
                "kind": "beir",
                "path": str(tmp_path / "docs"),
                "tenant": "t",
                "acl_groups": ["g"],
                "namespace": "tuned",
            },
            "other": {
                "kind": "beir",
                "path": str(tmp_path / "docs"),
                "tenant": "t",
                "acl_groups": ["g"],
                "namespace": "plain",
            },
        },
        "profiles": {"main": {"embedder": "hash:v1-64", "namespace": "tuned"}},
        "namespaces": {"tuned": ns},
    }
    path = tmp_path / "corpus.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def test_the_default_is_zscore_with_one_rocchio_round() -> None:
    assert DEFAULT_RETRIEVAL.to_json() == {
        "fusion": "zscore",
        "dense_weight": 1.0,
        "lexical_weight": 1.0,
        "rrf_k": 60,
        "feedback_docs": 1,
        "feedback_beta": 0.5,
        "feedback_from": "document",
    }
    assert DEFAULT_RETRIEVAL.feedback
    assert not RetrievalSettings(fusion="rrf", feedback_docs=0).feedback


def test_every_namespace_gets_the_default_unless_declared(tmp_path: Path) -> None:
    config = load_config(write(tmp_path))
    for ns in config.namespaces.values():
        assert ns.retrieval == DEFAULT_RETRIEVAL and not ns.retrieval_declared


def test_a_declared_override_changes_only_its_namespace(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, {"fusion": "rrf", "feedback_docs": 0, "rrf_k": 20}))
    tuned, plain = config.namespaces["tuned"], config.namespaces["plain"]
    assert tuned.retrieval_declared and tuned.retrieval == RetrievalSettings(
        fusion="rrf", feedback_docs=0, rrf_k=20
    )
    assert plain.retrieval == DEFAULT_RETRIEVAL and not plain.retrieval_declared
    config = load_config(write(tmp_path, {"feedback_from": "chunk"}))
    assert config.namespaces["tuned"].retrieval == RetrievalSettings(feedback_from="chunk")
    assert plain.retrieval == DEFAULT_RETRIEVAL and not plain.retrieval_declared


@pytest.mark.parametrize(
    ("retrieval", "message"),
    [
        ({"fusion": "borda"}, r"namespaces\.tuned\.retrieval: fusion must be one of"),
        ({"fusoin": "rrf"}, r"namespaces\.tuned\.retrieval\.fusoin: unknown key"),
        ({"feedback_docs": 1.5}, r"namespaces\.tuned\.retrieval: feedback_docs must be an integer"),
        ({"dense_weight": "high"}, r"dense_weight must be a number"),
        ({"dense_weight": 0, "lexical_weight": 0}, r"not both 0"),
        ({"feedback_beta": -1}, r"feedback_beta must be a number >= 0"),
        ({"feedback_from": "section"}, r"feedback_from must be one of document, chunk"),
        ({"feedback_from": 1}, r"feedback_from must be a string"),
        ("rrf", r"namespaces\.tuned\.retrieval: expected a mapping"),
    ],
)
def test_bad_settings_name_the_file_and_key(tmp_path: Path, retrieval: Any, message: str) -> None:
    path = write(tmp_path, retrieval)
    with pytest.raises(ConfigError, match=message) as err:
        load_config(path)
    assert str(path) in str(err.value)
