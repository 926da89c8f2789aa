"""Helpers for the search tests: homes built with the library's own pipeline steps.

``build_home`` runs the same ``Home`` steps the Dagster assets call (manifest, parse, inputs,
embeddings, index rows, generation) in-process, without starting Dagster, then promotes the
generation as ``corpus promote`` does, so a test gets a real LanceDB generation with its FTS index
in a few seconds. Tests of ``corpus sync`` itself use the Dagster path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml

from corpus_index import lifecycle, steps
from corpus_index.config import Settings
from corpus_index.home import Home
from corpus_index.kinds import kind_of
from corpus_index.registry import Generation

ROOT = Path(__file__).resolve().parents[1]


def build_home(settings: Settings, *, promote: bool = True, run_id: str = "test-run") -> Home:
    """Materialize every collection and profile of ``settings`` and (by default) promote."""
    corpus = Home(settings)
    for name, collection in corpus.config.collections.items():
        steps.source_manifest.run(corpus, name)
        steps.parsed_blocks.run(corpus, name)
        if kind_of(collection).grouped:
            steps.linked_groups.run(corpus, name)
        steps.embedding_inputs.run(corpus, name)
    for profile in corpus.config.profiles:
        for name in corpus.config.collections:
            if corpus.config.profile_covers(profile, name):
                steps.embeddings.run(corpus, profile, name)
                steps.index_rows.run(corpus, profile, name, run_id=run_id)
        outcome = steps.index_generation.run(corpus, profile, run_id=run_id)
        assert outcome.generation.status in ("READY", "ACTIVE"), outcome.gates
        if promote:
            lifecycle.promote(corpus, outcome.generation.spec.namespace, outcome.generation.id)
    return corpus


def sample_config(root: Path, *, embedder: str = "hash:v1-256") -> Path:
    """The bundled sample deals (both tenants; not the messages sample, a namespace of its
    own) with a fast embedder; returns corpus.yaml."""
    return _bundled(root, "uw_deals", "main", "deals", embedder)


def messages_config(root: Path, *, embedder: str = "hash:v1-256") -> Path:
    """The bundled messages sample (both tenants, namespace ``messages``) with a fast
    embedder; returns corpus.yaml."""
    return _bundled(root, "messages", "msgs", "messages", embedder)


def _bundled(root: Path, kind: str, profile: str, namespace: str, embedder: str) -> Path:
    """The bundled collections of ``kind`` under one profile, with no eval gate (no golden
    set here)."""
    config = yaml.safe_load((ROOT / "corpus.yaml").read_text())
    config["collections"] = {
        name: c for name, c in config["collections"].items() if c["kind"] == kind
    }
    for c in config["collections"].values():
        c["path"] = str(ROOT / c["path"])
    config["profiles"] = {profile: {"embedder": embedder, "namespace": namespace}}
    config["namespaces"] = {namespace: {"eval_gate": "off"}}
    path = root / "corpus.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def active(corpus: Home, namespace: str = "deals") -> Generation:
    gen = corpus.registry.active(namespace)
    assert gen is not None
    return gen


def all_rows(corpus: Home, namespace: str = "deals") -> list[dict[str, Any]]:
    """Every row of the ACTIVE generation (the oracle the tests compare searches with)."""
    table = corpus.store.table(active(corpus, namespace))
    return [r for r in table.to_arrow().drop_columns(["vector"]).to_pylist()]


# -- hand-made generations for property tests -------------------------------------------------


@dataclass(frozen=True)
class Doc:
    """One document of a generated corpus: its scope, promoted metadata and section texts."""

    collection: str
    tenant: str
    acl: tuple[str, ...]
    doc_id: str
    sections: tuple[tuple[str, str], ...]
    deal_id: str | None = None
    asset_class: str | None = None
    state: str | None = None
    metro: str | None = None
    units: int | None = None
    deal_date: str | None = None


def chunk_ref_of(doc: Doc, section: str) -> str:
    return f"chunk://{doc.collection}/{doc.doc_id}/v0/{section}/0"


def write_generation(corpus: Home, gen: Generation, docs: list[Doc]) -> list[dict[str, Any]]:
    """Replace ``gen``'s table with one row per document section, embedded with the
    generation's own embedder, and build its FTS index; returns the rows (without vectors).

    This bypasses parsing so a test can put any value (hostile, odd scope) into any column.
    """
    from lancedb.index import FTS

    from corpus_index.hashing import sha256_hex
    from corpus_index.index_store import PROMOTED_COLUMNS, vector_entry_schema

    spec = gen.spec
    rows: list[dict[str, Any]] = []
    for d in docs:
        for section, text in d.sections:
            ref = chunk_ref_of(d, section)
            row: dict[str, Any] = {
                "vector_id": "v" + sha256_hex(ref.encode())[:24],
                "chunk_ref": ref,
                "source_id": f"{d.collection}/{d.doc_id}",
                "collection": d.collection,
                "doc_id": d.doc_id,
                "source_version": "0" * 16,
                "kind": "uw_deals",
                "source_type": "uw_block",
                "section": section,
                "block_key": f"{section}/0",
                "content_hash": "sha256:" + sha256_hex(f"{section}\n{text}".encode()),
                "input_format": spec.input_format,
                "input_hash": sha256_hex(text.encode()),
                "text": text,
                "tenant_id": d.tenant,
                "acl_groups": list(d.acl),
                "tier": "restricted",
                "language": "en",
                "event_date": d.deal_date,
                "metadata": "{}",
                "backend_spec": spec.backend_spec,
                "dim": spec.dim,
                "normalized": spec.normalized,
                "generation": gen.id,
                "namespace": spec.namespace,
                "run_id": "property-test",
            }
            for name, _ in PROMOTED_COLUMNS:
                row[name] = getattr(d, name, None)
            rows.append(row)
    vectors = corpus.embedder(spec.profile).embed([r["text"] for r in rows])
    schema = vector_entry_schema(gen)
    table = pa.Table.from_pylist(
        [{**r, "vector": v.tolist()} for r, v in zip(rows, vectors, strict=True)], schema=schema
    )
    lance_table = corpus.store.db.create_table(gen.table_name, table, mode="overwrite")
    lance_table.create_index("text", config=FTS(with_position=False), replace=True)
    return rows


def scratch_home(root: Path, tenants: dict[str, list[str]], *, dim: int = 32) -> Home:
    """A home whose config declares one ``<tenant>-deals`` collection per tenant in namespace
    ``deals``, plus ``alpha-other`` in namespace ``other``; nothing is ingested."""
    collections: dict[str, Any] = {}
    for tenant, groups in tenants.items():
        (root / "sources" / tenant).mkdir(parents=True, exist_ok=True)
        collections[f"{tenant}-deals"] = {
            "kind": "uw_deals",
            "path": f"sources/{tenant}",
            "tenant": tenant,
            "acl_groups": groups,
            "namespace": "deals",
        }
    (root / "sources" / "other").mkdir(parents=True, exist_ok=True)
    first = next(iter(tenants))
    collections[f"{first}-other"] = {
        "kind": "uw_deals",
        "path": "sources/other",
        "tenant": first,
        "acl_groups": tenants[first],
        "namespace": "other",
    }
    config = {
        "collections": collections,
        "profiles": {"main": {"embedder": f"hash:v1-{dim}", "namespace": "deals"}},
        "namespaces": {"deals": {"eval_gate": "off"}, "other": {"eval_gate": "off"}},
    }
    path = root / "corpus.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return Home(Settings(config_path=path, home=root / "home"))
