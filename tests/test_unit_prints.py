"""What the ``linked_groups`` step hashed of each unit is kept for the next run
(``unit_prints``): the kept digests are those the run makes, a unit whose blocks changed is
hashed again while the others' are taken as kept, and a table of other code is not read."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpus_index import doctor
from corpus_index.home import Home
from corpus_index.identity_resume import record_digest
from corpus_index.linked.decisions import _OPEN_PROPOSAL, decision_sentence
from corpus_index.linked.lastrun import LastRun
from corpus_index.linked.memo import Memo
from corpus_index.linked.messages import Message
from corpus_index.linked.model import LinkModel
from corpus_index.linked.questions import ANSWER_WINDOW_S, CONVERSATIONAL, question_of
from corpus_index.linked.relink import fingerprint, model_digest
from corpus_index.linked.settled import UNMADE_TYPES
from corpus_index.steps.linked_groups import (
    _UNIT_COLUMNS,
    GROUPS,
    MEMBERS,
    MEMO,
    unit_reading,
    unit_row_digests,
)
from corpus_index.unit_prints import (
    CODE_KEY,
    LAST_RUN_KEY,
    MESSAGE_COLUMNS,
    PRINTS,
    code_key,
    kept_messages,
    known_prints,
    prints_table,
    row_digests,
)
from tests.test_linked_incremental import COLLECTION, SAMPLE, append, configure, edit, link

ROWS = pa.table(
    {
        "doc_id": ["d1", "d1", "d2"],
        "content": ['{"text": "van keys?"}', '{"text": "van keys?"}', '{"text": "yes"}'],
        "metadata": ['{"unit_id": "u1"}', '{"unit_id": "u1"}', None],
        "event_date": ["2025-12-01", "2025-12-01", ""],
        "tenant_id": ["wattle", "wattle", "wattle"],
        "acl_groups": [["staff"], ["staff"], []],
        "tier": ["restricted", "restricted", None],
        "source_id": ["w/d1", "w/d1", "w/d2"],
    }
)


def _changed(column: str, value: object) -> pa.Table:
    values = ROWS[column].to_pylist()
    values[0] = value
    i = ROWS.column_names.index(column)
    return ROWS.set_column(i, column, pa.array(values, ROWS.schema.field(column).type))


def test_equal_rows_have_equal_digests_and_any_changed_value_another() -> None:
    first, again, other = row_digests(ROWS)
    assert first == again != other and len(first.split(":")) == 2
    changes = {
        "doc_id": "d9",
        "content": '{"text": "van keys!"}',
        "metadata": None,  # a null is not the value, nor an empty one
        "event_date": None,
        "tenant_id": "wattle ",
        "acl_groups": [],  # nor an empty list, nor another group
        "tier": "",
        "source_id": "w/d9",
    }
    seen = {first}
    for column, value in changes.items():
        digest = row_digests(_changed(column, value))[0]
        assert digest not in seen, column
        seen.add(digest)
    assert row_digests(_changed("acl_groups", ["staff", "leads"]))[0] not in seen
    assert row_digests(ROWS.slice(0, 0)) == []


def test_another_process_makes_the_same_digests(tmp_path: Path) -> None:
    pq.write_table(ROWS, tmp_path / "rows.parquet")
    script = (
        "import json, sys, pyarrow.parquet as pq\n"
        "from corpus_index.unit_prints import row_digests\n"
        "print(json.dumps(row_digests(pq.read_table(sys.argv[1]))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "rows.parquet")],
        check=True,
        capture_output=True,
        text=True,
    )
    assert json.loads(out.stdout) == row_digests(ROWS)


def _linked(root: Path) -> tuple[Path, Home]:
    source = root / "source"
    shutil.copytree(SAMPLE, source)
    settings = configure(root, source)
    assert link(settings).passed
    return source, Home(settings)


def _prints(home: Home) -> dict[str, dict[str, str]]:
    table = home.warehouse.read(PRINTS, (COLLECTION,))
    assert table is not None
    return {r["unit_id"]: r for r in table.to_pylist()}


def test_the_kept_digests_are_those_a_run_makes(tmp_path: Path) -> None:
    """One row per unit: the groupings' fingerprint of its message, the linker's (with the
    model's digest) for a linked message, and the identity pass's digest of its record, each
    equal to the same digest made afresh, with the digest of the unit's blocks."""
    _, home = _linked(tmp_path)
    blocks = home.read("parsed_blocks", (COLLECTION,))
    reading = unit_reading(blocks, digests=unit_row_digests(blocks))
    kept = _prints(home)
    assert set(kept) == {u.message.unit_id for u in reading.units}
    model = model_digest(LinkModel.load())
    linked = fingerprinted = 0
    for unit in reading.units:
        m = unit.message
        row = kept[m.unit_id]
        assert row["blocks"] == reading.digests[m.unit_id]
        # (a unit no key of the run read has none)
        assert row["fingerprint"] in ("", Memo().fingerprint(m))
        fingerprinted += bool(row["fingerprint"])
        assert row["record"] == record_digest(reading.records[m.unit_id])
        if row["link_print"]:
            linked += 1
            assert (row["link_model"], row["link_print"]) == (model, fingerprint(m, model=model))
    assert linked > len(reading.units) // 2  # chat, SMS, e-mail and calls are linked
    assert fingerprinted > 0.9 * len(reading.units)
    assert len(set(row_digests(blocks.select(_UNIT_COLUMNS)))) == blocks.num_rows


def test_each_question_keeps_the_key_of_its_answers_and_each_unit_its_block(
    tmp_path: Path,
) -> None:
    """A question's row holds the key the memo keeps its scored answers under, every other
    unit's row "" (it asks nothing); each unit's block is the TF-IDF block it was weighed in
    (the sample is one block, weighed by itself), and the metadata holds what each block was
    weighed by and the answer window the keys were made with."""
    _, home = _linked(tmp_path)
    kept = _prints(home)
    memo = home.warehouse.read(MEMO, (COLLECTION,))
    assert memo is not None
    keys = set(memo["key"].to_pylist())
    asked = 0
    for unit in unit_reading(home.read("parsed_blocks", (COLLECTION,))).units:
        m = unit.message
        row = kept[m.unit_id]
        conversational = m.source in CONVERSATIONAL and not m.system
        if conversational and question_of(m.text) is not None:
            assert row["question"] in keys
            asked += 1
        else:
            assert row["question"] == ""
        assert row["block"] == 0
    assert asked >= 10
    table = home.warehouse.read(PRINTS, (COLLECTION,))
    assert table is not None
    noted = json.loads((table.schema.metadata or {})[LAST_RUN_KEY])
    assert noted["window_s"] == ANSWER_WINDOW_S
    assert [len(w) for w in noted["weighing"].values()] == [1]
    assert noted["weighing"]["wattle"][0].startswith("own:")


def test_a_changed_unit_is_hashed_again_and_the_others_taken_as_kept(tmp_path: Path) -> None:
    """After an edit, every unit but the edited one is taken from the table (a digest planted
    in it for an unchanged unit comes back as planted: it was not made again), and the edited
    unit's digests are made from its new text."""
    source, home = _linked(tmp_path)
    table = home.warehouse.read(PRINTS, (COLLECTION,))
    assert table is not None
    rows = table.to_pylist()
    chat = source / "chat-picton-sil.jsonl"
    edited = json.loads(chat.read_text(encoding="utf-8").splitlines()[10])["id"]
    planted = next(r for r in rows if r["unit_id"] != edited and r["link_print"])
    planted["record"] = "0" * 32
    home.warehouse.write(PRINTS, (COLLECTION,), pa.Table.from_pylist(rows, table.schema))
    before = {r["unit_id"]: r for r in rows}
    edit(source)
    again = link(home.settings)
    assert again.passed and again.prints_kept == again.units - 1
    after = _prints(home)
    assert after[planted["unit_id"]]["record"] == "0" * 32
    assert after[edited]["blocks"] != before[edited]["blocks"]
    assert after[edited]["fingerprint"] != before[edited]["fingerprint"]
    assert after[edited]["link_print"] != before[edited]["link_print"]
    m = next(
        u.message
        for u in unit_reading(home.read("parsed_blocks", (COLLECTION,))).units
        if u.message.unit_id == edited
    )
    assert after[edited]["fingerprint"] == Memo().fingerprint(m)


def test_a_units_settled_digest_is_taken_while_it_is_weighed_as_it_was(tmp_path: Path) -> None:
    """With nothing changed, each unit's digest in the settled keys is taken from the table:
    one planted for a unit comes back as planted, and the groups holding that unit whose
    keys read it (an incident, a decision or a topic: a conversation, question or day as it
    was is carried by its members' ids, see corpus_index.linked.settled) are not found settled (their rows are made again,
    the same). Once a message arrives in the sample's only TF-IDF block, every unit is
    weighed anew and its digest made again."""
    source, home = _linked(tmp_path)
    table = home.warehouse.read(PRINTS, (COLLECTION,))
    assert table is not None
    rows = table.to_pylist()
    assert sum(r["parts"] is not None for r in rows) > 0.9 * len(rows)
    groups = home.warehouse.read(GROUPS, (COLLECTION,))
    members = home.warehouse.read(MEMBERS, (COLLECTION,))
    assert groups is not None and members is not None
    keyed = {g["group_id"] for g in groups.to_pylist() if g["group_type"] not in UNMADE_TYPES}
    held = {m["unit_id"] for m in members.to_pylist() if m["group_id"] in keyed}
    planted = next(r for r in rows if r["parts"] is not None and r["unit_id"] in held)
    planted["parts"] = b"\0" * 32
    home.warehouse.write(PRINTS, (COLLECTION,), pa.Table.from_pylist(rows, table.schema))
    again = link(home.settings)
    assert again.passed and 0 < again.carried < again.groups
    assert _prints(home)[planted["unit_id"]]["parts"] == b"\0" * 32
    append(source)
    later = link(home.settings)
    assert later.passed
    assert _prints(home)[planted["unit_id"]]["parts"] not in (None, b"\0" * 32)


def test_what_a_units_text_says_to_the_decision_threads_is_kept_while_it_is_as_it_was(
    tmp_path: Path,
) -> None:
    """Each unit's decision sentence ("" for none), and whether it proposes for the
    conversations read for an open thread, are kept as its text gives them; one planted for a
    unit that is as it was comes back as planted (taken, not read again), and an edited
    unit's is read from its new text."""
    source, home = _linked(tmp_path)
    kept = _prints(home)
    units = unit_reading(home.read("parsed_blocks", (COLLECTION,))).units
    for unit in units:
        m = unit.message
        row = kept[m.unit_id]
        assert row["decides"] == (decision_sentence(m.text) or "")
        if row["proposes"] is not None:
            assert row["proposes"] == bool(_OPEN_PROPOSAL.search(m.text))
    assert any(r["decides"] for r in kept.values())
    assert any(r["proposes"] is not None for r in kept.values())
    table = home.warehouse.read(PRINTS, (COLLECTION,))
    assert table is not None
    rows = table.to_pylist()
    planted = next(r for r in rows if not r["decides"])
    planted["decides"] = "We'll go with the planted plan."
    home.warehouse.write(PRINTS, (COLLECTION,), pa.Table.from_pylist(rows, table.schema))
    assert link(home.settings).passed
    assert _prints(home)[planted["unit_id"]]["decides"] == "We'll go with the planted plan."
    chat = source / "chat-picton-sil.jsonl"
    edited = json.loads(chat.read_text(encoding="utf-8").splitlines()[10])["id"]
    edit(source)
    assert link(home.settings).passed
    m = next(
        u.message
        for u in unit_reading(home.read("parsed_blocks", (COLLECTION,))).units
        if u.message.unit_id == edited
    )
    assert _prints(home)[edited]["decides"] == (decision_sentence(m.text) or "")


@pytest.mark.parametrize("damage", ["other code", "no key"])
def test_a_table_of_other_code_is_not_read(tmp_path: Path, damage: str) -> None:
    _, home = _linked(tmp_path)
    table = home.warehouse.read(PRINTS, (COLLECTION,))
    assert table is not None and (table.schema.metadata or {})[CODE_KEY] == code_key().encode()
    meta = {CODE_KEY: b"other"} if damage == "other code" else {}
    home.warehouse.write(PRINTS, (COLLECTION,), table.replace_schema_metadata(meta))
    again = link(home.settings)
    assert again.passed and again.prints_kept == 0
    kept = home.warehouse.read(PRINTS, (COLLECTION,))
    assert kept is not None and kept.to_pylist() == table.to_pylist()  # made again, the same


def test_a_table_without_the_message_columns_is_not_damage_and_is_written_anew(
    tmp_path: Path,
) -> None:
    """A table an earlier version wrote (no message columns) is not damage to the doctor; the
    next run reads every row and hashes every unit, and writes the table with them."""
    _, home = _linked(tmp_path)
    table = home.warehouse.read(PRINTS, (COLLECTION,))
    assert table is not None
    older = table.drop_columns(MESSAGE_COLUMNS)
    path = Path(home.warehouse.path(PRINTS, COLLECTION).path)
    pq.write_table(older, path)
    assert not [f for f in doctor.check(home.settings) if f.name.startswith(PRINTS)]
    again = link(home.settings)
    assert again.passed and again.prints_kept == 0 and again.rows_not_decoded == 0
    kept = home.warehouse.read(PRINTS, (COLLECTION,))
    assert kept is not None and kept.to_pylist() == table.to_pylist()
    # and read from it next: every row of a unit of one row (a policy is a row a section)
    assert link(home.settings).rows_not_decoded == _units_of_one_row(table)


def _units_of_one_row(table: pa.Table) -> int:
    """How many units of a prints table were read from one parsed-blocks row."""
    return sum("+" not in digest for digest in table["blocks"].to_pylist())


def test_a_damaged_table_costs_a_run_its_hashing_and_is_written_anew(tmp_path: Path) -> None:
    _, home = _linked(tmp_path)
    path = Path(home.warehouse.path(PRINTS, COLLECTION).path)
    good = pq.read_table(path).to_pylist()
    path.write_bytes(b"not parquet")
    again = link(home.settings)
    assert again.passed and again.prints_kept == 0
    assert pq.read_table(path).to_pylist() == good


def test_a_unit_read_from_its_kept_message_is_the_unit_decoded(tmp_path: Path) -> None:
    """Each unit of one row keeps the message it was read as; the next reading takes it for a
    row with the same digest instead of decoding the row, and gives the same units, records
    and digests as decoding every row: a unit whose rows changed (here: one cut into two
    blocks) is decoded, its first row's message joined with the second's as before."""
    settings = configure(tmp_path, SAMPLE)
    link(settings)
    home = Home(settings)
    table = home.warehouse.read(PRINTS, (COLLECTION,))
    kept = kept_messages(table)
    assert table is not None
    # the sample's units of one row each; its policies are a row a section and keep none
    one_row = _units_of_one_row(table)
    assert len(kept) == one_row and 0 < one_row < table.num_rows
    blocks = home.read("parsed_blocks", (COLLECTION,))
    first = blocks.slice(0, 1).to_pylist()[0]
    second = dict(first, block_id="second", content=json.dumps({"text": "and the rest"}))
    blocks = pa.concat_tables([blocks, pa.Table.from_pylist([second], blocks.schema)])
    decoded = unit_reading(blocks, digests=unit_row_digests(blocks))
    taken = unit_reading(blocks, digests=unit_row_digests(blocks), kept=kept)
    # the new row decoded, as are the policies' rows (no one row of theirs reads as the unit)
    assert decoded.taken == 0 and taken.taken == one_row
    assert taken.units == decoded.units and taken.digests == decoded.digests
    assert {u: dict(r) for u, r in taken.records.items()} == decoded.records
    assert all(
        record_digest(taken.records[u]) == record_digest(r) for u, r in decoded.records.items()
    )
    cut = json.loads(first["metadata"]).get("unit_id", first["doc_id"])
    joined = next(u.message for u in taken.units if u.message.unit_id == cut)
    assert joined.text.endswith(" and the rest") and "+" in taken.digests[cut]
    # a unit of two rows keeps no message: no one row reads as it
    prints = prints_table(
        [(cut, "s", "t", taken.digests[cut])], fingerprints={}, links={}, records={},
        messages=[joined],
    )  # fmt: skip
    assert kept_messages(prints) == {}


@pytest.mark.parametrize(
    "odd",
    [
        {"reply_to": 7},  # a record's reply_to that was not a string
        {"mentions": ("Sarah", 3)},
        {"text": "half a pair \ud83d"},  # a lone surrogate: no UTF-8 for it
    ],
)
def test_a_message_the_columns_cannot_give_back_is_not_kept(odd: dict[str, object]) -> None:
    """Only what the message columns give back exactly is kept: a message with a field of
    another type than a reading makes, or a text Arrow cannot hold, is read again next time
    (the others of the run are kept, unless a text cannot be written at all)."""
    plain = Message("u1", "#staff", "Sarah", "van keys?", 1.75e9, None, ("Tom",), False, "chat")
    other = Message("u2", "#staff", "Tom", "yes", 1.75e9 + 60, "u1")
    rows = [("u1", "s", "t", "1:1"), ("u2", "s", "t", "2:2")]
    made = prints_table(rows, fingerprints={}, links={}, records={}, messages=[plain, other])
    assert kept_messages(made) == {"1:1": plain, "2:2": other}
    odd_one = replace(plain, **odd)  # type: ignore[arg-type]
    table = prints_table(rows, fingerprints={}, links={}, records={}, messages=[odd_one, other])
    got = kept_messages(table)
    assert "1:1" not in got
    if "text" not in odd:
        assert got == {"2:2": other}


def test_a_kept_message_is_written_again_from_its_kept_row() -> None:
    """A unit whose message was taken from the kept rows has that row written again as it is
    (not made anew from the message); a message read anew is made from its fields, and one
    that cannot be written (a lone surrogate) leaves its row empty but the kept rows kept."""
    plain = Message("u1", "#staff", "Sarah", "van keys?", 1.75e9, None, ("Tom",), False, "chat")
    other = Message("u2", "#staff", "Tom", "yes", 1.75e9 + 60, "u1")
    rows = [("u1", "s", "t", "1:1"), ("u2", "s", "t", "2:2")]
    kept = kept_messages(
        prints_table(rows, fingerprints={}, links={}, records={}, messages=[plain, other])
    )
    fresh = Message("u3", "#staff", "Ana", "thanks", 1.75e9 + 90, "u1", ("Tom", "Sarah"))
    # a kept row that is not the message given (an equal one read anew) is not taken
    again = replace(other)
    more = [*rows, ("u3", "s", "t", "3:3")]
    made = prints_table(
        more, fingerprints={}, links={}, records={}, messages=[kept["1:1"], again, fresh], kept=kept
    )
    assert kept_messages(made) == {"1:1": plain, "2:2": other, "3:3": fresh}
    odd = replace(fresh, text="half a pair \ud83d")
    made = prints_table(
        more, fingerprints={}, links={}, records={}, messages=[kept["1:1"], None, odd], kept=kept
    )
    assert kept_messages(made) == {"1:1": plain}  # u2 not to keep; u3 cannot be written
    # the kept row is taken by its position, wherever its unit stands now
    turned = prints_table(
        [rows[1], rows[0]], fingerprints={}, links={}, records={},
        messages=[kept["2:2"], kept["1:1"]], kept=kept,
    )  # fmt: skip
    assert kept_messages(turned) == {"2:2": other, "1:1": plain}


def test_two_tenants_prints_are_read_back_as_each_tenants_run_left_them() -> None:
    """Each unit's row holds what its own tenant's run made of it (never another tenant's
    value for the same id), empty where the run made none; reading the table back gives, of
    the units whose rows are as they were, exactly those values, and nothing of the others."""
    units = [(f"u{i}", f"s{i}", "a" if i % 3 else "b", f"d{i}") for i in range(30)]
    runs = {
        "a": LastRun(made_keys={f"u{i}": f"qa{i}" for i in range(30) if i % 3 and i % 2}),
        "b": LastRun(
            made_keys={f"u{i}": "" for i in range(0, 30, 3)},
            made_blocks={f"u{i}": i // 7 for i in range(0, 30, 3)},
            made_parts={f"u{i}": bytes([i]) for i in range(0, 30, 6)},
            made_decides={"u3": "we'll take the van"},
            made_proposes={"u3": True, "u6": False},
        ),
    }
    # a value of tenant a's run for a unit of tenant b is not that unit's
    runs["a"].made_blocks = {"u3": 99, "u1": 0}
    fingerprints = {f"u{i}": f"f{i}" for i in range(0, 30, 2)}
    links = {f"u{i}": ("m", f"l{i}") for i in range(0, 30, 5)}
    records = {f"u{i}": f"r{i}" for i in range(1, 30, 4)}
    table = prints_table(
        units, fingerprints=fingerprints, links=links, records=records, last=runs, window_s=60.0
    )
    for row, (unit, source, tenant, digest) in zip(table.to_pylist(), units, strict=True):
        mine = runs[tenant]
        assert (row["unit_id"], row["source_id"], row["tenant_id"], row["blocks"]) == (
            unit, source, tenant, digest,
        )  # fmt: skip
        assert row["fingerprint"] == fingerprints.get(unit, "")
        assert (row["link_model"], row["link_print"]) == links.get(unit, ("", ""))
        assert row["record"] == records.get(unit, "")
        assert row["question"] == mine.made_keys.get(unit)
        assert row["block"] == mine.made_blocks.get(unit)
        assert row["parts"] == mine.made_parts.get(unit)
        assert row["decides"] == mine.made_decides.get(unit)
        assert row["proposes"] == mine.made_proposes.get(unit)
    same = {u: d for u, _, _, d in units if u not in ("u3", "u4")}  # u3, u4 edited since
    known = known_prints(table, same)
    assert known.units == 28
    assert known.fingerprints == {u: f for u, f in fingerprints.items() if u in same}
    assert known.links == {u: x for u, x in links.items() if u in same}
    assert known.records == {u: r for u, r in records.items() if u in same}
    both = {**runs["a"].made_keys, **runs["b"].made_keys}
    assert known.questions == {u: k for u, k in both.items() if u in same}
    assert known.blocks == {"u0": 0, "u6": 0, "u9": 1, "u12": 1, "u15": 2, "u18": 2, "u21": 3,
                            "u24": 3, "u27": 3, "u1": 0}  # fmt: skip
    assert known.parts == {"b": {u: p for u, p in runs["b"].made_parts.items() if u in same}}
    assert known.decides == {} and known.proposes == {"u6": False}
