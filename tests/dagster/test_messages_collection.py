"""A ``messages`` collection (a JSONL stream, and irc logs) goes through the whole graph: a
bad record is quarantined and the rest indexed, a narrowed record keeps its narrower ACL, irc
system lines are units but not rows."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.home import Home
from tests.dagster.harness import Graph, check_outcomes, metadata

RECORDS = [
    {"id": "m1", "source": "discord_chat", "channel": "staff", "author": "Sarah",
     "timestamp": "2025-12-10T09:00:00+11:00", "location": "Picton SIL",
     "text": "What should we cook for Christmas lunch?"},
    {"id": "m2", "source": "discord_chat", "channel": "staff", "author": "Jane",
     "timestamp": "2025-12-10T09:04:00+11:00", "text": "yes pumpkin please",
     "acl": ["care-leads"]},
    {"id": "c1", "source": "phone_call", "channel": "calls", "author": "Mike",
     "timestamp": "2025-12-11T14:00:00+11:00",
     "text": "Mike: the van is due for a service\nSarah: I'll book it on Friday"},
]  # fmt: skip
LOG = "[10:00] <alice> how do I mount a usb drive?\n=== bob has joined\n[10:01] <carol> alice: /media\n"


def test_message_collections_through_the_graph(tmp_path: Path) -> None:
    (tmp_path / "chat").mkdir()
    lines = [json.dumps(r) for r in RECORDS] + ['{"id": "m9", "source": "fax"}']
    (tmp_path / "chat" / "staff.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "irc").mkdir()
    (tmp_path / "irc" / "2020-01-02_10.ascii.txt").write_text(LOG, encoding="utf-8")
    common = {"kind": "messages", "tenant": "riverside", "namespace": "care"}
    config = tmp_path / "corpus.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "collections": {
                    "care-chat": {
                        **common,
                        "path": "chat",
                        "acl_groups": ["care-staff", "care-leads"],
                    },
                    "irc-logs": {
                        **common,
                        "path": "irc",
                        "acl_groups": ["care-staff"],
                        "format": "irc",
                    },
                },
                "profiles": {"hash": {"embedder": "hash:v1-64", "namespace": "care"}},
                "namespaces": {"care": {"eval_gate": "off"}},
            }
        )
    )
    g = Graph(Settings(config_path=config, home=tmp_path / "home"))
    r = g.ingest("care-chat")
    assert r.success
    parsed = metadata(r, "parsed_blocks")
    assert (parsed["blocks"], parsed["quarantined"]) == (3, 1)
    r = g.ingest("irc-logs")
    assert r.success and metadata(r, "parsed_blocks")["blocks"] == 3
    # the join line is not embedded; alice's question and carol's answer are a conversation
    assert metadata(r, "linked_groups")["groups"] == 1
    assert metadata(r, "embedding_inputs")["inputs"] == 3
    for collection in ("care-chat", "irc-logs"):
        r = g.embed("hash", collection)
        assert r.success and all(check_outcomes(r).values())
    r = g.generation("hash")
    home = Home(g.settings)
    gen = home.registry.live_generation("hash")
    assert gen is not None
    everything = home.store.table(gen).search().limit(20).to_list()
    groups = [row for row in everything if row["kind"] == "group"]
    rows = {row["doc_id"]: row for row in everything if row["kind"] == "messages"}
    assert r.success and metadata(r, "index_generation")["rows"] == 5 + len(groups)
    assert sorted(rows) == ["2020-01-02_10", "c1", "m1", "m2"]
    # the irc conversation is a row of its own, under the groups' input format
    (irc,) = [row for row in groups if row["collection"] == "irc-logs"]
    assert irc["input_format"] == "group-v1"
    assert "\ncarol (irc_chat, 2020-01-02 10:01 UTC): alice: /media" in irc["text"]
    assert list(rows["m2"]["acl_groups"]) == ["care-leads"]
    assert json.loads(rows["m1"]["metadata"])["channel"] == "staff"
    assert "turns[1].speaker: Sarah" in rows["c1"]["text"]


def test_sync_notes_an_unknown_key_once_per_file_and_indexes_its_records(tmp_path: Path) -> None:
    """A key no field is read from (a typo, an unsupported ``bcc``) is read past, not
    quarantined, and named where quarantined records are: ``NOTE`` lines, ``notes`` in
    ``--json`` and in the ``parsed_blocks`` metadata; a sync notes the records it parsed."""
    chat = tmp_path / "chat"
    chat.mkdir()
    typo = [{**RECORDS[0], "recipents": ["Jane"]}, {**RECORDS[1], "recipents": ["Sarah"]}]
    stream = chat / "staff.jsonl"
    stream.write_text("\n".join(json.dumps(r) for r in typo) + "\n", encoding="utf-8")
    config = tmp_path / "corpus.yaml"
    collection = {"kind": "messages", "tenant": "riverside", "namespace": "care", "path": "chat"}
    config.write_text(
        yaml.safe_dump(
            {
                "collections": {"care-chat": {**collection, "acl_groups": ["care-leads"]}},
                "profiles": {"hash": {"embedder": "hash:v1-64", "namespace": "care"}},
                "namespaces": {"care": {"eval_gate": "off"}},
            }
        )
    )
    base = ["--config", str(config), "--home", str(tmp_path / "home")]
    text = CliRunner().invoke(main, [*base, "sync"])
    assert text.exit_code == 0, text.output
    assert "quarantined 0" in text.output
    (line,) = [ln for ln in text.output.splitlines() if "NOTE" in ln]
    assert line == (
        f"  NOTE {stream}:1: unknown key 'recipents' is not read; did you mean 'recipients'? "
        "(and in 1 more of this file's documents)"
    )

    added = {**RECORDS[2], "bcc": ["Karen"]}
    stream.write_text(stream.read_text() + json.dumps(added) + "\n", encoding="utf-8")
    again = CliRunner().invoke(main, [*base, "sync", "--json"])
    assert again.exit_code == 0, again.output
    summary = json.loads(again.stdout)
    assert summary["collections"]["care-chat"]["documents"] == 3
    (note,) = summary["notes"]  # the record this sync parsed; the others were carried
    assert (note["path"], note["line"], note["documents"]) == (str(stream), 3, 1)
    assert "unknown key 'bcc' is not read; the keys read: acl, author, cc," in note["note"]
