"""A deleted e-mail of the messages sample leaves nothing the deletion audit finds, although
its header (``author: Sarah Jones <sarah.jones@...>``) is in the identity snippets of many
live units: only what the deleted unit alone held proves anything."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from corpus_index.compaction import compact
from corpus_index.config import Settings
from corpus_index.deletion import audit_deletion
from corpus_index.home import Home
from tests.searchkit import ROOT, build_home, messages_config

GONE = "wg-em-002"


def test_a_deleted_email_leaves_nothing_the_audit_finds(tmp_path: Path) -> None:
    config_path = messages_config(tmp_path)
    config = yaml.safe_load(config_path.read_text())
    wattle = tmp_path / "wattle"
    shutil.copytree(ROOT / "sample_corpus" / "messages" / "wattle", wattle)
    config["collections"] = {"wattle-messages": config["collections"]["wattle-messages"]}
    config["collections"]["wattle-messages"]["path"] = str(wattle)
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
    audit = audit_deletion(Home(corpus.settings), f"wattle-messages/{GONE}")
    assert audit["clean"], audit["remaining"]
    assert audit["byte_scan"]["status"] == "done"
