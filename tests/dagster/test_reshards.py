"""Re-shards that keep their partition keys (3 shards to 4: documents move, none of the keys
goes), one cut short and retried, and a file deleted during a re-shard that drops partitions.

Each test builds a generated home of its own (two tenants, hash embedder) with the helpers of
``test_shards``; kept apart from that module so that its long module-scoped homes and these
run on different workers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from corpus_index.config import Settings
from corpus_index.errors import ConfigError
from corpus_index.home import Home
from corpus_index.shards import partition_key, shard_of
from corpus_index.sources import live_documents
from definitions import dagster_runner
from pipelines.sync import PENDING_RESHARDS, pending_reshards
from tests.dagster.test_shards import (
    COLLECTIONS,
    _home,
    _set_shards,
    _sync_and_promote,
    dynamic_partitions,
)

pytestmark = pytest.mark.slow


THREE_TO_FOUR = {
    name: {
        "from": [partition_key(name, n, 3) for n in range(3)],
        "to": [partition_key(name, n, 4) for n in range(4)],
        "dropped": [],
    }
    for name in COLLECTIONS
}


def test_a_reshard_from_three_to_four_moves_documents_and_deletes_only_the_removed_one(
    tmp_path: Path,
) -> None:
    """From 3 shards to 4 the partition keys ``~00``..``~02`` stay, each now owning other
    documents: those that moved are no deletion (no tombstone, their rows stay in the ACTIVE
    generation), and one whose file went meanwhile is deleted from every store."""
    settings = _home(tmp_path, 3)
    _sync_and_promote(settings)
    home = Home(settings)
    gen = home.registry.active("deals")
    assert gen is not None
    table = home.store.table(gen).to_arrow()
    rows_of = {
        s: table["source_id"].to_pylist().count(s) for s in set(table["source_id"].to_pylist())
    }
    moved = [s for s in rows_of if shard_of(s, 3) != shard_of(s, 4)]
    assert moved  # the test means something only if documents change shard
    gone = "alpha-deals/deal-alpha-004"
    assert (shard_of(gone, 3), shard_of(gone, 4)) == (0, 3)
    (settings.config_path.parent / "sources" / "alpha" / "deal-alpha-004.uw.md").unlink()

    _set_shards(settings.config_path, 4)
    said: list[str] = []
    report = dagster_runner().sync(settings, progress=said.append)
    assert report.ok, report.failed_runs
    # a re-shard, though no partition key goes: reported, nothing dropped
    assert report.reshards == THREE_TO_FOUR
    assert any(
        m.startswith("re-shard alpha-deals: 3 -> 4 partitions; building") and "dropping" not in m
        for m in said
    )
    assert report.collections["alpha-deals"]["removed"] == 1
    assert report.collections["beta-deals"]["removed"] == 0
    assert report.collections["beta-deals"]["deletion_receipt"] is None
    home = Home(settings)
    assert [s for s in rows_of if home.registry.tombstone(s) is not None] == [gone]
    active = home.registry.active("deals")
    assert active is not None and active.id == gen.id
    for source, n in rows_of.items():
        assert home.store.count(active, f"source_id = '{source}'") == (0 if source == gone else n)
    assert active.row_count == home.store.count(active) == len(table) - rows_of[gone]
    for name in COLLECTIONS:
        ids = [
            sid
            for n in range(4)
            for sid in live_documents(home.read("source_manifest", (partition_key(name, n, 4),)))
        ]
        assert len(ids) == len(set(ids)) == (5 if name == "alpha-deals" else 6)


class _CutShort(Exception):
    """Ends a sync where its progress names the first embed run (as a crash would)."""


def test_a_reshard_from_three_to_four_cut_short_is_reported_again_by_the_retry(
    tmp_path: Path,
) -> None:
    """A sync from 3 shards to 4 cut short after its ingest added the new partition keys
    leaves the keys of 4 shards and none to drop: the retry still reports the re-shard, with
    its from, to and dropped, and a sync after it that succeeded reports none."""
    settings = _home(tmp_path, 3)
    _sync_and_promote(settings)
    _set_shards(settings.config_path, 4)

    def cut(message: str) -> None:
        if message.startswith("embed_job"):
            raise _CutShort(message)

    with pytest.raises(_CutShort):
        dagster_runner().sync(settings, progress=cut)
    assert dynamic_partitions(settings) == sorted(
        partition_key(name, n, 4) for name in COLLECTIONS for n in range(4)
    )

    said: list[str] = []
    report = dagster_runner().sync(settings, progress=said.append)
    assert report.ok, report.failed_runs
    assert report.reshards == THREE_TO_FOUR
    assert any(m.startswith("re-shard alpha-deals: 3 -> 4 partitions; building") for m in said)
    again = dagster_runner().sync(settings)
    assert again.ok and again.reshards == {}, again.failed_runs


@pytest.mark.parametrize("text", ["{not json", '["deals"]', '{"deals": {"from": []}}'])
def test_a_record_of_reshards_under_way_that_cannot_be_read_is_named(
    tmp_path: Path, text: str
) -> None:
    settings = Settings(config_path=tmp_path / "corpus.yaml", home=tmp_path / "home")
    settings.home.mkdir()
    (settings.home / PENDING_RESHARDS).write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        pending_reshards(settings)
    assert str(raised.value).startswith(f"{settings.home / PENDING_RESHARDS}: not a record")


def _set_embedder(config: Path, profile: str, embedder: str) -> None:
    raw = yaml.safe_load(config.read_text(encoding="utf-8"))
    raw["profiles"][profile]["embedder"] = embedder
    config.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")


def test_a_file_deleted_during_a_reshard_that_drops_partitions_leaves_every_generation(
    tmp_path: Path,
) -> None:
    """From 1 shard to 4 and back to 1, the old partitions are dropped: a document whose file
    went meanwhile is listed by no new partition, and is deleted as any removed file is
    (tombstone, receipt, its sidecars, its rows out of every generation), also out of the
    ACTIVE generation the sync does not write (the profile's embedder changed, so it builds
    another)."""
    settings = _home(tmp_path, 1)
    _sync_and_promote(settings)
    active = Home(settings).registry.active("deals")
    assert active is not None
    sources = settings.config_path.parent / "sources"

    for shards, gone, path in (
        (4, "alpha-deals/deal-alpha-004", sources / "alpha" / "deal-alpha-004.uw.md"),
        (1, "beta-deals/deal-beta-001", sources / "beta" / "deal-beta-001.uw.md"),
    ):
        where = f"source_id = '{gone}'"
        assert Home(settings).store.count(active, where) > 0
        if shards == 4:
            _set_embedder(settings.config_path, "main", "hash:v1-32")
        _set_shards(settings.config_path, shards)
        path.unlink()
        report = dagster_runner().sync(settings)
        assert report.ok, report.failed_runs
        name = gone.split("/")[0]
        assert report.collections[name]["removed"] == 1
        receipt = report.collections[name]["deletion_receipt"]
        assert receipt and gone in Path(receipt).read_text(encoding="utf-8")
        home = Home(settings)
        tomb = home.registry.tombstone(gone)
        assert tomb is not None and tomb["receipt"] == receipt
        built = home.registry.live_generation("main")
        assert built is not None and built.id != active.id
        assert home.registry.active("deals").id == active.id  # still serving, not rebuilt
        for gen in (active, built):
            assert home.store.count(gen, where) == 0
            assert home.registry.get(gen.id).row_count == home.store.count(gen)
        assert not list(settings.home.rglob(f"{gone.split('/')[1]}*"))  # its sidecars too
        assert report.reshards[name]["dropped"] == (
            [name] if shards == 4 else [partition_key(name, n, 4) for n in range(4)]
        )
