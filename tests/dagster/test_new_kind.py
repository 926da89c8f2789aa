"""Adding a kind is one module and one registry line: a kind written here, registered through
the public function, syncs through the real asset graph and is searchable, with no other change."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from corpus_index import kinds
from corpus_index.config import CollectionConfig, Settings
from corpus_index.home import Home
from corpus_index.kinds import FileKind, new_block
from corpus_index.lifecycle import promote
from corpus_index.records import Block, SourceDoc
from corpus_index.search import Principal, Searcher
from tests.dagster.harness import Graph, check_outcomes, metadata


class Notes(FileKind):
    """Plain-text notes (``*.note.txt``): one block per paragraph, whole paragraphs embedded."""

    name = "test_notes"
    source_types = ("note",)
    suffix = ".note.txt"

    def parse(self, collection: CollectionConfig, doc: SourceDoc, version: str) -> list[Block]:
        blocks = []
        for n, para in enumerate(p for p in doc.raw.decode("utf-8").split("\n\n") if p.strip()):
            blocks.append(
                new_block(
                    self,
                    collection,
                    doc,
                    version,
                    source_type="note",
                    section="paragraph",
                    block_key=f"paragraph/{n}",
                    content={"text": " ".join(para.split())},
                    line=1,
                )
            )
        return blocks


@pytest.fixture
def notes_kind() -> Iterator[Notes]:
    kind = Notes()
    kinds.register(kind)
    try:
        yield kind
    finally:
        kinds.unregister(kind.name)


def test_a_new_kind_syncs_end_to_end(tmp_path: Path, notes_kind: Notes) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "garden.note.txt").write_text(
        "Tomatoes need staking in June.\n\nThe pumpkin patch floods after heavy rain.\n"
    )
    (folder / "kitchen.note.txt").write_text("The oven runs twenty degrees hot.\n")
    config = tmp_path / "corpus.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "collections": {
                    "notes": {
                        "kind": notes_kind.name,
                        "path": str(folder),
                        "tenant": "home",
                        "acl_groups": ["family"],
                        "namespace": "notes",
                    }
                },
                "profiles": {"hash": {"embedder": "hash:v1-64", "namespace": "notes"}},
                "namespaces": {"notes": {"eval_gate": "off"}},  # no golden set for notes
            }
        )
    )
    settings = Settings(config_path=config, home=tmp_path / "home")
    g = Graph(settings)
    r = g.ingest("notes")
    assert r.success
    assert metadata(r, "source_manifest")["documents"] == 2
    assert metadata(r, "embedding_inputs")["inputs"] == 3
    r = g.embed("hash", "notes")
    assert r.success and all(check_outcomes(r).values())
    # a kind without flat exports: the asset is skipped and says so, its checks with it
    assert (
        metadata(r, "flat_exports")["skipped"] == "no flat exports for this profile and collection"
    )
    r = g.generation("hash")
    assert r.success and metadata(r, "index_generation")["rows"] == 3

    corpus = Home(settings)
    gen = corpus.registry.live_generation("hash")
    assert gen is not None
    promote(corpus, "notes", gen.id)
    hits = (
        Searcher(corpus)
        .search(
            "pumpkin patch floods",
            principal=Principal("home", ("family",)),
            k=1,
            mode="lexical",
            namespace="notes",
        )
        .hits
    )
    assert [(h.doc_id, h.section) for h in hits] == [("garden", "paragraph")]
    assert hits[0].excerpt == "The pumpkin patch floods after heavy rain."
    assert hits[0].provenance.chunk_ref.startswith("chunk://notes/garden/v")
