"""A scan of message streams lists the records of a file it saw unchanged from the last scan
(``sources.STREAM_FILES_KEY``) rather than reading it, and names every record as a reading of
every file would."""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from corpus_index.config import CollectionConfig
from corpus_index.kinds import messages
from corpus_index.limits import Limits
from corpus_index.records import StreamCarry, StreamFile
from corpus_index.sources import STREAM_FILES_KEY, ManifestResult, scan_manifest

HOUR_AGO = time.time() - 3600


def collection(root: Path, **options: Any) -> CollectionConfig:
    root.mkdir(parents=True, exist_ok=True)
    return CollectionConfig(
        name="chat", kind="messages", path=root, tenant="t1", acl_groups=("staff",), **options
    )


def line(rid: str, text: str = "the keys are in the drawer") -> str:
    record = {
        "id": rid,
        "source": "discord_chat",
        "channel": "staff",
        "author": "Sarah",
        "timestamp": "2025-12-10T09:30:00+11:00",
        "text": text,
    }
    return json.dumps(record)


def write(path: Path, lines: list[str], *, age: int = 0) -> None:
    """``lines`` as the file, its modification time an hour ago (plus ``age`` seconds): old
    enough for the next scan to trust its ``stat``."""
    path.write_text("".join(f"{x}\n" for x in lines), encoding="utf-8")
    os.utime(path, (HOUR_AGO + age, HOUR_AGO + age))


def without_note(manifest: pa.Table) -> pa.Table:
    meta = dict(manifest.schema.metadata or {})
    meta.pop(STREAM_FILES_KEY, None)
    return manifest.replace_schema_metadata(meta)


class Reads:
    """The stream files read (opened for their bytes) while it counts."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.paths: Counter[str] = Counter()
        real = messages.read_file

        def read_file(collection: CollectionConfig, path: str) -> Any:
            self.paths[Path(path).name] += 1
            return real(collection, path)

        monkeypatch.setattr(messages, "read_file", read_file)

    def take(self) -> list[str]:
        names = sorted(self.paths.elements())
        self.paths.clear()
        return names


def same_as_reading_every_file(
    coll: CollectionConfig, previous: pa.Table, reads: Reads
) -> tuple[ManifestResult, list[str]]:
    """The scan from ``previous`` and the files it read, checked against a scan from it that
    reads every file (whose reads are not counted)."""
    carried = scan_manifest(coll, previous)
    read = reads.take()
    everything = scan_manifest(coll, without_note(previous))
    reads.take()
    assert without_note(carried.table).equals(without_note(everything.table))
    counts = ("added", "changed", "unchanged", "removed", "held")
    assert [getattr(carried, c) for c in counts] == [getattr(everything, c) for c in counts]
    return carried, read


def test_an_unchanged_stream_file_is_listed_from_the_last_scan_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    coll = collection(tmp_path)
    write(tmp_path / "a.jsonl", [line("a1"), line("a2"), "", line("a3")])
    write(tmp_path / "b.jsonl", [line("b1"), line("b2")], age=1)
    reads = Reads(monkeypatch)
    first = scan_manifest(coll, None)
    assert reads.take() == ["a.jsonl", "b.jsonl"]
    note = json.loads(first.table.schema.metadata[STREAM_FILES_KEY])
    runs = {Path(p).name: f[4] for p, f in note["files"].items()}
    assert runs == {"a.jsonl": [[1, 2], [4, 1]], "b.jsonl": [[1, 2]]}  # the blank line skipped

    again = scan_manifest(coll, first.table)
    assert reads.take() == []
    assert (again.unchanged, again.added, again.changed, again.removed) == (5, 0, 0, 0)
    assert (
        without_note(again.table)
        .select(["doc_id", "raw_sha256", "source_version"])
        .equals(without_note(first.table).select(["doc_id", "raw_sha256", "source_version"]))
    )

    # one appended to, one new: those two are read; the third is listed
    write(tmp_path / "b.jsonl", [line("b1"), line("b2"), line("b3")], age=2)
    write(tmp_path / "c.jsonl", [line("c1")], age=3)
    third, read = same_as_reading_every_file(coll, again.table, reads)
    assert read == ["b.jsonl", "c.jsonl"]
    assert (third.added, third.unchanged) == (2, 5)
    # a file gone: its records removed, without reading the others
    (tmp_path / "a.jsonl").unlink()
    fourth = scan_manifest(coll, third.table)
    assert reads.take() == []
    assert (fourth.removed, fourth.unchanged) == (3, 4)


def test_a_file_written_within_a_second_of_the_scan_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    coll = collection(tmp_path)
    (tmp_path / "a.jsonl").write_text(line("a1") + "\n", encoding="utf-8")  # modified now
    first = scan_manifest(coll, None)
    reads = Reads(monkeypatch)
    scan_manifest(coll, first.table)
    # a write in the same clock tick as the first scan could leave its stat as it was
    assert reads.take() == ["a.jsonl"]


def test_a_file_rewritten_to_its_old_size_and_times_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    coll = collection(tmp_path)
    path = tmp_path / "a.jsonl"
    write(path, [line("a1", "pumpkin"), line("a2")])
    first = scan_manifest(coll, None)
    st = path.stat()
    write(path, [line("a1", "cabbage"), line("a2")])  # the same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same modification time
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    reads = Reads(monkeypatch)
    again = scan_manifest(coll, first.table)
    # the change time (or the inode of a file renamed into place) tells it
    assert reads.take() == ["a.jsonl"]
    assert (again.changed, again.unchanged) == (1, 1)


def test_a_changed_configuration_reads_every_file_under_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    coll = collection(tmp_path)
    write(tmp_path / "a.jsonl", [line("a1"), line("a2"), line("a3")])
    first = scan_manifest(coll, None)
    reads = Reads(monkeypatch)
    # a limit the file is now over: read, and refused, not listed as it was
    tight = replace(coll, limits=Limits(max_stream_lines=2))
    again = scan_manifest(tight, first.table)
    assert reads.take() == ["a.jsonl"]
    assert again.held == 3  # held while the file does not read whole
    assert "a.jsonl" in again.table.column("doc_id").to_pylist()  # refused, by its name


@pytest.mark.parametrize(
    "note",
    [b"", b"not json", b'{"format": 1}', b'{"format": 99, "config": "", "files": {}}', b"[1, 2]"],
)
def test_a_note_that_cannot_be_used_reads_every_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, note: bytes
) -> None:
    coll = collection(tmp_path)
    write(tmp_path / "a.jsonl", [line("a1")])
    first = scan_manifest(coll, None).table
    damaged = first.replace_schema_metadata({**first.schema.metadata, STREAM_FILES_KEY: note})
    reads = Reads(monkeypatch)
    again = scan_manifest(coll, damaged)
    assert reads.take() == ["a.jsonl"]
    assert again.unchanged == 1
    assert STREAM_FILES_KEY in again.table.schema.metadata  # noted afresh


def test_a_file_with_a_record_named_by_its_place_is_read_each_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    coll = collection(tmp_path)
    write(tmp_path / "a.jsonl", [line("a1"), "{not json", line("a2")])
    write(tmp_path / "b.jsonl", [line("a1"), line("b1")], age=1)  # repeats a.jsonl's a1
    write(tmp_path / "c.jsonl", [line("c1")], age=2)
    first = scan_manifest(coll, None)
    names = {
        Path(p).name for p in json.loads(first.table.schema.metadata[STREAM_FILES_KEY])["files"]
    }
    assert names == {"c.jsonl"}  # a bad line in a, a repeat in b
    reads = Reads(monkeypatch)
    _, read = same_as_reading_every_file(coll, first.table, reads)
    assert read == ["a.jsonl", "b.jsonl"]


def test_a_listed_file_gives_way_as_a_read_one_would(tmp_path: Path) -> None:
    """read_records with files listed, against the same reading of every file: a record read
    before a listed file that holds its id (no owner said otherwise) keeps the id, and the
    listed file's record is a repeat, named by its place (never reached by a scan, whose
    owners give the listed file its ids; the naming is the same all the same)."""
    coll = collection(tmp_path)
    write(tmp_path / "a.jsonl", [line("x")])
    write(tmp_path / "b.jsonl", [line("x"), line("y")], age=1)
    read = list(messages.read_records(coll))
    b = str(tmp_path / "b.jsonl")
    listed = [d for d in read if d.path == b and d.doc_id == "y"]
    x_in_b = replace(listed[0], doc_id="x", line=1, raw=b"", sha256="feed")
    y_in_b = replace(listed[0], raw=b"", sha256="beef")
    file = StreamFile.seen(os.stat(b), [1, 2])
    carry = StreamCarry(unchanged={b: (file, [x_in_b, y_in_b])})
    carried = list(messages.read_records(coll, carry=carry))
    assert [(d.doc_id, d.path, d.line, d.error) for d in carried] == [
        (d.doc_id, d.path, d.line, d.error) for d in read
    ]
    assert [d.doc_id for d in carried] == ["x", "y", "x@b.jsonl:1"]
    assert b not in carry.seen  # its record x is no longer named by its own id


def _edited(text: str, step: int) -> str:
    try:
        return line(json.loads(text)["id"], f"edited at step {step}")
    except (ValueError, KeyError, TypeError):
        return line(f"fixed-{step}")


def test_scans_of_streams_edited_at_random_name_as_reading_every_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random edits to a few stream files (records appended, edited, removed, repeated from
    another file, cut short; files added and removed), each scan checked against one that
    reads every file: the file touched is read, and many scans list some file unread."""
    rng = random.Random(17)
    coll = collection(tmp_path)
    files = {f"s{k}.jsonl": [line(f"s{k}-{i}") for i in range(6)] for k in range(4)}
    for name, lines in files.items():
        write(tmp_path / name, lines)
    reads = Reads(monkeypatch)
    manifest = scan_manifest(coll, None).table
    reads.take()
    listing = 0
    for step in range(60):
        name = rng.choice([*sorted(files), "new.jsonl"])
        lines = files.setdefault(name, [])
        op = rng.choice(["append", "edit", "drop", "repeat", "cut", "remove", "fix"])
        if op == "append":
            lines.append(line(f"{name}-{step}"))
        elif op == "edit" and lines:
            i = rng.randrange(len(lines))
            lines[i] = _edited(lines[i], step)
        elif op == "drop" and lines:
            lines.pop(rng.randrange(len(lines)))
        elif op == "repeat":
            others = [x for n, xs in sorted(files.items()) if n != name for x in xs]
            if others:
                lines.insert(rng.randrange(len(lines) + 1), rng.choice(others))
        elif op == "cut" and lines:
            i = rng.randrange(len(lines))
            lines[i] = lines[i][:25]
        elif op == "fix":
            lines[:] = [x for x in lines if x.endswith("}")]
        if op == "remove" or not lines:
            files.pop(name)
            (tmp_path / name).unlink(missing_ok=True)
        else:
            write(tmp_path / name, lines, age=step + 1)
        scan, read = same_as_reading_every_file(coll, manifest, reads)
        if name in files:
            assert name in read
        listing += len(set(read)) < len(files)
        manifest = scan.table
    assert listing >= 15  # 21 of the 60 with this seed; none when nothing is listed
