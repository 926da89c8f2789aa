"""Deciding which shards of a collection changed lists its folder once, not once a shard, and
splits the same documents among the shards as each shard's own listing does."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpus_index import kinds
from corpus_index.collection import CollectionConfig
from corpus_index.kinds import base

SHARDS = 4


def deals(root: Path, n: int) -> CollectionConfig:
    for i in range(n):
        folder = root / f"batch-{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"deal-{i:03d}.uw.md").write_text(f"deal {i}\n", encoding="utf-8")
    (root / "notes.txt").write_text("not a deal\n", encoding="utf-8")
    return CollectionConfig(
        name="deals", kind="uw_deals", path=root, tenant="t", acl_groups=("g",), shards=SHARDS
    )


def test_one_listing_serves_every_shard_with_what_its_own_listing_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    collection = deals(tmp_path, 40)
    alone = [kinds.list_documents(part) for part in collection.parts]
    calls: list[Path] = []
    real = base.list_files

    def counted(root: Path, suffix: str) -> list[tuple[str, str]]:
        calls.append(root)
        return real(root, suffix)

    monkeypatch.setattr(base, "list_files", counted)
    with kinds.one_listing():
        shared = [kinds.list_documents(part) for part in collection.parts]
        fingerprints = [kinds.fingerprint(part) for part in collection.parts]
    assert calls == [tmp_path]  # one listing for the four shards, fingerprints included
    assert shared == alone
    assert sorted(d for docs in shared for d in docs) == sorted(
        kinds.list_documents(collection)
    )  # disjoint shards, together the whole collection
    assert fingerprints == [kinds.fingerprint(part) for part in collection.parts]
    # outside the block every call lists again: a file added now is seen at once
    (tmp_path / "deal-new.uw.md").write_text("new\n", encoding="utf-8")
    calls.clear()
    assert sum(len(kinds.list_documents(part)) for part in collection.parts) == 41
    assert len(calls) == SHARDS
