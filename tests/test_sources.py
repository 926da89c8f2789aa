"""Manifests and incremental parsing: work proportional to change, quarantine that keeps serving."""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow as pa
import pytest

from corpus_index.config import CollectionConfig
from corpus_index.errors import ParseError
from corpus_index.hashing import sha256_hex
from corpus_index.sources import (
    RACY_SECONDS,
    SCANNED_AT_KEY,
    ParseResult,
    document_version,
    live_documents,
    parse_collection,
    scan_manifest,
)
from tests.corpusgen import RISKS, deal_text

GROUPS = ["alpha-uw", "alpha-credit"]
SECTIONS_PER_DEAL = 5  # corpusgen writes five sections, one block each


def uw_collection(root: Path) -> CollectionConfig:
    root.mkdir(parents=True, exist_ok=True)
    return CollectionConfig(
        name="alpha-deals", kind="uw_deals", path=root, tenant="alpha", acl_groups=tuple(GROUPS)
    )


def write_deal(root: Path, doc_id: str, **kwargs: object) -> str:
    kwargs.setdefault("acl", GROUPS)
    text = deal_text(doc_id.upper(), tenant="alpha", **kwargs)  # type: ignore[arg-type]
    (root / f"{doc_id}.uw.md").write_text(text, encoding="utf-8")
    return text


def break_deal(root: Path, doc_id: str) -> int:
    """Make one line inside the risk block invalid YAML; returns that 1-based line."""
    path = root / f"{doc_id}.uw.md"
    lines = path.read_text(encoding="utf-8").splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("severity:"))
    lines[at] = "  severity: high\n   broken: : indentation"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    broken_line = at + 2  # the inserted second line, 1-based
    assert "broken: :" in path.read_text(encoding="utf-8").splitlines()[broken_line - 1]
    return broken_line


@dataclass
class State:
    """What the pipeline keeps between runs for one collection."""

    manifest: pa.Table | None = None
    blocks: pa.Table | None = None
    quarantine: pa.Table | None = None


def run(coll: CollectionConfig, state: State) -> tuple[dict[str, int], ParseResult]:
    scanned = scan_manifest(coll, state.manifest)
    parsed = parse_collection(coll, scanned.table, state.blocks, state.quarantine)
    state.manifest, state.blocks, state.quarantine = scanned.table, parsed.blocks, parsed.quarantine
    diff = {
        "added": scanned.added,
        "changed": scanned.changed,
        "unchanged": scanned.unchanged,
        "removed": scanned.removed,
    }
    return diff, parsed


def refs_by_doc(blocks: pa.Table) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for row in blocks.select(["doc_id", "chunk_ref"]).to_pylist():
        out.setdefault(row["doc_id"], []).append(row["chunk_ref"])
    return out


def counts(result: ParseResult) -> tuple[int, int, int, int]:
    return (
        result.parsed_documents,
        result.carried_documents,
        result.stale_documents,
        result.quarantined,
    )


def version_of(root: Path, doc_id: str) -> str:
    raw = (root / f"{doc_id}.uw.md").read_bytes()
    return document_version(sha256_hex(raw), uw_collection(root).block_scope)


# -- manifests -----------------------------------------------------------------------------


def test_manifest_diff_across_scans(tmp_path: Path) -> None:
    root = tmp_path / "deals"
    coll = uw_collection(root)
    for doc_id in ("a", "b", "c"):
        write_deal(root, doc_id)

    first = scan_manifest(coll, None)
    assert (first.added, first.changed, first.unchanged, first.removed, first.documents) == (
        3,
        0,
        0,
        0,
        3,
    )
    rows = {r["doc_id"]: r for r in first.table.to_pylist()}
    raw_a = (root / "a.uw.md").read_bytes()
    assert rows["a"]["raw_sha256"] == sha256_hex(raw_a)
    assert rows["a"]["source_version"] == version_of(root, "a")
    assert rows["a"]["size"] == len(raw_a)
    assert rows["a"]["source_id"] == "alpha-deals/a"
    assert rows["a"]["path"] == str(root / "a.uw.md")

    write_deal(root, "b", risk=RISKS[1])  # changed
    (root / "c.uw.md").unlink()  # removed
    write_deal(root, "d")  # added
    second = scan_manifest(coll, first.table)
    assert (second.added, second.changed, second.unchanged, second.removed) == (1, 1, 1, 1)
    changes = {r["doc_id"]: r["change"] for r in second.table.to_pylist()}
    assert changes == {"a": "unchanged", "b": "changed", "c": "removed", "d": "added"}
    removed = next(r for r in second.table.to_pylist() if r["doc_id"] == "c")
    assert removed["source_version"] == rows["c"]["source_version"]  # the version that went away
    assert live_documents(second.table) == {
        "a": rows["a"]["source_version"],
        "b": version_of(root, "b"),
        "d": version_of(root, "d"),
    }

    third = scan_manifest(coll, second.table)  # a removal is reported once
    assert (third.added, third.changed, third.unchanged, third.removed) == (0, 0, 3, 0)

    write_deal(root, "c")  # back again: it is new to this manifest
    fourth = scan_manifest(coll, third.table)
    assert (fourth.added, fourth.changed, fourth.unchanged, fourth.removed) == (1, 0, 3, 0)


def test_touching_a_file_without_changing_bytes_is_unchanged(tmp_path: Path) -> None:
    root = tmp_path / "deals"
    coll = uw_collection(root)
    text = write_deal(root, "a")
    first = scan_manifest(coll, None)
    (root / "a.uw.md").write_text(text, encoding="utf-8")
    second = scan_manifest(coll, first.table)
    assert (second.changed, second.unchanged) == (0, 1)


def _same_size_edit(path: Path) -> None:
    """Change one byte of ``path``, keeping its size and its mtime (as ``cp -p`` or a careful
    editor could): only reading the file can tell."""
    st = path.stat()
    raw = bytearray(path.read_bytes())
    at = raw.index(b"units:") + len(b"units:") + 1
    raw[at] = ord("9") if raw[at] != ord("9") else ord("8")
    path.write_bytes(bytes(raw))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_file_whose_size_and_mtime_are_as_recorded_is_not_read_again(tmp_path: Path) -> None:
    root = tmp_path / "deals"
    coll = uw_collection(root)
    for doc_id in ("a", "b"):
        write_deal(root, doc_id)
        old = time.time() - 3600  # written long before the scan
        os.utime(root / f"{doc_id}.uw.md", (old, old))
    first = scan_manifest(coll, None)
    assert float(first.table.schema.metadata[SCANNED_AT_KEY]) == pytest.approx(time.time(), abs=60)
    version_a = version_of(root, "a")

    _same_size_edit(root / "a.uw.md")
    assert version_of(root, "a") != version_a
    second = scan_manifest(coll, first.table)
    # trusted by stat, as git trusts its index: the recorded hash is kept, the file not read
    assert (second.changed, second.unchanged) == (0, 2)
    assert live_documents(second.table)["a"] == version_a

    later = time.time() - 1800  # any real write moves the mtime: now it is read and hashed
    os.utime(root / "a.uw.md", (later, later))
    third = scan_manifest(coll, second.table)
    assert (third.changed, third.unchanged) == (1, 1)
    assert live_documents(third.table)["a"] == version_of(root, "a")


def test_a_file_written_in_the_scans_clock_tick_is_read_again(tmp_path: Path) -> None:
    """Racy timestamps: a file whose mtime is within RACY_SECONDS of the scan that recorded it
    may have changed after it was read in the same tick, so the next scan hashes it again."""
    root = tmp_path / "deals"
    coll = uw_collection(root)
    write_deal(root, "a")  # mtime: now, the same moment as the scan below
    first = scan_manifest(coll, None)
    _same_size_edit(root / "a.uw.md")
    second = scan_manifest(coll, first.table)
    assert (second.changed, second.unchanged) == (1, 0)
    assert live_documents(second.table)["a"] == version_of(root, "a")
    assert RACY_SECONDS >= 1.0


def test_duplicate_beir_ids_fail_the_scan_with_the_line(tmp_path: Path) -> None:
    root = tmp_path / "beir"
    root.mkdir()
    lines = [json.dumps({"_id": "x", "text": "one"}), json.dumps({"_id": "x", "text": "two"})]
    (root / "corpus.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    coll = CollectionConfig(name="eval", kind="beir", path=root, tenant="lab", acl_groups=("lab",))
    with pytest.raises(ParseError, match=r"corpus\.jsonl:2: duplicate document id 'x'"):
        scan_manifest(coll, None)


# -- incremental parsing --------------------------------------------------------------------


def test_only_changed_documents_are_parsed_and_the_rest_carried(tmp_path: Path) -> None:
    root = tmp_path / "deals"
    coll = uw_collection(root)
    state = State()
    for doc_id in ("a", "b", "c"):
        write_deal(root, doc_id)

    diff, first = run(coll, state)
    assert diff["added"] == 3
    assert counts(first) == (3, 0, 0, 0)
    assert first.blocks.num_rows == 3 * SECTIONS_PER_DEAL
    before = refs_by_doc(first.blocks)
    rows_a = [r for r in first.blocks.to_pylist() if r["doc_id"] == "a"]

    diff, again = run(coll, state)
    assert diff["unchanged"] == 3
    assert counts(again) == (0, 3, 0, 0)
    assert again.blocks.equals(first.blocks)

    write_deal(root, "b", risk=RISKS[2])
    (root / "c.uw.md").unlink()
    write_deal(root, "d")
    diff, third = run(coll, state)
    assert diff == {"added": 1, "changed": 1, "unchanged": 1, "removed": 1}
    assert counts(third) == (2, 1, 0, 0)  # b and d parsed, a carried
    after = refs_by_doc(third.blocks)
    assert sorted(after) == ["a", "b", "d"]  # c's blocks are gone
    assert after["a"] == before["a"]
    assert [r for r in third.blocks.to_pylist() if r["doc_id"] == "a"] == rows_a  # carried verbatim
    vb = version_of(root, "b")
    assert all(f"/b/v{vb}/" in ref for ref in after["b"])
    assert set(after["b"]).isdisjoint(before["b"])


def test_narrowing_the_collections_acl_parses_every_document_again_under_new_versions(
    tmp_path: Path,
) -> None:
    # "a" is written for one of the collection's groups, "b" for both
    root, state = tmp_path / "deals", State()
    coll = uw_collection(root)
    write_deal(root, "a", acl=["alpha-uw"])
    write_deal(root, "b")
    _, wide = run(coll, state)
    assert sorted(refs_by_doc(wide.blocks)) == ["a", "b"]
    # the collection narrowed to that one group: "b" would now widen its scope
    narrow = replace(coll, acl_groups=("alpha-uw",))
    diff, narrowed = run(narrow, state)
    # the bytes of "b" are the same, the scope is not: a new version, parsed again
    assert (diff["changed"], diff["unchanged"]) == (2, 0)
    assert narrowed.parsed_documents == 1 and narrowed.quarantined == 1
    (q,) = narrowed.quarantine.to_pylist()
    assert (
        q["doc_id"] == "b" and "alpha-credit are not in the collection's acl_groups" in q["error"]
    )
    # "b" broke under the new scope and its last blocks were of the wider one: not served
    assert narrowed.stale_documents == 0 and narrowed.stale == []
    assert sorted(refs_by_doc(narrowed.blocks)) == ["a"]
    assert {tuple(r["acl_groups"]) for r in narrowed.blocks.to_pylist()} == {("alpha-uw",)}
    assert not set(refs_by_doc(narrowed.blocks)["a"]) & set(refs_by_doc(wide.blocks)["a"])
    # a configuration change that gives blocks nothing new (another namespace) parses nothing
    diff, same = run(replace(narrow, namespace="elsewhere"), state)
    assert (diff["unchanged"], same.parsed_documents) == (2, 0)


def test_broken_document_is_quarantined_and_its_last_good_blocks_keep_serving(
    tmp_path: Path,
) -> None:
    root = tmp_path / "deals"
    coll = uw_collection(root)
    state = State()
    write_deal(root, "a")
    write_deal(root, "b")
    _, good = run(coll, state)
    good_b = [r for r in good.blocks.to_pylist() if r["doc_id"] == "b"]
    good_version = version_of(root, "b")

    broken_line = break_deal(root, "b")
    broken_version = version_of(root, "b")
    diff, broken = run(coll, state)
    assert diff["changed"] == 1
    assert counts(broken) == (0, 1, 1, 1)  # nothing parsed, a carried, b stale and quarantined
    (q,) = broken.quarantine.to_pylist()
    path = str(root / "b.uw.md")
    assert (q["doc_id"], q["source_id"], q["source_version"], q["path"], q["line"]) == (
        "b",
        "alpha-deals/b",
        broken_version,
        path,
        broken_line,
    )
    assert q["error"].startswith(f"{path}:{broken_line}: broken YAML in section 'risk_assessment'")
    assert [r for r in broken.blocks.to_pylist() if r["doc_id"] == "b"] == good_b
    assert all(f"/v{good_version}/" in r["chunk_ref"] for r in good_b)

    # nothing changed: the broken version is not parsed again, and it stays quarantined and stale
    _, still = run(coll, state)
    assert counts(still) == (0, 2, 1, 1)
    assert still.quarantine.equals(broken.quarantine)
    assert still.blocks.equals(broken.blocks)

    write_deal(root, "b", risk=RISKS[3])  # fixed by a new edit
    _, fixed = run(coll, state)
    assert counts(fixed) == (1, 1, 0, 0)
    fixed_b = [r for r in fixed.blocks.to_pylist() if r["doc_id"] == "b"]
    assert len(fixed_b) == SECTIONS_PER_DEAL
    assert all(r["source_version"] == version_of(root, "b") for r in fixed_b)


def test_reverting_a_broken_edit_to_the_last_good_bytes_clears_quarantine(tmp_path: Path) -> None:
    root = tmp_path / "deals"
    coll = uw_collection(root)
    state = State()
    good_text = write_deal(root, "a")
    _, good = run(coll, state)
    break_deal(root, "a")
    _, broken = run(coll, state)
    assert counts(broken) == (0, 0, 1, 1)
    # its only document changed and broke: its last good blocks still serve (none was
    # carried as it was, and they are read all the same)
    assert broken.blocks.equals(good.blocks)

    (root / "a.uw.md").write_text(good_text, encoding="utf-8")  # e.g. `git checkout` of the file
    diff, reverted = run(coll, state)
    assert diff["changed"] == 1
    assert reverted.quarantined == 0
    assert reverted.stale_documents == 0
    assert reverted.blocks.equals(good.blocks)


def test_a_document_broken_from_the_start_has_no_blocks(tmp_path: Path) -> None:
    root = tmp_path / "deals"
    coll = uw_collection(root)
    state = State()
    write_deal(root, "a")
    (root / "bad.uw.md").write_text("no front matter\n", encoding="utf-8")
    _, result = run(coll, state)
    assert counts(result) == (1, 0, 0, 1)  # quarantined, but nothing stale: it never served
    assert sorted(refs_by_doc(result.blocks)) == ["a"]
    (q,) = result.quarantine.to_pylist()
    assert (q["doc_id"], q["line"]) == ("bad", 1)


def test_removing_a_quarantined_document_drops_its_blocks_and_its_quarantine(
    tmp_path: Path,
) -> None:
    root = tmp_path / "deals"
    coll = uw_collection(root)
    state = State()
    write_deal(root, "a")
    write_deal(root, "b")
    run(coll, state)
    break_deal(root, "b")
    _, broken = run(coll, state)
    assert broken.quarantined == 1

    (root / "b.uw.md").unlink()
    diff, removed = run(coll, state)
    assert diff["removed"] == 1
    assert counts(removed) == (0, 1, 0, 0)
    assert sorted(refs_by_doc(removed.blocks)) == ["a"]


def test_a_run_that_lost_its_previous_blocks_reparses_everything(tmp_path: Path) -> None:
    # parsing decides from versions, not diff flags: a manifest that says "unchanged" but
    # has no parsed blocks behind it (a run died between the two steps) still converges
    root = tmp_path / "deals"
    coll = uw_collection(root)
    write_deal(root, "a")
    write_deal(root, "b")
    first = scan_manifest(coll, None)
    second = scan_manifest(coll, first.table)
    assert second.unchanged == 2
    result = parse_collection(coll, second.table, None, None)
    assert counts(result) == (2, 0, 0, 0)
    assert result.blocks.num_rows == 2 * SECTIONS_PER_DEAL


def test_beir_bad_line_is_quarantined_with_its_line(tmp_path: Path) -> None:
    root = tmp_path / "beir"
    root.mkdir()
    coll = CollectionConfig(
        name="eval", kind="beir", path=root, tenant="lab", acl_groups=("lab",), tier="public"
    )
    good = [
        json.dumps({"_id": f"d{i}", "title": f"t{i}", "text": f"passage {i}"}) for i in range(3)
    ]
    (root / "corpus.jsonl").write_text(
        "\n".join([good[0], good[1], '{"_id": "d2", ', good[2]]) + "\n"
    )
    state = State()
    _, result = run(coll, state)
    assert counts(result) == (3, 0, 0, 1)
    assert sorted(refs_by_doc(result.blocks)) == ["d0", "d1", "d2"]
    (q,) = result.quarantine.to_pylist()
    assert (q["doc_id"], q["path"], q["line"]) == ("line-3", str(root / "corpus.jsonl"), 3)
    assert "not valid JSON" in q["error"]


@pytest.mark.parametrize(
    ("own", "named"), [(["line-3"], "line-3#2"), (["line-3", "line-3#2"], "line-3#3")]
)
def test_a_bad_lines_place_never_takes_a_beir_records_own_id(
    tmp_path: Path, own: list[str], named: str
) -> None:
    """A record without a usable ``_id`` is named by its line, ``line-<n>``; a record whose own
    ``_id`` is that name keeps it, before the line or after it, and the bad line's name takes
    ``#2`` and on (the two were one id: the scan failed on a duplicate, and the collection
    with it)."""
    root = tmp_path / "beir"
    root.mkdir()
    coll = CollectionConfig(name="eval", kind="beir", path=root, tenant="lab", acl_groups=("lab",))
    lines = [
        json.dumps({"_id": "d0", "text": "first"}),
        json.dumps({"_id": own[0], "text": "a record named like a place"}),
        '{"_id": "broken", ',
        *(json.dumps({"_id": i, "text": "another"}) for i in own[1:]),
        json.dumps({"_id": "d9", "text": "last"}),
    ]
    (root / "corpus.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    _, result = run(coll, State())
    assert sorted(refs_by_doc(result.blocks)) == sorted(["d0", "d9", *own])
    (q,) = result.quarantine.to_pylist()
    assert (q["doc_id"], q["line"]) == (named, 3) and "not valid JSON" in q["error"]


@pytest.mark.parametrize(
    ("bad_id", "shown"),
    [
        ('"\\ud800"', "'\\\\ud800'"),  # a lone UTF-16 surrogate: no table can hold it
        ('"a\\u0000b"', "'a\\\\x00b'"),  # a NUL: no filter can name its rows
        ("null", "None"),
        ('"  "', "'  '"),
        ("true", "True"),
        ("[1]", r"\[1\]"),
    ],
)
def test_a_beir_id_that_names_no_record_is_quarantined_with_its_line(
    tmp_path: Path, bad_id: str, shown: str
) -> None:
    root = tmp_path / "beir"
    root.mkdir()
    coll = CollectionConfig(name="eval", kind="beir", path=root, tenant="lab", acl_groups=("lab",))
    lines = [
        json.dumps({"_id": "d0", "text": "first"}),
        f'{{"_id": {bad_id}, "text": "odd"}}',
        json.dumps({"_id": 7, "text": "an integer id"}),
    ]
    (root / "corpus.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    _, result = run(coll, State())
    assert sorted(refs_by_doc(result.blocks)) == ["7", "d0"]
    (q,) = result.quarantine.to_pylist()
    assert (q["doc_id"], q["line"]) == ("line-2", 2)
    assert re.search(
        rf"corpus\.jsonl:2: '_id' must be a non-blank string or an integer.*\(got {shown}\)",
        q["error"],
    ), q["error"]
