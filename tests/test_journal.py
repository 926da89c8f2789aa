"""The registry's journal: a lost registry gets its generations, ACTIVE pointers (with their
rollback targets) and tombstones back, in their last state."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpus_index.errors import DamagedRegistryError
from corpus_index.registry import Registry, restore_from_journal
from tests.registry_backends import Place, new_database
from tests.test_registry import OTHER_MODEL, SPEC, ready, registry


def lost(place: Place, request: pytest.FixtureRequest) -> Registry:
    """An empty registry beside the same journal: the DuckDB file deleted, or (PostgreSQL) a
    new, empty database."""
    if place.backend == "duckdb":
        Path(place.location).unlink()
        return place.open()
    return Registry(new_database(request), journal=place.journal)


def stone(source_id: str) -> dict[str, object]:
    return {
        "source_id": source_id,
        "collection": "alpha-deals",
        "namespace": "deals",
        "content_hashes": ["c1"],
        "input_hashes": ["i1"],
        "receipt": f"receipts/{source_id.replace('/', '_')}.json",
    }


def test_a_lost_registry_is_restored_from_its_journal(
    place: Place, request: pytest.FixtureRequest
) -> None:
    reg = place.open()
    g1, g2 = ready(reg, SPEC), ready(reg, OTHER_MODEL)
    reg.promote(g1)
    reg.promote(g2)
    reg.add_tombstones([stone("alpha-deals/a"), stone("alpha-deals/b"), stone("alpha-deals/c")])
    reg.lift_tombstones(["alpha-deals/b", "alpha-deals/live"])  # b came back
    reg.mark_purged(["alpha-deals/c"])
    before = {t["source_id"]: t for t in reg.tombstones()}

    restored = lost(place, request)
    assert restored.active("deals") is None and restored.tombstones() == []

    counts = restore_from_journal(restored)
    assert counts == {"generations": 2, "pointers": 1, "tombstones": 2}
    active = restored.active("deals")
    assert active is not None and active.id == g2 and active.row_count == 10
    assert restored.previous("deals") is not None and restored.require(g1).status == "READY"
    after = {t["source_id"]: t for t in restored.tombstones()}
    assert after.keys() == before.keys() == {"alpha-deals/a", "alpha-deals/c"}
    for sid, t in after.items():
        assert t["content_hashes"] == ["c1"] and t["receipt"] == before[sid]["receipt"]
        assert (t["purged_at"] is None) == (sid == "alpha-deals/a")
    # the restored registry serves the next sync: the live generation of the spec is reused
    assert restored.open_generation(SPEC).id == g1  # g1's spec is still live


def test_a_torn_last_journal_line_is_skipped(place: Place, request: pytest.FixtureRequest) -> None:
    reg = place.open()
    reg.promote(ready(reg, SPEC))
    with reg.journal.path.open("a") as f:
        f.write('{"op": "tombstone", "source_id": "x"')  # a crash mid-write
    assert restore_from_journal(lost(place, request))["pointers"] == 1


def test_an_entry_after_a_torn_line_is_kept(place: Place, request: pytest.FixtureRequest) -> None:
    """A crash mid-write leaves a line with no end; the next commit's entry starts a line of
    its own, so the deletion it records survives the registry's loss."""
    reg = place.open()
    reg.promote(ready(reg, SPEC))
    with reg.journal.path.open("a") as f:
        f.write('{"op": "tombstone", "source_id": "x"')  # a crash mid-write
    reg.add_tombstones([stone("alpha-deals/a")])
    restored = lost(place, request)
    assert restore_from_journal(restored) == {"generations": 1, "pointers": 1, "tombstones": 1}
    assert [t["source_id"] for t in restored.tombstones()] == ["alpha-deals/a"]


def test_a_journal_line_of_bytes_that_are_not_utf8_is_skipped_and_named(
    place: Place, request: pytest.FixtureRequest
) -> None:
    """A damaged line (a disk error) neither stops the restore nor hides the lines beside it."""
    reg = place.open()
    reg.promote(ready(reg, SPEC))
    with reg.journal.path.open("ab") as f:
        f.write(b"\xff\xfe garbage\n")
    reg.add_tombstones([stone("alpha-deals/a")])
    damaged = len(reg.journal.path.read_bytes().splitlines()) - 1
    assert reg.journal.skipped() == [f"line {damaged}: bytes that are not UTF-8"]
    counts = restore_from_journal(lost(place, request))
    assert counts == {"generations": 1, "pointers": 1, "tombstones": 1}


def test_a_corrupt_registry_is_damaged_not_busy(tmp_path: Path) -> None:
    reg = registry(tmp_path)
    reg.path.parent.mkdir(parents=True)
    reg.path.write_bytes(b"\x00not a database" * 500)
    with pytest.raises(DamagedRegistryError) as raised:
        reg.generations()
    message = str(raised.value)
    assert str(reg.path) in message and "busy" not in message
    assert "corpus doctor --repair" in message
