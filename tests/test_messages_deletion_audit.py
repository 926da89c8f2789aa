"""A deleted e-mail of the messages sample leaves nothing the deletion audit finds, although
its header (``author: Sarah Jones <sarah.jones@...>``) is in the identity snippets of many
live units: only what the deleted unit alone held proves anything. A row keyed by the unit,
not by the source (a group's member, a kept grouping result), that still names it is found."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import yaml
from click.testing import CliRunner

from corpus_index.cli import main
from corpus_index.compaction import compact
from corpus_index.config import Settings
from corpus_index.deletion import audit_deletion
from corpus_index.group_records import MEMBER_SCHEMA
from corpus_index.home import Home
from corpus_index.linked.memo import MEMO_SCHEMA
from tests.searchkit import ROOT, build_home, messages_config

GONE = "wg-em-002"
COLLECTION = "wattle-messages"


def _deleted(tmp_path: Path) -> Home:
    """The wattle messages home after a sync that deleted the e-mail ``GONE`` and a compaction."""
    config_path = messages_config(tmp_path)
    config = yaml.safe_load(config_path.read_text())
    wattle = tmp_path / "wattle"
    shutil.copytree(ROOT / "sample_corpus" / "messages" / "wattle", wattle)
    config["collections"] = {COLLECTION: config["collections"][COLLECTION]}
    config["collections"][COLLECTION]["path"] = str(wattle)
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    corpus = build_home(Settings(config_path=config_path, home=tmp_path / "home"))
    email = wattle / "email.jsonl"
    records = [json.loads(line) for line in email.read_text().splitlines() if line.strip()]
    gone = next(r for r in records if r["id"] == GONE)
    shared = [r for r in records if r["id"] != GONE and r["author"] == gone["author"]]
    assert shared  # its author's header is in live units' snippets too
    email.write_text("".join(json.dumps(r) + "\n" for r in records if r["id"] != GONE))
    build_home(corpus.settings)  # the sync: the deletion, then the rest again
    compact(Home(corpus.settings))
    return Home(corpus.settings)


def test_a_deleted_email_leaves_nothing_the_audit_finds(tmp_path: Path) -> None:
    audit = audit_deletion(_deleted(tmp_path), f"{COLLECTION}/{GONE}")
    assert audit["clean"], audit["remaining"]
    assert audit["byte_scan"]["status"] == "done"
    assert audit["units"] == 1  # the receipt keeps the deleted unit's id


def test_a_row_left_naming_a_deleted_unit_is_found(tmp_path: Path) -> None:
    """A group member and a kept grouping result that name the deleted unit, written back
    after the deletion (a sync cut short, a restored backup), are named with their partition,
    though neither row has a ``source_id``."""
    home = _deleted(tmp_path)
    wh = home.warehouse

    def unit_findings() -> list[dict[str, object]]:
        audit = audit_deletion(home, f"{COLLECTION}/{GONE}")
        return [r for r in audit["remaining"] if r["match"] == "unit"]

    assert unit_findings() == []
    members = wh.read("group_members", (COLLECTION,))
    assert members is not None and members.num_rows
    kept = members.to_pylist()[0]  # a membership of a live group, left naming the deleted unit
    left = pa.Table.from_pylist([{**kept, "unit_id": GONE}], schema=MEMBER_SCHEMA)
    wh.write("group_members", (COLLECTION,), pa.concat_tables([members.cast(MEMBER_SCHEMA), left]))
    assert unit_findings() == [
        {
            "store": "warehouse",
            "path": str(wh.path("group_members", COLLECTION)),
            "rows": 1,
            "match": "unit",
        }
    ]

    wh.write("group_members", (COLLECTION,), members)
    memo = pa.Table.from_pylist(
        [{"key": "k", "value": "v", "tenant_id": "t", "units": ["wg-em-001", GONE]}],
        schema=MEMO_SCHEMA,
    )
    wh.write("group_memo", (COLLECTION,), memo)
    assert [r["path"] for r in unit_findings()] == [str(wh.path("group_memo", COLLECTION))]


LOG = "[10:00] <alice> how do I mount a usb drive?\n[10:01] <carol> alice: /media\n"
STEM = "2020-01-02_10"


def test_a_unit_a_live_log_holds_is_not_a_finding(tmp_path: Path) -> None:
    """Two irc logs of one file name in two folders: the first is read, the other refused
    (their lines' unit ids are the same). Once the first is deleted the other is read, with
    those unit ids; its groups are not the deleted log's leftovers."""
    for folder in ("a", "b"):
        (tmp_path / "irc" / folder).mkdir(parents=True)
        (tmp_path / "irc" / folder / f"{STEM}.ascii.txt").write_text(LOG, encoding="utf-8")
    config = tmp_path / "corpus.yaml"
    collection = {
        "kind": "messages",
        "tenant": "t",
        "namespace": "chat",
        "format": "irc",
        "acl_groups": ["staff"],
    }
    config.write_text(
        yaml.safe_dump(
            {
                "collections": {"irc": {**collection, "path": str(tmp_path / "irc")}},
                "profiles": {"hash": {"embedder": "hash:v1-64", "namespace": "chat"}},
                "namespaces": {"chat": {"eval_gate": "off"}},
            }
        )
    )
    home = build_home(Settings(config_path=config, home=tmp_path / "home"))
    (tmp_path / "irc" / "a" / f"{STEM}.ascii.txt").unlink()
    build_home(home.settings)
    compact(Home(home.settings))
    home = Home(home.settings)
    blocks = home.warehouse.read("parsed_blocks", ("irc",))
    assert blocks is not None and set(blocks["source_id"].to_pylist()) == {f"irc/b/{STEM}"}
    members = home.warehouse.read("group_members", ("irc",))
    assert members is not None and set(members["unit_id"].to_pylist()) == {f"{STEM}:0", f"{STEM}:1"}
    audit = audit_deletion(home, f"irc/a/{STEM}")
    assert audit["units"] == 2  # the deleted log's, which the live one holds too
    assert audit["clean"], audit["remaining"]
    assert {"store": "warehouse", "units": 2} in [
        {k: v for k, v in s.items() if k != "why"} for s in audit["shared"]
    ]
    args = ["--config", str(config), "--home", str(home.settings.home)]
    said = CliRunner().invoke(main, [*args, "audit-deletion", f"irc/a/{STEM}"])
    assert said.exit_code == 0, said.output
    assert "  shared: 2 unit ids (unit ids a live source of the collection holds too" in said.output


def test_a_receipt_without_units_searches_the_unit_its_source_id_names(tmp_path: Path) -> None:
    """A receipt written before receipts kept unit ids: the deleted e-mail's id is its unit's,
    and a group member left naming it is found."""
    home = _deleted(tmp_path)
    tomb = home.registry.tombstone(f"{COLLECTION}/{GONE}")
    assert tomb is not None
    receipt = Path(tomb["receipt"])
    older = json.loads(receipt.read_text(encoding="utf-8"))
    del older["units"]
    receipt.write_text(json.dumps(older), encoding="utf-8")
    members = home.warehouse.read("group_members", (COLLECTION,))
    assert members is not None and members.num_rows
    left = pa.Table.from_pylist([{**members.to_pylist()[0], "unit_id": GONE}], schema=MEMBER_SCHEMA)
    home.warehouse.write(
        "group_members", (COLLECTION,), pa.concat_tables([members.cast(MEMBER_SCHEMA), left])
    )
    audit = audit_deletion(home, f"{COLLECTION}/{GONE}")
    assert audit["units"] == 1
    assert [r for r in audit["remaining"] if r["match"] == "unit"] == [
        {
            "store": "warehouse",
            "path": str(home.warehouse.path("group_members", COLLECTION)),
            "rows": 1,
            "match": "unit",
        }
    ]
