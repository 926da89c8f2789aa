"""The identity pass from the last pass's state (``corpus_index.identity_resume``): after units
are only appended it reads the new ones alone, and after an edit, a deletion or a late unit it
re-reads the new and changed ones alone, each giving what the full pass gives; a change to the
registry (someone new, a detail seen first elsewhere, a changed people or merges file, a
recorded merge) runs the full pass. The state goes through a real warehouse partition; the
``linked_groups`` step resumes on the sample collection, and a deletion drops the removed
unit's row of the state and the header values it lists."""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from corpus_index import identity_store
from corpus_index.doctor import _check_warehouse
from corpus_index.hashing import canonical_json, sha256_hex
from corpus_index.home import Home
from corpus_index.identity_pass import TenantIdentities, identify, resume, unit_records
from corpus_index.identity_resume import (
    PASS_COLUMNS_LATER,
    STATE_KEY,
    PassState,
    identify_since,
    read_states,
    record_digest,
    state_table,
)
from corpus_index.steps.linked_groups import _json, read_units, unit_reading
from corpus_index.warehouse import Warehouse
from tests.test_linked_incremental import SAMPLE, configure, link, tables

TENANT = "wattle"
FIELDS = ("author", "recipients", "cc", "title", "subject", "source", "timestamp")
Record = dict[str, Any]


def sample_records() -> list[Record]:
    """The sample collection's units as the identity pass reads them, and one unit by a
    person on file for nobody (discovered by name)."""
    out = []
    for path in sorted(SAMPLE.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                raw = json.loads(line)
                rec = {k: raw.get(k) for k in FIELDS}
                rec |= {"id": raw["id"], "text": raw["text"], "tenant_id": TENANT}
                out.append(rec | {"source_id": f"{TENANT}/{path.stem}"})
    kim = dict(out[-1], id="x-kim", author="Kim Lowe", recipients=[], cc=[])
    kim |= {"source": "discord_chat", "text": "left the van keys with Sarah"}
    return [*out, kim | {"timestamp": "2025-11-20T10:00:00+11:00"}]


def later(records: list[Record], n: int = 1, **fields: Any) -> list[Record]:
    """``n`` new units after every unit of ``records``, by the author of the last chat
    message (a header the pass has seen), one minute apart."""
    chat = [r for r in records if r["source"] == "discord_chat"]
    end = max(str(r["timestamp"]) for r in records)
    new = []
    for k in range(n):
        rec = dict(chat[-1], id=f"new-{k}", text=f"Can Tom check the van keys are back? ({k})")
        rec["timestamp"] = _after(end, k + 1)
        new.append(rec | fields)
    return new


def _after(stamp: str, minutes: int) -> str:
    return (dt.datetime.fromisoformat(stamp) + dt.timedelta(minutes=minutes)).isoformat()


class Inputs(NamedTuple):
    people: Path
    merges_file: Path | None = None
    recorded: tuple[tuple[str, str], ...] = ()

    def options(self) -> dict[str, Any]:
        return {"people": self.people, "merges_file": self.merges_file, "recorded": self.recorded}


@pytest.fixture
def inputs(tmp_path: Path) -> Inputs:
    people = tmp_path / "people.yaml"
    shutil.copy(SAMPLE / "people.yaml", people)
    return Inputs(people)


def through_warehouse(tmp_path: Path, state: PassState) -> PassState:
    """``state`` written to a warehouse partition and read back, as the step keeps it."""
    wh = Warehouse(tmp_path / "warehouse")
    wh.write(identity_store.PASS, ("chat",), state_table({TENANT: state}))
    return read_states(wh.read(identity_store.PASS, ("chat",)))[TENANT]


def since(
    tmp_path: Path, records: list[Record], then: list[Record], inputs: Inputs
) -> tuple[TenantIdentities, PassState]:
    """The pass over ``records``, then over ``then`` from its state (kept in a warehouse)."""
    _, state = identify_since(None, TENANT, records, **inputs.options())
    return identify_since(through_warehouse(tmp_path, state), TENANT, then, **inputs.options())


def assert_same(got: TenantIdentities, want: TenantIdentities) -> None:
    assert list(got.registry) == list(want.registry)
    assert got.registry.digest() == want.registry.digest()
    assert got.mentions == want.mentions
    assert got.sightings == want.sightings
    assert got.merges == want.merges
    assert got.not_here == want.not_here
    assert got.reading == want.reading


def test_the_state_reads_back_as_written(tmp_path: Path, inputs: Inputs) -> None:
    found, state = identify_since(None, TENANT, sample_records(), **inputs.options())
    assert found.read == len(state.units) > 100 and found.mentions and found.sightings
    assert through_warehouse(tmp_path, state) == state
    assert read_states(None) == {} and read_states(state_table({})) == {}


def _file_merges(inputs: Inputs, records: list[Record]) -> Inputs:
    """A merges file folding the discovered Kim Lowe into Sarah Jones, and a recorded merge
    of Tom Hadley into Mike Brennan (so a new unit naming Tom is anchored to Mike)."""
    assert inputs.people is not None
    merges = inputs.people.parent / "merges.yaml"
    pairs = [{"merge": "discovered:kim lowe", "into": "sarah-jones"}]
    merges.write_text(yaml.safe_dump({"merges": pairs}), encoding="utf-8")
    return inputs._replace(merges_file=merges, recorded=(("tom-hadley", "mike-brennan"),))


APPENDS: dict[str, Callable[[list[Record]], list[Record]]] = {
    "one chat message naming people on file": lambda rs: later(rs),
    "an e-mail to people seen before": lambda rs: [
        dict(
            [r for r in rs if r["source"] == "email_thread"][-1],
            id="new-mail",
            timestamp=_after(max(str(r["timestamp"]) for r in rs), 5),
            text="Hi Sarah, Mike and Kim Lowe: the portal is back up. Jane",
        )
    ],
    "several units, in any order": lambda rs: list(reversed(later(rs, 3))),
    "a unit naming no one": lambda rs: later(rs, text="ok"),
}


@pytest.mark.parametrize("merged", [False, True], ids=["no merges", "merges"])
@pytest.mark.parametrize("append", list(APPENDS.values()), ids=list(APPENDS))
def test_appended_units_alone_are_read_and_the_result_is_the_full_pass(
    tmp_path: Path,
    inputs: Inputs,
    append: Callable[[list[Record]], list[Record]],
    merged: bool,
) -> None:
    records = sample_records()
    if merged:
        inputs = _file_merges(inputs, records)
    new = append(records)
    grown = [*records, *new]
    resumed, state = since(tmp_path, records, grown, inputs)
    full = identify(TENANT, grown, **inputs.options())
    assert resumed.read == len(new) < full.read == len(grown)  # the resumed path was taken
    assert_same(resumed, full)
    assert {r["id"] for r in new} <= {m.unit_id for m in resumed.mentions}  # authors at least
    if merged:
        assert resumed.merges and resumed.merges == full.merges
    # and the state it leaves is the one a full pass leaves
    assert state == identify_since(None, TENANT, grown, **inputs.options())[1]


def test_the_kept_rows_pass_through_as_rows(tmp_path: Path, inputs: Inputs) -> None:
    records = sample_records()
    grown = [*records, *later(records)]
    resumed, _ = since(tmp_path, records, grown, inputs)
    full = identify(TENANT, grown, **inputs.options())
    for got, want in ((resumed.mentions, full.mentions), (resumed.sightings, full.sightings)):
        assert got.kept_rows == len(want) - len(got.more) > 0 and len(got) == len(want)
        assert got.table().equals(want.table())
        assert got.column("tenant_id") == [TENANT] * len(want)
        assert got == want and got[-1] == want[-1]  # and decoded, the same records


def test_nothing_new_reads_nothing(tmp_path: Path, inputs: Inputs) -> None:
    records = sample_records()
    again, _ = since(tmp_path, records, records, inputs)
    assert again.read == 0
    assert_same(again, identify(TENANT, records, **inputs.options()))


def _edit(rs: list[Record]) -> list[Record]:
    return [dict(r, text=r["text"] + " Mike too.") if r["id"] == rs[3]["id"] else r for r in rs]


def _late(rs: list[Record]) -> list[Record]:
    (new,) = later(rs)
    return [*rs, dict(new, timestamp=min(str(r["timestamp"]) for r in rs))]


def _same_time_earlier_id(rs: list[Record]) -> list[Record]:
    last = max(rs, key=lambda r: (str(r["timestamp"]), r["id"]))
    return [*rs, dict(last, id="0-first", text="Sarah, Tom here")]


# (change, how many units it makes new or changed): read again alone
REREADS: dict[str, tuple[Callable[[list[Record]], list[Record]], int]] = {
    "an edited unit": (lambda rs: [*_edit(rs), *later(rs)], 2),
    "a deleted unit": (lambda rs: [*rs[:5], *rs[6:], *later(rs)], 1),
    "a unit earlier than the last": (_late, 1),
    "a unit at the last time with an earlier id": (_same_time_earlier_id, 1),
    "an edited unit and a deleted one, nothing new": (lambda rs: [*_edit(rs)[:5], *rs[6:]], 1),
}


@pytest.mark.parametrize("merged", [False, True], ids=["no merges", "merges"])
@pytest.mark.parametrize("change", list(REREADS.values()), ids=list(REREADS))
def test_other_changes_read_the_changed_units_alone_and_give_the_full_pass(
    tmp_path: Path,
    inputs: Inputs,
    change: tuple[Callable[[list[Record]], list[Record]], int],
    merged: bool,
) -> None:
    """An edit, a deletion or a unit out of order, whose header values leave the registry as
    it was: the pass re-reads the new and changed units alone, wherever they fall, and gives
    what the full pass gives, with the state a full pass leaves."""
    records = sample_records()
    if merged:
        inputs = _file_merges(inputs, records)
    make, changed = change
    then = make(records)
    again, state = since(tmp_path, records, then, inputs)
    full = identify(TENANT, then, **inputs.options())
    assert again.read == changed < full.read == len(then)
    assert_same(again, full)
    assert again.mentions.table().equals(full.mentions.table())
    assert again.sightings.table().equals(full.sightings.table())
    assert state == identify_since(None, TENANT, then, **inputs.options())[1]
    wh = Warehouse(tmp_path / "again")
    wh.write(identity_store.PASS, ("chat",), state_table({TENANT: state}))
    fresh = identify_since(None, TENANT, then, **inputs.options())[1]
    wh.write(identity_store.PASS, ("fresh",), state_table({TENANT: fresh}))
    written = [wh.read(identity_store.PASS, (p,)) for p in ("chat", "fresh")]
    assert written[0] is not None and written[1] is not None
    assert written[0].equals(written[1])


class Spied(Mapping[str, Any]):
    """A record that notes whether anything but its id and tenant was read (as the step's
    records of units as they were decode their block's metadata when first read)."""

    def __init__(self, record: Record) -> None:
        self.record, self.read = record, False

    def __getitem__(self, key: str) -> Any:
        if key not in ("id", "tenant_id"):
            self.read = True
        return self.record[key]

    def __iter__(self) -> Iterator[str]:
        self.read = True
        return iter(self.record)

    def __len__(self) -> int:
        self.read = True
        return len(self.record)


def test_a_reread_reads_no_record_of_a_unit_as_it_was(tmp_path: Path, inputs: Inputs) -> None:
    """After an edit and a unit out of order, the order and the registry's growth are taken
    from the kept rows: only the new and changed records are read beyond their id and tenant,
    and the result is the full pass's."""
    records = sample_records()
    _, state = identify_since(None, TENANT, records, **inputs.options())
    then = _late(_edit(records))
    changed = {r["id"] for r in then if r not in records}
    assert len(changed) == 2
    known = {u: d for u, d in state.units.items() if u not in changed}  # as the step gives
    spied = [Spied(r) for r in then]
    kept = through_warehouse(tmp_path, state)
    again, after = identify_since(kept, TENANT, spied, known=known, **inputs.options())
    assert again.read == 2
    assert {r["id"] for r in spied if r.read} == changed
    assert_same(again, identify(TENANT, then, **inputs.options()))
    assert after == identify_since(None, TENANT, then, **inputs.options())[1]


def test_a_state_written_before_the_places_and_headers_runs_the_full_pass_then_resumes(
    tmp_path: Path, inputs: Inputs
) -> None:
    """A state an earlier version wrote, without each unit's place and header values: the
    doctor finds nothing wrong with it, the pass reads none of it (a full pass), and the state
    that pass leaves is read again."""
    records = sample_records()
    _, state = identify_since(None, TENANT, records, **inputs.options())
    wh = Warehouse(tmp_path / "warehouse")
    table = state_table({TENANT: state})
    earlier = table.drop_columns(list(PASS_COLUMNS_LATER))
    wh.write(identity_store.PASS, ("chat",), earlier.replace_schema_metadata(table.schema.metadata))
    assert _check_warehouse(wh) == []
    assert read_states(wh.read(identity_store.PASS, ("chat",))) == {}
    then = [*records, *later(records)]
    full, after = identify_since(None, TENANT, then, **inputs.options())
    assert full.read == len(then)
    wh.write(identity_store.PASS, ("chat",), state_table({TENANT: after}))
    again, _ = identify_since(
        read_states(wh.read(identity_store.PASS, ("chat",)))[TENANT],
        TENANT,
        [*then, *(dict(r, id=f"next-{r['id']}") for r in later(then))],
        **inputs.options(),
    )
    assert again.read == 1  # the appended unit alone: the state was read


def test_a_state_without_a_units_row_does_not_reread(tmp_path: Path, inputs: Inputs) -> None:
    """A state resumed after an append, not read back from its table, keeps no row of the new
    units: an edit then runs the full pass rather than lose them."""
    records = sample_records()
    _, first = identify_since(None, TENANT, records, **inputs.options())
    grown = [*records, *later(records)]
    _, appended_to = identify_since(
        through_warehouse(tmp_path, first), TENANT, grown, **inputs.options()
    )
    assert appended_to.kept is not None and appended_to.kept.num_rows == len(records)
    then = _edit(grown)
    again, _ = identify_since(appended_to, TENANT, then, **inputs.options())
    full = identify(TENANT, then, **inputs.options())
    assert again.read == full.read == len(then)
    assert_same(again, full)


FALLBACKS: dict[str, Callable[[list[Record]], list[Record]]] = {
    "a new person": lambda rs: [*rs, *later(rs, author="Zara Quinn")],
    "a discovered person's new address": lambda rs: [
        *rs,
        *later(rs, author="Kim Lowe <kim.lowe@example.org>"),
    ],
    # the only unit that named Kim Lowe: the registry discovered from the rest lacks her
    "the deletion of the one unit naming someone": lambda rs: [r for r in rs if r["id"] != "x-kim"],
}


@pytest.mark.parametrize("change", list(FALLBACKS.values()), ids=list(FALLBACKS))
def test_a_change_to_the_registry_runs_the_full_pass(
    tmp_path: Path, inputs: Inputs, change: Callable[[list[Record]], list[Record]]
) -> None:
    records = sample_records()
    then = change(records)
    again, _ = since(tmp_path, records, then, inputs)
    full = identify(TENANT, then, **inputs.options())
    assert again.read == full.read == len(then)
    assert_same(again, full)


def test_a_state_of_the_earlier_digest_runs_the_full_pass(tmp_path: Path, inputs: Inputs) -> None:
    """A state whose unit digests are of the earlier form (the record's canonical JSON) is
    read as every unit changed, never as a match."""
    records = sample_records()
    _, state = identify_since(None, TENANT, records, **inputs.options())
    earlier = {u: sha256_hex(canonical_json(r))[:32] for u, r in ((r["id"], r) for r in records)}
    old = replace(through_warehouse(tmp_path, state), units={u: earlier[u] for u in state.units})
    then = [*records, *later(records)]
    again, _ = identify_since(old, TENANT, then, **inputs.options())
    assert again.read == len(then)
    assert_same(again, identify(TENANT, then, **inputs.options()))


@pytest.mark.parametrize("key", [*FIELDS, "id", "text", "tenant_id", "source_id"])
def test_a_record_digest_moves_with_every_field(key: str) -> None:
    record = sample_records()[3]
    for other in ("x", None, ["x"], 1):
        if record.get(key) != other:
            assert record_digest(dict(record, **{key: other})) != record_digest(record)
    assert record_digest(dict(record)) == record_digest(record)


def test_resume_refuses_units_that_would_change_the_registry(inputs: Inputs) -> None:
    records = sample_records()
    first = identify(TENANT, records, **inputs.options())
    known = later(records)
    assert resume(TENANT, known, first.reading, **inputs.options()) is not None
    for author in ("Zara Quinn", "Kim Lowe <kim.lowe@example.org>", "0499 000 111"):
        stranger = later(records, author=author)
        assert resume(TENANT, stranger, first.reading, **inputs.options()) is None, author


def _new_alias(inputs: Inputs) -> Inputs:
    people = yaml.safe_load(inputs.people.read_text(encoding="utf-8"))
    people["people"][0]["aliases"].append("Kim")
    inputs.people.write_text(yaml.safe_dump(people), encoding="utf-8")
    return inputs


def _new_merges(inputs: Inputs) -> Inputs:
    merges = inputs.people.parent / "merges.yaml"
    merges.write_text(yaml.safe_dump({"merges": []}), encoding="utf-8")
    return inputs._replace(merges_file=merges)


INPUT_CHANGES: dict[str, Callable[[Inputs], Inputs]] = {
    "a new alias in the people file": _new_alias,
    "a merges file": _new_merges,
    "a recorded merge": lambda i: i._replace(recorded=(("tom-hadley", "mike-brennan"),)),
}


@pytest.mark.parametrize("change", list(INPUT_CHANGES.values()), ids=list(INPUT_CHANGES))
def test_changed_inputs_run_the_full_pass(
    tmp_path: Path, inputs: Inputs, change: Callable[[Inputs], Inputs]
) -> None:
    records = sample_records()
    _, state = identify_since(None, TENANT, records, **inputs.options())
    grown = [*records, *later(records)]
    inputs = change(inputs)
    again, _ = identify_since(through_warehouse(tmp_path, state), TENANT, grown, **inputs.options())
    full = identify(TENANT, grown, **inputs.options())
    assert again.read == full.read == len(grown)
    assert_same(again, full)


# ---------------------------------------------------------------------- the step


def _append(source: Path) -> None:
    chat = source / "chat-picton-sil.jsonl"
    records = [json.loads(x) for x in chat.read_text(encoding="utf-8").splitlines() if x]
    new = dict(records[-1], id="wg-dc-new", text="Sarah, can Tom check the van keys are back?")
    new["timestamp"] = "2026-01-31T23:50:00+11:00"
    chat.write_text("".join(json.dumps(r) + "\n" for r in [*records, new]), encoding="utf-8")


def _drop_unit(source: Path, unit: str) -> None:
    chat = source / "chat-picton-sil.jsonl"
    lines = [x for x in chat.read_text(encoding="utf-8").splitlines() if x]
    kept = [x for x in lines if json.loads(x)["id"] != unit]
    chat.write_text("".join(x + "\n" for x in kept), encoding="utf-8")


def _fresh(tmp_path: Path, source: Path) -> tuple[Any, dict[str, Any]]:
    copy = tmp_path / "fresh" / "source"
    shutil.copytree(source, copy)
    settings = configure(copy.parent, copy)
    outcome = link(settings)
    wh = Warehouse(settings.home / "warehouse")
    state = wh.read(identity_store.PASS, ("wattle",))
    assert state is not None
    return outcome, {**tables(settings), identity_store.PASS: state.to_pylist()}


def test_the_step_resumes_after_an_append_and_after_a_deletion(tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(SAMPLE, source)
    settings = configure(tmp_path, source)
    first = link(settings)
    assert first.passed and first.identity_read == first.units

    _append(source)
    again = link(settings)
    assert again.passed and again.identity_read == 1
    fresh, want = _fresh(tmp_path / "a", source)
    assert fresh.identity_read == fresh.units == again.units
    wh = Warehouse(settings.home / "warehouse")
    state = wh.read(identity_store.PASS, ("wattle",))
    assert state is not None
    assert {**tables(settings), identity_store.PASS: state.to_pylist()} == want

    # the deletion path drops the unit's row of the state, with its mentions, and the header
    # values the state listed; the next pass re-reads what changed (nothing here) and reads
    # the registry's header values from the units left
    mentioned = {r["unit_id"] for r in want[identity_store.MENTIONS]}
    unit = "wg-dc-new"
    assert unit in mentioned
    home = Home(settings)
    removed = dict(identity_store.remove_units(home, "wattle", [unit]))
    assert removed[str(wh.path(identity_store.PASS, "wattle"))] == 1
    left = wh.read(identity_store.PASS, ("wattle",))
    assert left is not None and unit not in left["unit_id"].to_pylist()
    assert left.num_rows == first.units
    meta = json.loads((left.schema.metadata or {})[STATE_KEY])
    assert meta["wattle"]["headers"] == [] and meta["wattle"]["appendable"] is False
    assert unit not in json.dumps(meta)
    _drop_unit(source, unit)
    after = link(settings)
    assert after.passed and after.identity_read == 0 and after.units == first.units
    fresh, want = _fresh(tmp_path / "b", source)
    state = wh.read(identity_store.PASS, ("wattle",))
    assert state is not None
    assert {**tables(settings), identity_store.PASS: state.to_pylist()} == want


def test_one_reading_gives_the_units_and_the_records_the_pass_reads(tmp_path: Path) -> None:
    """The step decodes each block once for both the units and the identity pass's records:
    the same units and records as reading each on its own, a unit cut into two blocks
    included (its text the blocks' in order, its scope and source the first block's)."""
    settings = configure(tmp_path, SAMPLE)
    link(settings)
    blocks = Home(settings).read("parsed_blocks", ("wattle",))
    first = blocks.slice(0, 1).to_pylist()[0]
    meta = json.loads(first["metadata"])
    second = dict(first, block_id="second", source_id="elsewhere", tenant_id="other")
    second["content"] = json.dumps({"text": "and the rest of it"})
    second["metadata"] = json.dumps(dict(meta, author="someone else"))
    blocks = pa.concat_tables([blocks, pa.Table.from_pylist([second], blocks.schema)])
    reading = unit_reading(blocks)
    units = read_units(blocks)
    rows = zip(blocks["doc_id"].to_pylist(), blocks["metadata"].to_pylist(), strict=True)
    unit_ids = {json.loads(m or "{}").get("unit_id", d) for d, m in rows}
    # a unit a record: the policies are a block a section, so there are fewer units than rows
    assert reading.units == units and len(units) == len(unit_ids) < blocks.num_rows - 1
    texts = {u.message.unit_id: u.message.text for u in units}
    assert reading.records == unit_records(blocks, texts)
    cut = reading.records[meta.get("unit_id", first["doc_id"])]
    assert cut["text"].endswith(" and the rest of it") and cut["author"] == meta.get("author")
    assert (cut["tenant_id"], cut["source_id"]) == (first["tenant_id"], first["source_id"])
    assert unit_reading(blocks, records=False) == (units, {}, {}, 0)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(value=_JSON, pad=st.sampled_from(["", " ", "\n", " x", "[", "}", ",1", "\ufeff"]))
def test_a_block_column_decodes_as_json_loads_does(value: Any, pad: str) -> None:
    """The step's decoding of a block's content or metadata gives what ``json.loads`` gives
    (the same value, or the same error), whatever follows or precedes the JSON value."""
    for text in (json.dumps(value), json.dumps(value) + pad, pad + json.dumps(value)):
        try:
            want: Any = json.loads(text)
        except ValueError as e:
            with pytest.raises(type(e), match=re.escape(str(e))):
                _json(text)
        else:
            assert _json(text) == want
