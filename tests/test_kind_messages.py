"""The ``messages`` kind: JSONL message streams under their processing profiles, the irc
layout, bad records quarantined with file and line, scope narrowed never widened."""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest

from corpus_index import kinds
from corpus_index.config import CollectionConfig, parse_config
from corpus_index.errors import ConfigError, LimitExceededError, ParseError
from corpus_index.hashing import canonical_json, sha256_hex
from corpus_index.kinds import message_profiles, messages
from corpus_index.kinds.messages import KEYS, MAX_KEY_NOTES, MESSAGES, message_of
from corpus_index.limits import Limits
from corpus_index.linked.conversations import group_conversations
from corpus_index.linked.irc import read_folder
from corpus_index.linked.messages import day_of
from corpus_index.records import Block
from corpus_index.sources import ManifestResult, ParseResult, parse_collection, scan_manifest

GROUPS = ("support-staff", "support-leads")


def collection(root: Path, **options: Any) -> CollectionConfig:
    root.mkdir(parents=True, exist_ok=True)
    return CollectionConfig(
        name="care-chat",
        kind="messages",
        path=root,
        tenant="riverside",
        acl_groups=GROUPS,
        **options,
    )


def record(rid: str, **fields: Any) -> dict[str, Any]:
    base = {
        "id": rid,
        "source": "discord_chat",
        "channel": "staff",
        "author": "Sarah Jones",
        "recipients": [],
        "timestamp": "2025-12-10T23:30:00+11:00",
        "location": "Picton SIL",
        "text": "Who is cooking for Christmas lunch?",
    }
    return {**base, **fields}


def write(root: Path, name: str, records: list[dict[str, Any] | str]) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def blocks_of(coll: CollectionConfig) -> dict[str, list[Block]]:
    out: dict[str, list[Block]] = {}
    for doc in kinds.read_documents(coll):
        out[doc.doc_id] = kinds.parse_document(coll, doc, "0" * 16)
    return out


def one(coll: CollectionConfig, rec: dict[str, Any]) -> Block:
    write(coll.path, "stream.jsonl", [rec])
    (block,) = blocks_of(coll)[str(rec["id"])]
    return block


# -- jsonl records --------------------------------------------------------------------------------


def test_a_record_is_a_unit_with_what_grouping_reads(tmp_path: Path) -> None:
    coll = collection(tmp_path)
    block = one(coll, record("m1", recipients=["Mike"], reply_to="m0", subject="Lunch"))
    assert (block.kind, block.source_type, block.block_key) == (
        "messages",
        "discord_chat",
        "message/0",
    )
    assert block.content == {
        "author": "Sarah Jones",
        "location": "Picton SIL",
        "subject": "Lunch",
        "text": "Who is cooking for Christmas lunch?",
    }
    meta = block.metadata
    assert (meta["unit_id"], meta["author"], meta["recipients"], meta["channel"]) == (
        "m1",
        "Sarah Jones",
        ["Mike"],
        "staff",
    )
    assert (meta["timestamp"], meta["location"], meta["reply_to"]) == (
        "2025-12-10T23:30:00+11:00",
        "Picton SIL",
        "m0",
    )
    assert meta["contains_question"] is True
    assert block.event_date == "2025-12-10"  # the day where it was written, not in UTC
    assert (block.tenant_id, block.acl_groups) == ("riverside", GROUPS)
    message = message_of(block)
    assert (message.unit_id, message.channel, message.reply_to) == ("m1", "staff", "m0")
    assert message.mentions == ("Mike",) and message.timestamp == 1765369800.0


@pytest.mark.parametrize(
    ("stamp", "timezone", "day"),
    [
        ("2025-12-04T22:05:00Z", "Australia/Sydney", "2025-12-05"),  # 09:05 AEDT on the 5th
        ("2025-12-04T22:05:00Z", "", "2025-12-04"),  # no zone: the record's own offset's day
        ("2025-12-04T22:05:00+00:00", "Australia/Sydney", "2025-12-05"),
        ("2025-12-05T09:05:00+11:00", "Australia/Sydney", "2025-12-05"),  # stamped in local time
        ("2025-12-05T09:05:00+11:00", "", "2025-12-05"),
        ("2025-12-05T09:05:00+11:00", "UTC", "2025-12-04"),
        ("2025-12-05T12:59:00Z", "Australia/Sydney", "2025-12-05"),  # 23:59 AEDT (+11:00)
        ("2025-12-05T13:00:00Z", "Australia/Sydney", "2025-12-06"),  # midnight AEDT
        ("2025-06-04T13:59:00Z", "Australia/Sydney", "2025-06-04"),  # 23:59 AEST (+10:00)
        ("2025-06-04T14:00:00Z", "Australia/Sydney", "2025-06-05"),  # midnight AEST
    ],
)
def test_a_records_day_is_its_date_in_the_collections_timezone(
    tmp_path: Path, stamp: str, timezone: str, day: str
) -> None:
    coll = collection(tmp_path, timezone=timezone)
    block = one(coll, record("m1", timestamp=stamp))
    assert block.event_date == day
    message = message_of(block)
    assert (message.event_date, day_of(message)) == (day, day)
    assert block.metadata["timestamp"] == dt.datetime.fromisoformat(stamp).isoformat()


def test_an_irc_lines_day_is_its_date_in_the_collections_timezone(tmp_path: Path) -> None:
    for timezone, day in (("", "2004-11-15"), ("Australia/Sydney", "2004-11-16")):
        irc = collection(tmp_path / "irc", format="irc", timezone=timezone)
        (tmp_path / "irc" / "2004-11-15_03.ascii.txt").write_text(
            "[23:30] <tom> hi\n", encoding="utf-8"
        )
        (doc,) = kinds.read_documents(irc)
        (block,) = kinds.parse_document(irc, doc, "0" * 16)
        assert block.event_date == day, timezone


def test_the_timezone_is_in_the_block_scope_only_where_it_is_set(tmp_path: Path) -> None:
    """Setting a zone parses every record again (their days may move); a collection without
    one keeps the digest it had before the option was known, so its ids stay as they were."""
    coll = collection(tmp_path)
    before = {
        "kind": coll.kind,
        "format": coll.format,
        "processing": coll.processing,
        "tenant": coll.tenant,
        "acl_groups": sorted(coll.acl_groups),
        "tier": coll.tier,
        "limits": asdict(coll.limits),
    }
    assert coll.block_scope == sha256_hex(canonical_json(before))[:16]
    sydney = replace(coll, timezone="Australia/Sydney")
    assert (
        len({coll.block_scope, sydney.block_scope, replace(coll, timezone="UTC").block_scope}) == 3
    )


def test_a_record_may_narrow_its_scope_never_widen_or_move_it(tmp_path: Path) -> None:
    coll = collection(tmp_path, tier="restricted")
    narrowed = one(coll, record("m1", acl=["support-leads"]))
    assert narrowed.acl_groups == ("support-leads",)
    for bad, problem in [
        ({"acl": ["everyone"]}, "acl group(s) everyone are not in the collection's"),
        ({"tier": "public"}, "would widen the collection's 'restricted' tier"),
        ({"tenant": "other"}, "differs from the collection's tenant"),
        ({"acl": []}, "record 'acl' must be a non-empty list"),
    ]:
        with pytest.raises(ParseError, match=problem.replace("(", r"\(").replace(")", r"\)")):
            one(coll, record("m1", **bad))


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"timestamp": "2025-12-10T23:30:00"}, "lacks a UTC offset"),
        ({"timestamp": "yesterday"}, "is not ISO 8601"),
        ({"source": "fax"}, "'source' must be one of discord_chat"),
        ({"source": "irc_chat"}, "'source' must be one of"),
        ({"author": ""}, "'author' must be a non-empty string"),
        ({"channel": None}, "lacks 'channel'"),
        # a string is not a list of people: "Mike, Jane" would become one person of that name
        (
            {"recipients": "Mike, Jane"},
            r"'recipients' must be a list of strings, one name each \(got the string 'Mike, Jane'\)",
        ),
        (
            {"cc": "Mike"},
            r"'cc' must be a list of strings, one name each \(got the string 'Mike'\)",
        ),
        ({"recipients": [1]}, "'recipients' must be a list of strings, one name each"),
        ({"cc": {"name": "Mike"}}, "'cc' must be a list of strings, one name each"),
        ({"text": None}, "'text' must be a string"),
        # a time every later step can turn back into a date: years 1900 to 9998 UTC
        ({"timestamp": "0001-01-01T00:00:00+14:00"}, "outside the supported years 1900 to 9998"),
        ({"timestamp": "9999-12-31T23:59:59-14:00"}, "outside the supported years 1900 to 9998"),
        ({"timestamp": "1900-01-01T09:00:00+10:00"}, "outside the supported years"),  # 1899 UTC
        ({"id": ["x"]}, r"'id' must be a non-blank string or an integer \(got \['x'\]\)"),
        ({"id": "   "}, "'id' must be a non-blank string or an integer"),
        ({"id": True}, r"'id' must be .* \(got True\)"),
        ({"id": 1.5}, "'id' must be a non-blank string or an integer"),
        ({"text": "pumpkin \ud800"}, "'text' holds a lone UTF-16 surrogate"),
        ({"acl": ["support-staff", "\udc00"]}, r"'acl'\[1\] holds a lone UTF-16 surrogate"),
        ({"id": "m\ud800"}, "'id' holds a lone UTF-16 surrogate"),
        # a NUL cannot be a filter's value: its rows could never be replaced or deleted
        ({"id": "ctl\u0000x"}, "'id' holds a control character"),
        ({"id": "tab\there"}, "'id' holds a control character"),
        # linked groups' ids share the collection's source ids
        ({"id": "grp-a6e149dc0123456789abcdef01234567"}, "'id' starts with 'grp-'"),
        ({"reply_to": 7}, None),  # an integer id, as a record's own may be
        ({"reply_to": 7.5}, "'reply_to' must be a non-empty string"),
        # a channel named blank would group its messages in a channel no one named
        ({"channel": "   "}, "'channel' is blank"),
        ({"channel": None, "thread": ""}, "'thread' is blank"),
        ({"channel": 5}, "'channel' must be a non-empty string"),
    ],
)
def test_malformed_records_say_what_is_wrong(
    tmp_path: Path, fields: dict[str, Any], problem: str | None
) -> None:
    coll = collection(tmp_path)
    if problem is None:
        block = one(coll, record("m1", **fields))
        assert block.metadata["reply_to"] == "7"
        return
    with pytest.raises(ParseError, match=problem) as info:
        one(coll, record("m1", **fields))
    assert str(info.value).startswith(f"{tmp_path / 'stream.jsonl'}:1: ")


def test_a_record_giving_a_key_twice_is_quarantined_the_rest_indexed(tmp_path: Path) -> None:
    """JSON keeps the last of a key given twice: the first text (or ACL) would be lost
    without a word."""
    coll = collection(tmp_path)
    twice = json.dumps(record("m2", text="first words"))[:-1] + ', "text": "second words"}'
    nested = json.dumps(record("m3", meta={"a": 1}))[:-2] + ', "a": 2}}'
    write(tmp_path, "stream.jsonl", [record("m1"), twice, nested])
    result = parse_collection(coll, scan_manifest(coll, None).table, None, None)
    assert result.blocks.column("doc_id").to_pylist() == ["m1"]
    errors = {r["line"]: r["error"] for r in result.quarantine.to_pylist()}
    path = tmp_path / "stream.jsonl"
    assert errors == {
        2: f"{path}:2: 'text' is given twice in one object; JSON would keep the last, losing "
        "the first: give each key once",
        3: f"{path}:3: 'a' is given twice in one object; JSON would keep the last, losing "
        "the first: give each key once",
    }


def test_the_last_moment_of_the_last_supported_year_is_accepted(tmp_path: Path) -> None:
    # its float seconds round up to the first moment of the year after
    coll = collection(tmp_path)
    block = one(coll, record("m1", timestamp="9998-12-31T23:59:59.999999+00:00"))
    assert block.metadata["timestamp"] == "9998-12-31T23:59:59.999999+00:00"
    with pytest.raises(ParseError, match="outside the supported years"):
        one(coll, record("m1", timestamp="9999-01-01T00:00:00+00:00"))


def test_a_bad_record_is_quarantined_with_file_and_line_the_rest_indexed(tmp_path: Path) -> None:
    coll = collection(tmp_path)
    write(
        tmp_path,
        "chat/staff.jsonl",
        [
            record("m1"),
            "{not json",
            record("m3", timestamp="soon"),
            "",
            record("m1", text="the same id again"),
            record("m5", text="yes pumpkin please"),
        ],
    )
    write(tmp_path, "sms.jsonl", [record("s1", source="sms_message", channel=None)])
    result = parse_collection(coll, scan_manifest(coll, None).table, None, None)
    assert sorted(result.blocks.column("doc_id").to_pylist()) == ["m1", "m5", "s1"]
    errors = {r["line"]: r["error"] for r in result.quarantine.to_pylist()}
    path = tmp_path / "chat" / "staff.jsonl"
    assert sorted(errors) == [2, 3, 5]
    assert errors[2].startswith(f"{path}:2: not valid JSON")
    assert errors[3].startswith(f"{path}:3: 'timestamp' is not ISO 8601")
    assert errors[5] == f"{path}:5: id repeats chat/staff.jsonl:1; ids are unique in a collection"


def test_an_unknown_key_is_read_past_and_noted_once_per_file_at_its_first_line(
    tmp_path: Path,
) -> None:
    """Exports carry extra fields, so a key no field is read from does not quarantine its
    record; but a typo (``recipents``) or an unsupported field (``bcc``) would otherwise vanish
    unseen: the parse outcome notes each once per file, at its first line."""
    coll = collection(tmp_path)
    write(
        tmp_path,
        "chat/staff.jsonl",
        [
            record("m1"),
            record("m2", recipents=["Mike"], bcc=["Jane"]),
            record("m3", recipents=["Jane"]),
            record("m4", recipents=["Jane"], timestamp="soon"),  # quarantined: its error tells
        ],
    )
    write(tmp_path, "sms.jsonl", [record("s1", source="sms_message", recipents=["Mike"])])
    result = parse_collection(coll, scan_manifest(coll, None).table, None, None)
    assert sorted(result.blocks.column("doc_id").to_pylist()) == ["m1", "m2", "m3", "s1"]
    assert [r["doc_id"] for r in result.quarantine.to_pylist()] == ["m4"]
    staff, sms = tmp_path / "chat" / "staff.jsonl", tmp_path / "sms.jsonl"
    keys = "acl, author, cc, channel, id, location, recipients, reply_to, source, subject"
    assert result.notes == [
        {
            "path": str(staff),
            "line": 2,
            "documents": 1,
            "note": f"{staff}:2: unknown key 'bcc' is not read; the keys read: {keys}, "
            "tenant, text, thread, tier, timestamp, title, version",
        },
        {
            "path": str(staff),
            "line": 2,
            "documents": 2,
            "note": f"{staff}:2: unknown key 'recipents' is not read; did you mean "
            "'recipients'? (and in 1 more of this file's documents)",
        },
        {
            "path": str(sms),
            "line": 1,
            "documents": 1,
            "note": f"{sms}:1: unknown key 'recipents' is not read; did you mean 'recipients'?",
        },
    ]
    # read past: the block is as it would be without the key
    doc = next(d for d in kinds.read_documents(coll) if d.doc_id == "m2")
    (m2,) = kinds.parse_document(coll, doc, "0" * 16)
    assert m2.metadata["recipients"] == [] and "recipents" not in json.dumps(m2.to_row())
    assert m2.notes and not one(collection(tmp_path / "plain"), record("m2")).notes


def test_a_record_of_many_unknown_keys_gets_a_few_notes_naming_them_and_a_count(
    tmp_path: Path,
) -> None:
    """An export with 40 extra fields: its typos named first, each with the key it is close
    to, then one note naming five of the rest in key order and counting the others."""
    extra: dict[str, Any] = {f"field_{n:02d}": n for n in range(40)}
    block = one(collection(tmp_path), record("m1", **extra, recipents=["x"], Auther="y"))
    assert block.notes == (
        "unknown key 'Auther' is not read; did you mean 'author'?",
        "unknown key 'recipents' is not read; did you mean 'recipients'?",
        "unknown keys 'field_00', 'field_01', 'field_02', 'field_03', 'field_04' and 35 more "
        f"are not read; the keys read: {', '.join(sorted(KEYS))}",
    )
    assert block.metadata["unit_id"] == "m1"  # read past: the record is indexed
    five = one(collection(tmp_path / "five"), record("m2", **dict(list(extra.items())[:5])))
    assert five.notes == (
        "unknown keys 'field_00', 'field_01', 'field_02', 'field_03', 'field_04' are not read; "
        f"the keys read: {', '.join(sorted(KEYS))}",
    )
    typos = {f"{k}x": 1 for k in ("author", "channel", "source", "subject", "title", "text")}
    many = one(collection(tmp_path / "typos"), record("m3", **typos))
    assert len(many.notes) == MAX_KEY_NOTES + 1  # the sixth typo is one of the rest
    assert many.notes[-1].startswith("unknown key 'titlex' is not read; the keys read: ")


def test_a_file_whose_name_is_not_utf8_is_quarantined_by_that_name_the_rest_indexed(
    tmp_path: Path,
) -> None:
    """A name the file system holds as bytes that are not UTF-8 would fail every table and
    digest it reached (the whole collection's scan): it is listed with those bytes shown as
    \\xNN, and reading it refuses it, naming it so."""
    coll = collection(tmp_path)
    write(tmp_path, "good.jsonl", [record("m1")])
    # "café" with its e-acute in Latin-1: one byte that is no UTF-8
    with open(bytes(tmp_path) + b"/caf\xe9.jsonl", "wb") as fh:
        fh.write((json.dumps(record("m2")) + "\n").encode())
    scan = scan_manifest(coll, None)
    result = parse_collection(coll, scan.table, None, None)
    assert result.blocks.column("doc_id").to_pylist() == ["m1"]
    (bad,) = result.quarantine.to_pylist()
    shown = f"{tmp_path}/caf\\xe9.jsonl"
    assert bad["error"].startswith(f"{shown}: the file name is not UTF-8 text")
    assert "rename the file" in bad["error"]


def test_records_of_a_file_that_went_bad_keep_serving_until_it_reads_whole(
    tmp_path: Path,
) -> None:
    coll = collection(tmp_path, limits=Limits(max_document_bytes=2_000))
    good = [record("m1"), record("m2", text="yes pumpkin please"), record("m3")]
    write(tmp_path, "chat.jsonl", good)
    write(tmp_path, "sms.jsonl", [record("s1", source="sms_message", channel=None)])
    scanned = scan_manifest(coll, None)
    first = parse_collection(coll, scanned.table, None, None)
    manifest, blocks, quarantine = scanned.table, first.blocks, first.quarantine

    def sync() -> tuple[ManifestResult, ParseResult]:
        nonlocal manifest, blocks, quarantine
        scan = scan_manifest(coll, manifest)
        parsed = parse_collection(coll, scan.table, blocks, quarantine)
        manifest, blocks, quarantine = scan.table, parsed.blocks, parsed.quarantine
        return scan, parsed

    def serving() -> list[str]:
        return sorted(set(blocks.column("doc_id").to_pylist()))

    # m2's line is cut short: its id cannot be read, so it may be m2; m2 is held, not deleted
    text = (tmp_path / "chat.jsonl").read_text(encoding="utf-8").splitlines()
    text[1] = text[1][:40]
    (tmp_path / "chat.jsonl").write_text("\n".join(text) + "\n", encoding="utf-8")
    scan, parsed = sync()
    assert (scan.removed, scan.held) == (0, 1)
    assert serving() == ["m1", "m2", "m3", "s1"]
    # a record withdrawn from the index on purpose is never held
    withdrawn = scan_manifest(coll, manifest, withdrawn={"m1"})
    assert (withdrawn.removed, withdrawn.held) == (1, 1)
    (bad,) = parsed.quarantine.to_pylist()
    assert bad["line"] == 2 and bad["error"].startswith(f"{tmp_path / 'chat.jsonl'}:2: ")
    # the whole file over a limit: its records are held as they were, the other file's read
    write(tmp_path, "chat.jsonl", [*good, record("m4", text="x" * 2_000)])
    write(tmp_path, "sms.jsonl", [record("s2", source="sms_message", channel=None)])
    scan, parsed = sync()
    # m1 to m3 and the bad line held; s1 went from a file that reads whole
    assert (scan.removed, scan.held) == (1, 4)
    assert serving() == ["m1", "m2", "m3", "s2"]
    assert any("max_document_bytes" in q["error"] for q in parsed.quarantine.to_pylist())
    # fixed, without m3: the file reads whole, and only now is m3 gone
    write(tmp_path, "chat.jsonl", good[:2])
    scan, parsed = sync()
    assert (scan.held, parsed.quarantined) == (0, 0)
    gone = [r["doc_id"] for r in scan.table.to_pylist() if r["change"] == "removed"]
    assert sorted(gone) == ["chat.jsonl", "chat.jsonl:2", "m3"]  # m3 and the two bad places
    assert serving() == ["m1", "m2", "s2"]


def test_a_record_without_a_valid_id_is_quarantined_never_indexed_by_position(
    tmp_path: Path,
) -> None:
    """A record's id is its document's: a positional name (``<file>:<line>``) would change
    when a line is added above it, so it only ever names a quarantined record."""
    coll = collection(tmp_path)
    nameless = {k: v for k, v in record("x").items() if k != "id"}
    write(
        tmp_path,
        "chat/staff.jsonl",
        [
            nameless,
            record(["x"]),  # type: ignore[arg-type]
            record("   "),
            record(True),  # type: ignore[arg-type]
            record(7),  # type: ignore[arg-type]  # an integer id is its digits
            record("m6", text="\udfff"),
            record("first", timestamp="1900-01-01T00:00:00Z"),
            record("last", timestamp="9998-12-31T23:59:59Z"),
        ],
    )
    result = parse_collection(coll, scan_manifest(coll, None).table, None, None)
    assert sorted(result.blocks.column("doc_id").to_pylist()) == ["7", "first", "last"]
    errors = {r["line"]: r["error"] for r in result.quarantine.to_pylist()}
    path = tmp_path / "chat" / "staff.jsonl"
    assert sorted(errors) == [1, 2, 3, 4, 6]
    assert errors[1] == f"{path}:1: missing 'id'; every record has its own id"
    for line in (2, 3, 4):
        assert errors[line].startswith(f"{path}:{line}: 'id' must be a non-blank string or an")
    assert errors[6].startswith(f"{path}:6: 'text' holds a lone UTF-16 surrogate")


def test_a_bad_lines_place_never_takes_a_records_own_id(tmp_path: Path) -> None:
    coll = collection(tmp_path, limits=Limits(max_document_bytes=1_000))
    # line 1 cannot be read; line 2 is a good record whose id is line 1's place; a third
    # file's record repeats an id, and its place is a fourth record's id
    write(tmp_path, "z.jsonl", ["this is not json", record("z.jsonl:1", text="keep me")])
    write(tmp_path, "a.jsonl", [record("m1"), record("m1@a.jsonl:2")])
    write(tmp_path, "b.jsonl", [record("m1", text="again")])
    # a file that cannot be read (over the size limit), named by its path...
    write(tmp_path, "c.jsonl", [record(f"c{i}") for i in range(8)])
    write(tmp_path, "d.jsonl", [record("c.jsonl", text="...which is this record's id")])
    result = parse_collection(coll, scan_manifest(coll, None).table, None, None)
    served = {r["doc_id"]: r["content"] for r in result.blocks.to_pylist()}
    assert sorted(served) == ["c.jsonl", "m1", "m1@a.jsonl:2", "z.jsonl:1"]
    assert "keep me" in served["z.jsonl:1"]
    quarantined = sorted(r["doc_id"] for r in result.quarantine.to_pylist())
    assert quarantined == ["c.jsonl#2", "m1@b.jsonl:1", "z.jsonl:1#2"]


def test_a_bad_lines_place_name_held_last_scan_is_no_records_id(tmp_path: Path) -> None:
    coll = collection(tmp_path)
    write(tmp_path, "a.jsonl", ["this is not json", record("m1")])
    scan = scan_manifest(coll, None)  # a.jsonl's line 1 is named by its place, a.jsonl:1
    first = parse_collection(coll, scan.table, None, None)
    assert "a.jsonl:1" in first.quarantine.column("doc_id").to_pylist()
    # a good record whose own id is that place name: the id names no record of a.jsonl
    write(tmp_path, "c.jsonl", [record("a.jsonl:1", text="mine")])
    again = scan_manifest(coll, scan.table)
    assert again.held == 0
    parsed = parse_collection(coll, again.table, first.blocks, first.quarantine)
    served = {r["doc_id"]: r["content"] for r in parsed.blocks.to_pylist()}
    assert "mine" in served["a.jsonl:1"]
    assert "a.jsonl:1#2" in parsed.quarantine.column("doc_id").to_pylist()


def test_a_new_file_repeating_an_indexed_id_never_takes_it(tmp_path: Path) -> None:
    coll = collection(tmp_path)
    write(tmp_path, "m.jsonl", [record("m1", text="the original"), record("m2")])
    scan = scan_manifest(coll, None)
    first = parse_collection(coll, scan.table, None, None)
    # a file that sorts first repeats m1: m1 stays the record it was, the newcomer is refused
    write(tmp_path, "0new.jsonl", [record("m1", text="a newcomer"), record("n1")])
    again = scan_manifest(coll, scan.table)
    parsed = parse_collection(coll, again.table, first.blocks, first.quarantine)
    served = {r["doc_id"]: r["content"] for r in parsed.blocks.to_pylist()}
    assert sorted(served) == ["m1", "m2", "n1"] and "the original" in served["m1"]
    (q,) = parsed.quarantine.to_pylist()
    assert (q["doc_id"], q["line"]) == ("m1@0new.jsonl:1", 1)
    assert q["error"].endswith("id repeats m.jsonl:1; ids are unique in a collection")
    # the original's line cut short: it may still be m1, so m1 is held, the newcomer refused
    cut = [json.dumps(record("m1", text="the original"))[:30], json.dumps(record("m2"))]
    (tmp_path / "m.jsonl").write_text("\n".join(cut) + "\n", encoding="utf-8")
    held = scan_manifest(coll, again.table)
    assert held.held == 1
    kept = parse_collection(coll, held.table, parsed.blocks, parsed.quarantine)
    served = {r["doc_id"]: r["content"] for r in kept.blocks.to_pylist()}
    assert "the original" in served["m1"]
    assert "m1@0new.jsonl:1" in kept.quarantine.column("doc_id").to_pylist()
    # the original gone from its file: the newcomer's record is m1 from now on
    write(tmp_path, "m.jsonl", [record("m2")])
    last = scan_manifest(coll, again.table)
    moved = parse_collection(coll, last.table, parsed.blocks, parsed.quarantine)
    served = {r["doc_id"]: r["content"] for r in moved.blocks.to_pylist()}
    assert "a newcomer" in served["m1"] and moved.quarantined == 0


def test_a_few_records_load_from_their_files_alone_named_as_the_collection_names_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading the records a scan named reads the files that hold them (one file for a
    record of one file), and gives each the name, file, line and bytes a read of every file
    gives it; where another file decides a name (a repeat, a place that gives way), every
    file is read and the answer is the same."""
    coll = collection(tmp_path, limits=Limits(max_document_bytes=1_000))
    write(tmp_path, "z.jsonl", ["this is not json", record("z.jsonl:1", text="keep me")])
    write(tmp_path, "a.jsonl", [record("m1"), record("m1@a.jsonl:2"), record("a2")])
    write(tmp_path, "b.jsonl", [record("m1", text="again"), record("b1")])
    write(tmp_path, "c.jsonl", [record(f"c{i}") for i in range(8)])  # over the size limit
    write(tmp_path, "d.jsonl", [record("c.jsonl", text="this record's id is a path")])
    write(tmp_path, "0new.jsonl", [record("b1", text="a newcomer"), record("n1")])
    owners = {"b1": str(tmp_path / "b.jsonl")}  # b1 was b.jsonl's when last scanned
    every = list(kinds.read_documents(coll, owners=owners))
    named = {d.doc_id: d.path for d in every}
    assert {"b1@0new.jsonl:1", "z.jsonl:1#2", "c.jsonl#2", "m1@b.jsonl:1"} <= set(named)
    read: list[str] = []
    reading = messages.read_file

    def spied(collection: CollectionConfig, path: str) -> Any:
        read.append(Path(path).name)
        return reading(collection, path)

    monkeypatch.setattr(messages, "read_file", spied)

    def shown(doc: Any) -> tuple[Any, ...]:
        return (doc.doc_id, doc.path, doc.line, doc.raw, doc.error, doc.unnamed)

    for doc in every:
        read.clear()
        (loaded,) = kinds.load_documents(coll, {doc.doc_id: doc.path}, owners=named)
        assert shown(loaded) == shown(doc)
        if doc.doc_id in ("a2", "b1", "n1", "m1", "z.jsonl:1"):
            assert read == [Path(doc.path).name]  # its file alone
    both = {"a2": named["a2"], "n1": named["n1"]}
    read.clear()
    assert [d.doc_id for d in kinds.load_documents(coll, both, owners=named)] == ["a2", "n1"]
    assert read == ["0new.jsonl", "a.jsonl"]
    # a record no longer in the file the scan found it in: every file is read for it
    write(tmp_path, "a.jsonl", [record("m1"), record("m1@a.jsonl:2")])
    write(tmp_path, "e.jsonl", [record("a2", text="moved")])
    read.clear()
    (moved,) = kinds.load_documents(coll, {"a2": named["a2"]}, owners=named)
    assert moved.path == str(tmp_path / "e.jsonl") and len(read) > 2


def test_a_record_naming_more_people_than_the_limit_is_quarantined(tmp_path: Path) -> None:
    coll = collection(tmp_path, limits=Limits(max_record_people=3))
    docs = {
        "m1": record("m1", recipients=["Ann", "Bob"], cc=["Cy"]),
        "m2": record("m2", recipients=["Ann", "Bob"], cc=["Cy", "Di"]),
    }
    write(tmp_path, "chat.jsonl", list(docs.values()))
    result = parse_collection(coll, scan_manifest(coll, None).table, None, None)
    assert sorted(set(result.blocks.column("doc_id").to_pylist())) == ["m1"]
    (q,) = result.quarantine.to_pylist()
    assert q["doc_id"] == "m2" and q["error"] == (
        f"{tmp_path / 'chat.jsonl'}:2: names 4 recipients and cc, over "
        "limits.max_record_people = 3; name a list address instead, or raise the limit in "
        "corpus.yaml"
    )


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"channel": "c" * 13}, "'channel' is 13 characters, over limits.max_name_chars = 12"),
        ({"channel": None, "thread": "t" * 13}, "'thread' is 13 characters, over limits.max_"),
        ({"author": "a" * 13}, "'author' is 13 characters, over limits.max_name_chars = 12"),
        ({"recipients": ["Ann", "r" * 13]}, "'recipients'\\[1\\] is 13 characters, over"),
        ({"cc": ["c" * 13]}, "'cc'\\[0\\] is 13 characters, over limits.max_name_chars"),
        ({"location": "l" * 13}, "'location' is 13 characters, over limits.max_name_chars"),
        ({"reply_to": "r" * 13}, "'reply_to' is 13 characters, over limits.max_name_chars"),
        ({"subject": "s" * 21}, "'subject' is 21 characters, over limits.max_subject_chars = 20"),
        ({"title": "t" * 21}, "'title' is 21 characters, over limits.max_subject_chars = 20"),
        ({"author": "Sarah\u0000Jones"}, r"'author' holds a control character \('\\x00'\)"),
        ({"recipients": ["Mi\x07ke"]}, r"'recipients'\[0\] holds a control character"),
        ({"cc": ["Ann\nBob"]}, r"'cc'\[0\] holds a control character"),
        ({"channel": "staff\u0085"}, "'channel' holds a control character"),
        ({"location": "Picton\u0000"}, "'location' holds a control character"),
        ({"subject": "Lunch\u001b[31m"}, "'subject' holds a control character"),
        ({"title": "Fall\u0000"}, "'title' holds a control character"),
    ],
)
def test_a_record_field_over_its_bound_or_with_a_control_character_is_quarantined(
    tmp_path: Path, fields: dict[str, Any], problem: str
) -> None:
    """The file's size bounded these alone: a 300 KB channel name went into every record's
    metadata and the group titles, a NUL into an author's name."""
    limits = Limits(max_name_chars=12, max_subject_chars=20)
    coll = collection(tmp_path, limits=limits)
    write(tmp_path, "chat.jsonl", [record("m1"), record("m2", **fields), record("m3")])
    result = parse_collection(coll, scan_manifest(coll, None).table, None, None)
    assert sorted(set(result.blocks.column("doc_id").to_pylist())) == ["m1", "m3"]
    (q,) = result.quarantine.to_pylist()
    assert q["doc_id"] == "m2" and q["line"] == 2
    assert q["error"].startswith(f"{tmp_path / 'chat.jsonl'}:2: ")
    assert re.search(problem, q["error"]), q["error"]


def test_a_record_whose_id_is_over_the_bound_is_quarantined_by_its_place(tmp_path: Path) -> None:
    coll = collection(tmp_path, limits=Limits(max_name_chars=12))
    write(tmp_path, "chat.jsonl", [record("m1"), record("i" * 13), record("i" * 12)])
    result = parse_collection(coll, scan_manifest(coll, None).table, None, None)
    assert sorted(set(result.blocks.column("doc_id").to_pylist())) == ["i" * 12, "m1"]
    (q,) = result.quarantine.to_pylist()
    assert q["doc_id"] == "chat.jsonl:2" and q["error"] == (
        f"{tmp_path / 'chat.jsonl'}:2: 'id' is 13 characters, over limits.max_name_chars = 12; "
        "shorten it or raise the limit in corpus.yaml"
    )


def test_record_fields_are_bounded_by_default(tmp_path: Path) -> None:
    coll = collection(tmp_path)
    long_channel = "c" * 300_000
    write(tmp_path, "chat.jsonl", [record("m1", channel=long_channel), record("m2")])
    result = parse_collection(coll, scan_manifest(coll, None).table, None, None)
    assert sorted(set(result.blocks.column("doc_id").to_pylist())) == ["m2"]
    (q,) = result.quarantine.to_pylist()
    assert "'channel' is 300,000 characters, over limits.max_name_chars = 512" in q["error"]


def test_listed_records_load_in_doc_id_order(tmp_path: Path) -> None:
    coll = collection(tmp_path)
    write(tmp_path, "b.jsonl", [record("z9"), record("a1")])
    write(tmp_path, "a.jsonl", [record("m5")])
    docs = list(kinds.read_documents(coll))
    assert [d.doc_id for d in docs] == ["m5", "z9", "a1"]  # path order, then line order
    assert kinds.list_documents(coll) is None
    loaded = list(kinds.load_documents(coll, {"a1": "", "m5": ""}))
    assert [(d.doc_id, d.line) for d in loaded] == [("a1", 2), ("m5", 1)]
    with pytest.raises(ConfigError, match="has no file of its own"):
        kinds.load_document(coll, "a1", str(tmp_path / "b.jsonl"))


def test_streams_are_bounded(tmp_path: Path) -> None:
    small = collection(tmp_path, limits=Limits(max_document_bytes=300, max_nesting_depth=3))
    write(tmp_path, "ok.jsonl", [record("m1", meta={"a": {"b": {"c": 1}}})])
    write(tmp_path, "big.jsonl", [record(f"m{i}") for i in range(2, 10)])
    docs = {d.doc_id: d for d in kinds.read_documents(small)}
    assert docs["big.jsonl"].error is not None
    assert "over limits.max_document_bytes = 300" in docs["big.jsonl"].error
    with pytest.raises(ParseError, match="nested deeper than limits.max_nesting_depth = 3"):
        kinds.parse_document(small, docs["m1"], "0" * 16)


def test_a_stream_or_log_of_more_lines_than_the_limit_is_refused_unread(tmp_path: Path) -> None:
    """Each line is a unit (or a quarantined line): a file of millions of short lines within
    limits.max_document_bytes would cost millions of blocks."""
    small = collection(tmp_path, limits=Limits(max_stream_lines=3))
    write(tmp_path, "ok.jsonl", [record("m1"), "", record("m2")])
    write(tmp_path, "long.jsonl", ["{}"] * 4)
    docs = {d.doc_id: d for d in kinds.read_documents(small)}
    assert sorted(docs) == ["long.jsonl", "m1", "m2"]
    assert docs["long.jsonl"].error == (
        f"{tmp_path / 'long.jsonl'}: 4 lines, over limits.max_stream_lines = 3; split the "
        "stream into files of fewer lines, or raise the limit in corpus.yaml"
    )
    irc = collection(tmp_path / "irc", format="irc", limits=Limits(max_stream_lines=3))
    log = tmp_path / "irc" / "2004-11-15_03.ascii.txt"
    log.write_text("[03:00] <tom> hi\n" * 3, encoding="utf-8")
    (doc,) = kinds.read_documents(irc)
    assert len(kinds.parse_document(irc, doc, "0" * 16)) == 3
    log.write_text("[03:00] <tom> hi\n" + "\n" * 3, encoding="utf-8")
    (doc,) = kinds.read_documents(irc)
    with pytest.raises(ParseError, match=r"4 lines, over limits.max_stream_lines = 3"):
        kinds.parse_document(irc, doc, "0" * 16)


# -- processing profiles --------------------------------------------------------------------------

EMAIL = """Hi Sarah,

The van is booked for the 24th.

Regards,
Mike Chen
Team Leader | Riverside Support

On Tue, 9 Dec 2025 at 10:00, Sarah Jones <sarah@riverside.org> wrote:
> Can someone book the van?
> Thanks"""


def test_email_loses_quotes_and_signature_and_mentions_cc(tmp_path: Path) -> None:
    coll = collection(tmp_path)
    rec = record(
        "e1",
        source="email_thread",
        channel=None,
        subject="RE: Van for Christmas",
        cc=["jane@riverside.org"],
        recipients=["sarah@riverside.org"],
        text=EMAIL,
    )
    block = one(coll, rec)
    assert block.content["text"] == "Hi Sarah,\n\nThe van is booked for the 24th."
    assert block.metadata["mentions"] == ["jane@riverside.org"]
    assert block.metadata["channel"] == "subject:van for christmas"
    assert message_of(block).mentions == ("sarah@riverside.org", "jane@riverside.org")


REPLY = "Hi Sarah,\n\nConfirmed, the van is booked for the 24th.\n\nMike"
QUOTED = "Can someone book the van?\nThe brakes were fixed on Friday."


@pytest.mark.parametrize(
    "header",
    [
        # Outlook desktop: a rule, then the earlier message's headers
        "________________________________\n"
        "From: Sarah Jones <sarah@riverside.org>\n"
        "Sent: Tuesday, 9 December 2025 10:00 AM\n"
        "To: Mike Chen <mike@riverside.org>\n"
        "Cc: Jane Lee <jane@riverside.org>\n"
        "Subject: Van for Christmas\n",
        # Outlook with an Original Message line, and Outlook for Mac's Date:
        "-----Original Message-----\n"
        "From: Sarah Jones [mailto:sarah@riverside.org]\n"
        "Sent: Tuesday, December 9, 2025 10:00 AM\n"
        "To: Mike Chen\n"
        "Subject: Van for Christmas\n",
        "From: Sarah Jones <sarah@riverside.org>\n"
        "Date: Tuesday, 9 December 2025 at 10:00\n"
        "To: Mike Chen <mike@riverside.org>, Jane Lee <jane@riverside.org>,\n"
        "    Amir Haddad <amir@riverside.org>\n"
        "Subject: RE: Van for Christmas\n",
        # Gmail wrapping a long attribution line
        "On Tue, 9 Dec 2025 at 10:00, Sarah Jones <sarah@riverside.org>\nwrote:\n",
        "On Tue, Dec 9, 2025 at 10:00 AM Sarah Jones <\nsarah@riverside.org> wrote:\n",
        "On Tue, Dec 9, 2025 at 10:00 AM Sarah Jones, Riverside Support\n"
        "Coordinator <\nsarah@riverside.org> wrote:\n",
    ],
)
def test_email_loses_an_outlook_or_wrapped_reply_header_and_what_it_quotes(
    tmp_path: Path, header: str
) -> None:
    for quoted in (QUOTED, "\n".join(f"> {line}" for line in QUOTED.splitlines())):
        text = f"{REPLY}\n\n{header}\n{quoted}"
        rec = record("e1", source="email_thread", channel=None, subject="RE: Van", text=text)
        assert one(collection(tmp_path), rec).content["text"] == REPLY


def test_config_overrides_a_profile_field_by_field(tmp_path: Path) -> None:
    coll = collection(tmp_path, processing={"email_thread": {"strip_signature": False}})
    rec = record("e1", source="email_thread", cc=["Jane"], text=EMAIL)
    text = one(coll, rec).content["text"]
    assert "Mike Chen" in text and "Can someone book" not in text
    cfg = {
        "collections": {
            "chat": {
                "kind": "messages",
                "path": ".",
                "tenant": "t",
                "acl_groups": ["g"],
                "format": "irc",
            }
        },
        "profiles": {"p": {"embedder": "hash:v1-8"}},
    }
    loaded = parse_config(cfg, path=tmp_path / "corpus.yaml").collections["chat"]
    assert loaded.format == "irc" and loaded.processing == {}
    jsonl = {"processing": {"sms_message": {"thread_by_participants": False}}}
    bad = {**cfg, "collections": {"chat": {**cfg["collections"]["chat"], **jsonl}}}
    del bad["collections"]["chat"]["format"]
    loaded = parse_config(bad, path=tmp_path / "corpus.yaml").collections["chat"]
    assert loaded.processing == jsonl["processing"]
    for change, problem in [
        ({"format": "mbox"}, r"collections\.chat\.format: must be one of jsonl, irc"),
        ({"processing": {"fax": {}}}, r"collections\.chat\.processing\.fax: unknown source"),
        (
            {"processing": {"phone_call": {"structure": "poem"}}},
            r"phone_call\.structure: must be one of message, turns, sections",
        ),
        ({"processing": {"phone_call": {"loud": True}}}, r"phone_call\.loud: unknown field"),
        ({"processing": {"phone_call": {"action_items": 1}}}, "must be true or false"),
        ({"kind": "beir", "format": "irc"}, r"chat\.format: the beir kind has no such setting"),
        # overrides that would change nothing: irc logs are read without profiles, and no
        # jsonl record may name the irc source
        (
            {"format": "irc", "processing": {"irc_chat": {"strip_quotes": True}}},
            r"collections\.chat\.processing: an irc collection's logs are read as they are",
        ),
        (
            {"processing": {"irc_chat": {"strip_quotes": True}}},
            r"collections\.chat\.processing\.irc_chat: the irc format's source",
        ),
    ]:
        bad = {**cfg, "collections": {"chat": {**cfg["collections"]["chat"], **change}}}
        if "format" not in change:
            del bad["collections"]["chat"]["format"]
        with pytest.raises(ConfigError, match=problem):
            parse_config(bad, path=tmp_path / "corpus.yaml")


def test_phone_call_in_speaker_turns_with_action_items(tmp_path: Path) -> None:
    text = (
        "Sarah: Hi Mike, it's about John's appointment.\n"
        "Mike [00:12]: Right, I'll call the clinic tomorrow.\n"
        "still Mike talking\n"
        "Action: Sarah to update the roster"
    )
    block = one(collection(tmp_path), record("c1", source="phone_call", text=text))
    assert block.content["turns"] == [
        {"speaker": "Sarah", "text": "Hi Mike, it's about John's appointment."},
        {"speaker": "Mike", "text": "Right, I'll call the clinic tomorrow. still Mike talking"},
    ]
    assert block.content["action_items"] == [
        "I'll call the clinic tomorrow.",
        "Sarah to update the roster",
    ]


@pytest.mark.parametrize(
    "items",
    [
        "Action items: Sarah to update the roster",  # on the heading's line
        "Action items:\n- Sarah to update the roster\n- Mike to ring the clinic",
        "Action items:\n* Sarah to update\n  the roster\n\n* Mike to ring the clinic",
        "ACTION ITEMS:\n1. Sarah to update the roster\n2) Mike to ring the clinic",
    ],
)
def test_phone_call_action_items_on_their_line_or_listed_below(tmp_path: Path, items: str) -> None:
    """Bulleted or numbered items under an ``Action items:`` line are the call's action
    items, not words of the last speaker's turn; the list ends at a line that is not one."""
    text = f"Sarah: Can you ring the clinic?\nMike: Yes.\n{items}\nSarah: Thanks, bye."
    block = one(collection(tmp_path), record("c1", source="phone_call", text=text))
    assert block.content["turns"] == [
        {"speaker": "Sarah", "text": "Can you ring the clinic?"},
        {"speaker": "Mike", "text": "Yes."},
        {"speaker": "Sarah", "text": "Thanks, bye."},
    ]
    listed = ["Sarah to update the roster", "Mike to ring the clinic"]
    assert block.content["action_items"] == (listed[:1] if "items: " in items else listed)


def test_incident_reports_stay_whole_resource_docs_split_by_section(tmp_path: Path) -> None:
    report = "## What happened\nJohn fell in the kitchen.\n\nACTIONS TAKEN\nFirst aid given.\nDoctor called."
    coll = collection(tmp_path)
    block = one(coll, record("i1", source="incident_report", title="Fall", text=report))
    assert block.content["sections"] == [
        {"heading": "What happened", "text": "John fell in the kitchen."},
        {"heading": "ACTIONS TAKEN", "text": "First aid given.\nDoctor called."},
    ]
    # a heading reads as a label, never run into the words below it ("What happened John")
    words = (
        "What happened: John fell in the kitchen. ACTIONS TAKEN: First aid given.\nDoctor called."
    )
    assert message_of(block).text == words
    policy = "Purpose:\nKeep people safe.\nProcedure:\nCall the on-call lead."
    write(
        tmp_path, "stream.jsonl", [record("p1", source="resource_doc", version="3.1", text=policy)]
    )
    parts = blocks_of(coll)["p1"]
    assert [b.block_key for b in parts] == ["section/0", "section/1"]
    assert parts[1].content["heading"] == "Procedure" and parts[1].content["version"] == "3.1"
    assert {b.metadata["version"] for b in parts} == {"3.1"}


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        pytest.param(  # inline, one after another's sentence
            "John: slept well. Amelia: refused breakfast, ate at 10. Kevin Lam: out all day.",
            [("John", "slept well."), ("Amelia", "refused breakfast, ate at 10."),
             ("Kevin Lam", "out all day.")],
            id="inline",
        ),
        pytest.param(  # one a line, a line that continues an entry, a lead line above them
            "Late entry for 4 December.\nJohn: slept well.\nWoke at 6.\nDay hub: closed.",
            [("", "Late entry for 4 December."), ("John", "slept well.\nWoke at 6."),
             ("Day hub", "closed.")],
            id="one-per-line",
        ),
        pytest.param(  # a time's colon has no name before it
            "John: seizure at 7:40, about 3 minutes. Obs at 7:50. Amelia: in bed by 9:30.",
            [("John", "seizure at 7:40, about 3 minutes. Obs at 7:50."),
             ("Amelia", "in bed by 9:30.")],
            id="time",
        ),
        pytest.param(  # labels that are no one, an address, a title's stop: no entry
            "Late entry: written 5 Dec.\nJohn: chart at https://intranet.example/Forms: "
            "seizure. Note: mum rang. Saw Dr. Lee: new meds. Update: fine.",
            [("", "Late entry: written 5 Dec."),
             ("John", "chart at https://intranet.example/Forms: seizure. Note: mum rang. "
                      "Saw Dr. Lee: new meds. Update: fine.")],
            id="late-entry-and-url",
        ),
        pytest.param(  # a name mid-sentence, a lower-case word mid-line: no entry
            "Quiet night. Talked to Jane Okafor: all fine. Then the van: booked in.\nJohn: ok.",
            [("", "Quiet night. Talked to Jane Okafor: all fine. Then the van: booked in."),
             ("John", "ok.")],
            id="not-entries",
        ),
        pytest.param(  # a heading above entries keeps its place
            "AM SHIFT\nJohn: ok.\nAmelia: ok.",
            [("AM SHIFT", ""), ("John", "ok."), ("Amelia", "ok.")],
            id="under-a-heading",
        ),
        pytest.param(  # a sentence adverb or connective before a name is not of it
            "John: ok. Then Amelia: ate well.\nAfter that Kevin Lam: out. and then, Rosa: in.\n"
            "Later on Jo: home. MEANWHILE Sam: fine.",
            [("John", "ok."), ("Amelia", "ate well."), ("Kevin Lam", "out."), ("Rosa", "in."),
             ("Jo", "home."), ("Sam", "fine.")],
            id="leading-words",
        ),
        pytest.param(  # a leading word with no name after it, a name mid-sentence: no entry
            "John: ok.\nFinally: all done. Next door: loud. Then Note: mum rang.\n"
            "Saw Kevin and Amelia: both fine.",
            [("John", "ok.\nFinally: all done. Next door: loud. Then Note: mum rang.\n"
                      "Saw Kevin and Amelia: both fine.")],
            id="leading-words-alone",
        ),
        pytest.param(  # a place heads its own entry (not the person's above); a number no name
            "John: ok.\nHouse: quiet.\nKitchen: clean. Bathroom: mat out.\nRoom 3: window "
            "stuck.\nUnit 4: fine.\nLiving room: tidy.\nAmelia: ok.",
            [("John", "ok."), ("House", "quiet."), ("Kitchen", "clean."),
             ("Bathroom", "mat out.\nRoom 3: window stuck.\nUnit 4: fine."),
             ("Living room", "tidy."), ("Amelia", "ok.")],
            id="places",
        ),
        pytest.param(  # people stay people: two words, a title's name, a place word as a name
            "Amelia Jones: ok. Then Dr. Lee: rang.\nVan Nguyen: ok.\nAndrew: ok.",
            [("Amelia Jones", "ok. Then Dr. Lee: rang."), ("Van Nguyen", "ok."),
             ("Andrew", "ok.")],
            id="still-people",
        ),
    ],
)  # fmt: skip
def test_shift_notes_are_sections_by_participant(text: str, parts: list[tuple[str, str]]) -> None:
    got = message_profiles.sections(text, by_participant=True)
    assert [(p["heading"], p["text"]) for p in got] == parts


def test_a_shift_note_record_is_one_block_its_sections_its_participants(tmp_path: Path) -> None:
    """The note stays one block (one unit); its words read as written, ``John: ...``, so a
    name never runs into the words after it. An override turns the split off."""
    text = "Late entry.\nJohn: slept well. Amelia: ate well."
    rec = record("n1", source="shift_note", text=text)
    block = one(collection(tmp_path), rec)
    assert block.block_key == "message/0" and block.metadata["unit_id"] == "n1"
    assert block.content["sections"] == [
        {"heading": "", "text": "Late entry."},
        {"heading": "John", "text": "slept well."},
        {"heading": "Amelia", "text": "ate well."},
    ]
    assert message_of(block).text == "Late entry. John: slept well. Amelia: ate well."
    off = collection(tmp_path, processing={"shift_note": {"by_participant": False}})
    assert one(off, rec).content["sections"] == [{"heading": "", "text": text}]


@pytest.mark.parametrize(
    ("text", "headings"),
    [
        # "3 Steps" (one level, no "." or ")") and "2.5 litres" (lower case) are no headings
        ("1. Purpose\nKeep people safe.\n2.5 litres a day\n3 Steps\n\n2) Scope\nAll staff.\n"
         "3.1 Steps\nCall the lead.", ["1. Purpose", "2) Scope", "3.1 Steps"]),
        ("Title\nVersion 2\n1. Purpose\nKeep safe.\nRESPONSE\nCall.\n2. After\nReport it.",
         ["", "1. Purpose", "RESPONSE", "2. After"]),
        # a line next to the one numbered before or after it is a list's item, as is one that
        # ends a sentence; a heading may sit right above a list
        ("2. Procedure\n1. Call 000\n2. Stay with them\n3. Note the time\n\n3) After\n"
         "Report it.", ["2. Procedure", "3) After"]),
        ("1. Purpose\nKeep safe.\n2. Steps\n1. Call 000.\nThen wait.", ["1. Purpose", "2. Steps"]),
    ],
)  # fmt: skip
def test_numbered_headings_start_sections(text: str, headings: list[str]) -> None:
    assert [p["heading"] for p in message_profiles.sections(text)] == headings


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("Seizure Procedure\nVersion 3.2, effective 1 November 2025. Replaces version 3.1.", "3.2"),
        ("Van checklist\nv2.1, reviewed March 2025\n1. Before every trip", "2.1"),
        ("Version: 4\nAll staff.", "4"),
        ("Hoist procedure\nReplaces version 2.2.\nVersion 2.3", "2.3"),  # not another's
        ("Policy\n" + "Line.\n" * 5 + "Version 9", ""),  # too far down to be its own
        ("The v2 roster is out.", ""),
    ],
)  # fmt: skip
def test_a_documents_version_from_its_text(text: str, version: str) -> None:
    assert message_profiles.text_version(text) == version


def test_a_resource_doc_without_a_version_field_takes_its_texts(tmp_path: Path) -> None:
    policy = "Hoist procedure\nVersion 2.3, effective 10 December 2025.\n\n1. Scope\nAll hoists."
    coll = collection(tmp_path)
    write(tmp_path, "s.jsonl", [
        record("p1", source="resource_doc", text=policy),
        record("p2", source="resource_doc", version="7", text=policy),
        record("n1", source="shift_note", text=policy),  # only a document's text names one
    ])  # fmt: skip
    found = blocks_of(coll)
    assert [(b.content["heading"], b.content["version"]) for b in found["p1"]] == [
        ("", "2.3"),
        ("1. Scope", "2.3"),
    ]
    assert {b.metadata["version"] for b in found["p1"]} == {"2.3"}
    assert {b.metadata["version"] for b in found["p2"]} == {"7"}  # the field wins
    assert "version" not in found["n1"][0].metadata


SAMPLE = Path(__file__).resolve().parents[1] / "sample_corpus" / "messages" / "wattle"


def test_the_samples_shift_notes_and_policies_split_as_written(tmp_path: Path) -> None:
    """A real shift note is a section per participant; a real policy a block per numbered
    section, each with the version its text gives; every block of a record is its unit."""
    coll = CollectionConfig(
        name="wattle",
        kind="messages",
        path=SAMPLE,
        tenant="wattle",
        acl_groups=("wattle-staff", "wattle-managers", "wattle-coordinators"),
    )
    found = blocks_of(coll)
    (note,) = found["wg-sn-001"]
    # "House: ..." is the house's: a part of its own, not Amelia's
    assert [p["heading"] for p in note.content["sections"]] == ["John", "Amelia", "House"]
    assert note.content["sections"][1]["text"].startswith("Ate well, level 6 dinner")
    assert note.content["sections"][2]["text"] == "Handover to Daniel at 10:30 about John's checks."
    # people, and places and things that head their own part; no label ("Staff:", "Other:")
    people = {"John", "Amelia", "Kevin", "Rosa", "House", "Van"}
    notes = [b for bs in found.values() for b in bs if b.metadata["source"] == "shift_note"]
    assert {p["heading"] for b in notes for p in b.content["sections"]} == {"", *people}
    (late,) = found["wg-sn-003"]
    assert [p["heading"] for p in late.content["sections"]] == ["", "John", "Amelia"]
    assert "7:40pm" in late.content["sections"][1]["text"]  # a time is no entry
    policy = found["wg-doc-001"]
    assert [b.content["heading"] for b in policy] == [
        "", "1. Purpose", "2. During a seizure", "3. Emergency medication",
        "4. When to call 000", "5. After a seizure", "6. Recording",
    ]  # fmt: skip
    assert {(b.content["version"], b.metadata["version"]) for b in policy} == {("3.2", "3.2")}
    assert {b.metadata["unit_id"] for b in policy} == {"wg-doc-001"}
    assert len({b.block_key for b in policy}) == len(policy)


def test_sms_without_a_channel_is_threaded_by_its_people(tmp_path: Path) -> None:
    rec = record("s1", source="sms_message", channel=None, author="Mike", recipients=["sarah"])
    assert one(collection(tmp_path), rec).metadata["channel"] == "people:mike,sarah"


def test_signature_and_quote_helpers_leave_plain_text_alone() -> None:
    plain = "Thanks for the update, see you at 3."
    assert message_profiles.strip_quotes(plain) == plain
    assert message_profiles.strip_signature(plain) == plain
    assert message_profiles.strip_signature("Body\n-- \nSarah\n0400 000 000") == "Body"
    # a reply's own lines that only look like headers
    own = "From: the roster team\nTo: all staff\n\nOn Friday 12 Dec I'll drive, as Mike\nsaid."
    assert message_profiles.strip_quotes(own) == own


# -- the irc layout ----------------------------------------------------------------------------

LOG = """\
[10:00] <alice> how do I mount a usb drive?
=== eve [~eve@example.org] has joined #ubuntu
[10:01] <carol> alice: plug it in and look under /media
[10:02] <alice> carol: thanks
[10:03] <bob> dave: anyone there?
"""


def test_irc_logs_are_units_per_line_with_their_mentions(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "2020-01-02_10.ascii.txt").write_text(LOG, encoding="utf-8")
    (tmp_path / "dev" / "2020-01-02_10.annotation.txt").write_text("0 0 -\n", encoding="utf-8")
    coll = collection(tmp_path, format="irc")
    assert kinds.list_documents(coll) == [
        ("dev/2020-01-02_10", str(tmp_path / "dev" / "2020-01-02_10.ascii.txt"))
    ]
    (blocks,) = blocks_of(coll).values()
    meta = [b.metadata for b in blocks]
    assert [m["unit_id"] for m in meta] == [f"2020-01-02_10:{i}" for i in range(5)]
    assert [b.section for b in blocks] == ["irc_chat", "irc_system", *["irc_chat"] * 3]
    assert [MESSAGES.granularity(b.section, {}) for b in blocks[:2]] == ["block", None]
    assert [m["mentions"] for m in meta] == [[], [], ["alice"], ["carol"], []]  # dave never spoke
    assert meta[2]["timestamp"] == "2020-01-02T10:01:00+00:00"
    assert meta[1]["timestamp"] == meta[0]["timestamp"]  # a system line takes the time before
    # grouping through the kind is grouping the logs
    through_kind = group_conversations([message_of(b) for b in blocks])
    direct = group_conversations(read_folder(tmp_path / "dev")["2020-01-02_10"])
    assert sorted(map(sorted, through_kind)) == sorted(map(sorted, direct))


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("notes", "an irc log's file name starts with its date"),
        ("2004-13-45", "2004-13-45, the date the file name starts with, is not a valid date"),
        ("2004-02-30_01", "2004-02-30, the date the file name starts with, is not a valid date"),
        ("9999-12-31", "9999-12-31, .* is outside the supported years 1900 to 9998"),
        ("1899-12-31", "1899-12-31, .* is outside the supported years 1900 to 9998"),
    ],
)
def test_an_irc_log_needs_a_dated_name(tmp_path: Path, name: str, problem: str) -> None:
    (tmp_path / f"{name}.ascii.txt").write_text(LOG, encoding="utf-8")
    coll = collection(tmp_path, format="irc")
    (doc,) = kinds.read_documents(coll)
    with pytest.raises(ParseError, match=problem) as info:
        kinds.parse_document(coll, doc, "0" * 16)
    assert str(info.value).startswith(f"{tmp_path / name}.ascii.txt: ")
    assert replace(coll, format="").format == ""


@pytest.mark.parametrize(
    ("nick", "error", "problem"),
    [
        (
            "b" * 13,
            LimitExceededError,
            "the nick is 13 characters, over limits.max_name_chars = 12; shorten it or raise "
            "the limit in corpus.yaml",
        ),
        (
            "b\x1bob",
            ParseError,
            "the nick holds a control character ('\\x1b'), which no name may hold; remove it",
        ),
    ],
    ids=["over the bound", "a control character"],
)
def test_an_irc_log_with_a_nick_no_name_may_be_is_refused_naming_its_line(
    tmp_path: Path, nick: str, error: type[Exception], problem: str
) -> None:
    """A nick goes into its units' metadata and the titles of their groups, as a messages
    record's author does: only the log's size bounded it, and a NUL or an escape in it could
    be neither a filter's value nor part of a title."""
    log = f"[10:00] <alice> hi\n[10:01] <{nick}> hello\n"
    (tmp_path / "2020-01-02_10.ascii.txt").write_text(log, encoding="utf-8")
    coll = collection(tmp_path, format="irc", limits=Limits(max_name_chars=12))
    (doc,) = kinds.read_documents(coll)
    with pytest.raises(error) as info:
        kinds.parse_document(coll, doc, "0" * 16)
    assert str(info.value) == f"{tmp_path / '2020-01-02_10.ascii.txt'}:2: {problem}"
    if error is LimitExceededError:  # the bound is the config's: raised, the log is read
        assert len(kinds.parse_document(replace(coll, limits=Limits()), doc, "0" * 16)) == 2


def test_a_long_timestamp_that_is_not_a_time_is_named_shortened(tmp_path: Path) -> None:
    coll = collection(tmp_path)
    write(tmp_path, "chat.jsonl", [record("m1", timestamp="9" * 100_000), record("m2")])
    result = parse_collection(coll, scan_manifest(coll, None).table, None, None)
    assert result.blocks.column("doc_id").unique().to_pylist() == ["m2"]
    (q,) = result.quarantine.to_pylist()
    assert q["error"].startswith(f"{tmp_path / 'chat.jsonl'}:1: 'timestamp' is not ISO 8601: '999")
    assert len(q["error"]) < 200 + len(str(tmp_path)), len(q["error"])


def test_an_irc_log_with_another_logs_file_name_is_refused_not_merged(tmp_path: Path) -> None:
    name = "2020-01-02_10.ascii.txt"
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / name).write_text(LOG, encoding="utf-8")
    coll = collection(tmp_path, format="irc")
    scan = scan_manifest(coll, None)
    first = parse_collection(coll, scan.table, None, None)
    assert set(first.blocks.column("doc_id").to_pylist()) == {"sub/2020-01-02_10"}
    # a log of the same name sorts first: it takes the name, the other is refused, named
    (tmp_path / name).write_text("[10:00] <erin> another channel\n", encoding="utf-8")
    again = scan_manifest(coll, scan.table)
    parsed = parse_collection(coll, again.table, first.blocks, first.quarantine)
    assert set(parsed.blocks.column("doc_id").to_pylist()) == {"2020-01-02_10"}
    (q,) = parsed.quarantine.to_pylist()
    assert q["doc_id"] == "sub/2020-01-02_10"
    assert "another log, 2020-01-02_10.ascii.txt, has the same file name" in q["error"]
    units = [json.loads(m)["unit_id"] for m in parsed.blocks.column("metadata").to_pylist()]
    assert units == ["2020-01-02_10:0"]  # one log's units, never two joined


def test_an_irc_log_may_start_with_a_byte_order_mark(tmp_path: Path) -> None:
    (tmp_path / "2020-01-02_10.ascii.txt").write_bytes(b"\xef\xbb\xbf" + LOG.encode())
    coll = collection(tmp_path, format="irc")
    (blocks,) = blocks_of(coll).values()
    assert blocks[0].section == "irc_chat" and blocks[0].metadata["author"] == "alice"


def test_an_irc_clock_that_runs_past_the_supported_years_names_the_line(tmp_path: Path) -> None:
    log = "[23:00] <alice> still up?\n=== bob has joined\n[00:10] <bob> alice: yes\n"
    (tmp_path / "9998-12-31.ascii.txt").write_text(log, encoding="utf-8")
    (tmp_path / "9998-12-30.ascii.txt").write_text(log, encoding="utf-8")
    coll = collection(tmp_path, format="irc")
    late, last = kinds.read_documents(coll)
    assert len(kinds.parse_document(coll, late, "0" * 16)) == 3  # rolls over into 9998-12-31
    with pytest.raises(ParseError, match="passes midnight into 9999-01-01 here") as info:
        kinds.parse_document(coll, last, "0" * 16)
    assert str(info.value).startswith(f"{tmp_path / '9998-12-31.ascii.txt'}:3: ")


def test_a_hit_reads_as_who_where_and_what(tmp_path: Path) -> None:
    stored = "discord_chat\nauthor: Mike\nlocation: Picton SIL\ntext: roast pumpkin and lamb?"
    shown = kinds.excerpt_of({"kind": "messages", "text": stored, "section": "discord_chat"})
    assert shown == "Mike (Picton SIL): roast pumpkin and lamb?"
    turns = "phone_call\nturns[0].speaker: Sarah\nturns[0].text: I'll call the clinic tomorrow"
    assert kinds.excerpt_of({"kind": "messages", "text": turns, "section": "phone_call"}) == (
        "Speaker: Sarah. I'll call the clinic tomorrow."
    )
