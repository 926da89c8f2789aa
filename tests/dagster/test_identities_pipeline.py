"""Identities through the real graph: a sync writes each messages collection's registry,
mentions (with roles) and sightings; a merge recorded by ``corpus identities merge`` re-anchors
and re-embeds the groups concerned at the next sync; deleting a unit removes its mentions;
tenants never mix."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.errors import ConfigError, IdentityError
from corpus_index.group_records import GROUP_SCHEMA, MEMBER_SCHEMA
from corpus_index.home import Home
from corpus_index.identities import identity_id
from corpus_index.identity_sightings import SIGHTING_SCHEMA
from corpus_index.identity_store import merges_file, record_merge, recorded_merges
from pipelines.sensors import scan_sources
from tests.dagster.harness import Graph, metadata

PERSONAL = "sjones.home@gmail.com"  # Sarah Jones writing from home: not in the people file
ACME = [
    {
        "id": "ac-1",
        "source": "discord_chat",
        "channel": "#picton",
        "author": "Sarah Jones",
        "timestamp": "2025-12-01T08:05:00+11:00",
        "location": "Picton",
        "text": "Mike, can you cover the Tuesday late shift with Ruby Hall?",
    },
    {
        "id": "ac-2",
        "source": "discord_chat",
        "channel": "#picton",
        "author": "Mike",
        "timestamp": "2025-12-01T08:20:00+11:00",
        "location": "Picton",
        "reply_to": "ac-1",
        "text": "Yes I can cover Tuesday, no worries Sarah.",
    },
    {
        "id": "ac-3",
        "source": "email_thread",
        "thread": "roster",
        "subject": "Roster for next week",
        "author": PERSONAL,
        "recipients": ["Mike Brennan <mike.brennan@acme.org>"],
        "cc": ["Lee Park <lee.park@acme.org>"],
        "timestamp": "2025-12-02T19:00:00+11:00",
        "location": "Picton",
        "text": "Hi Mike, the roster for next week is attached. Thanks",
    },
    {
        "id": "ac-4",
        "source": "email_thread",
        "thread": "roster",
        "subject": "Re: Roster for next week",
        "author": "Mike Brennan <mike.brennan@acme.org>",
        "recipients": [PERSONAL],
        "timestamp": "2025-12-02T20:10:00+11:00",
        "location": "Picton",
        "text": "Thanks, the roster looks fine to me.",
    },
    {
        "id": "ac-5",
        "source": "incident_report",
        "channel": "incident-portal",
        "author": "Mike Brennan",
        "timestamp": "2025-12-04T21:10:00+11:00",
        "location": "Picton",
        "title": "Fall - Ruby Hall - kitchen",
        "text": "People involved: Ruby Hall (participant). Staff present: Mike Brennan, Lee Park.\n"
        "Ruby slipped on the kitchen floor after dinner; no injury, obs taken.",
    },
]
BIRCH = [
    {
        "id": "bi-1",
        "source": "discord_chat",
        "channel": "#bowral",
        "author": "Sarah Jones",
        "timestamp": "2025-12-01T09:00:00+11:00",
        "location": "Bowral",
        "text": "Tom, the van is booked for Thursday.",
    },
    {
        "id": "bi-2",
        "source": "discord_chat",
        "channel": "#bowral",
        "author": "Tom Reid",
        "timestamp": "2025-12-01T09:10:00+11:00",
        "location": "Bowral",
        "reply_to": "bi-1",
        "text": "Great, thanks Sarah.",
    },
]
PEOPLE = {
    "acme": [
        {
            "id": "sarah-jones",
            "name": "Sarah Jones",
            "role": "staff",
            "aliases": ["Sarah"],
            "emails": ["sarah.jones@acme.org"],
        },
        {
            "id": "mike-brennan",
            "name": "Mike Brennan",
            "role": "staff",
            "aliases": ["Mike"],
            "emails": ["mike.brennan@acme.org"],
        },
        {"id": "lee-park", "name": "Lee Park", "role": "staff", "emails": ["lee.park@acme.org"]},
        {"id": "ruby-hall", "name": "Ruby Hall", "role": "participant", "aliases": ["Ruby"]},
    ],
    # another provider's Sarah Jones: the same name, another person, another tenant
    "birch": [
        {"id": "sarah-jones", "name": "Sarah Jones", "role": "staff", "aliases": ["Sarah"]},
        {"id": "tom-reid", "name": "Tom Reid", "role": "staff", "aliases": ["Tom"]},
    ],
}


def _write(root: Path, tenant: str, records: list[dict[str, Any]]) -> None:
    folder = root / tenant
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "people.yaml").write_text(
        yaml.safe_dump({"tenant": tenant, "people": PEOPLE[tenant]})
    )
    lines = [json.dumps({"recipients": [], "cc": [], **r}) for r in records]
    (folder / "messages.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _settings(root: Path) -> Settings:
    _write(root, "acme", ACME)
    _write(root, "birch", BIRCH)
    common = {"kind": "messages", "namespace": "messages", "people": "people.yaml"}
    config = {
        "collections": {
            "acme-messages": {**common, "path": "acme", "tenant": "acme", "acl_groups": ["acme"]},
            "birch-messages": {
                **common,
                "path": "birch",
                "tenant": "birch",
                "acl_groups": ["birch"],
            },
        },
        "profiles": {"hash": {"embedder": "hash:v1-64", "namespace": "messages"}},
        "namespaces": {"messages": {"eval_gate": "off"}},
    }
    (root / "corpus.yaml").write_text(yaml.safe_dump(config))
    return Settings(config_path=root / "corpus.yaml", home=root / "home")


def _cli(settings: Settings, *args: str) -> Any:
    base = ["--config", str(settings.config_path), "--home", str(settings.home)]
    return CliRunner().invoke(main, [*base, *args])


def _mentions(home: Home, collection: str) -> list[dict[str, Any]]:
    table = home.warehouse.read("identity_mentions", (collection,))
    assert table is not None
    return table.to_pylist()


def _sync(g: Graph, collection: str) -> tuple[dict[str, object], dict[str, object]]:
    ingest = g.ingest(collection)
    assert ingest.success
    embed = g.embed("hash", collection)
    assert embed.success
    return metadata(ingest, "linked_groups"), metadata(embed, "embeddings")


def _synced(root: Path, *collections: str) -> tuple[Settings, Graph, Home]:
    """A fresh home of the two tenants, with ``collections`` ingested and embedded."""
    settings = _settings(root)
    g = Graph(settings)
    for c in collections:
        _sync(g, c)
    return settings, g, Home(settings)


def _groups_of(home: Home, unit: str) -> dict[str, dict[str, Any]]:
    groups = home.read("linked_groups", ("acme-messages",), GROUP_SCHEMA).to_pylist()
    members = home.read("group_members", ("acme-messages",), MEMBER_SCHEMA).to_pylist()
    mine = {m["group_id"] for m in members if m["unit_id"] == unit}
    return {g["group_id"]: g for g in groups if g["group_id"] in mine}


def test_a_sync_writes_mentions_with_roles_sightings_and_anchors(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    md, _ = _sync(Graph(settings), "acme-messages")
    home = Home(settings)
    acme = {k: identity_id("acme", k) for k in ("sarah-jones", "mike-brennan", "lee-park")}
    acme["ruby-hall"] = identity_id("acme", "ruby-hall")
    mentions = _mentions(home, "acme-messages")
    roles = {(m["unit_id"], m["identity_id"], m["mention_type"]) for m in mentions}
    assert ("ac-1", acme["sarah-jones"], "author") in roles
    assert ("ac-1", acme["mike-brennan"], "mentioned") in roles  # "Mike, can you ..."
    assert ("ac-3", acme["mike-brennan"], "recipient") in roles
    assert ("ac-3", acme["lee-park"], "mentioned") in roles  # CC'd
    assert ("ac-5", acme["ruby-hall"], "subject") in roles
    assert ("ac-5", acme["lee-park"], "witness") in roles
    assert {m["source_id"] for m in mentions} == {f"acme-messages/ac-{i}" for i in range(1, 6)}
    assert all(m["match_reasoning"] and m["context_snippet"] for m in mentions)
    assert md["identity_mentions"] == len(mentions)
    assert md["mentions_by_role"] == dict(
        sorted(
            (r, sum(1 for m in mentions if m["mention_type"] == r)) for r in {x[2] for x in roles}
        )
    )
    # the unknown sender is a discovered identity of the tenant
    discovered = identity_id("acme", f"discovered:{PERSONAL}")
    assert ("ac-3", discovered, "author") in roles and md["identities_discovered"] == 1
    # sightings: a Parquet file an identity system reads, where the metadata says
    path = Path(str(md["sightings_path"]))
    sightings = pq.read_table(path)
    assert sightings.schema.equals(SIGHTING_SCHEMA)
    assert PERSONAL in sightings["email"].to_pylist()
    assert set(sightings["tenant_id"].to_pylist()) == {"acme"}
    # groups anchor to the registry's identities
    (conversation,) = [
        gr for gr in _groups_of(home, "ac-1").values() if gr["group_type"] == "conversation"
    ]
    assert {acme["sarah-jones"], acme["mike-brennan"]} <= set(conversation["identity_anchors"])


def test_a_merge_moves_mentions_reanchors_and_reembeds_the_groups_concerned(
    tmp_path: Path,
) -> None:
    settings, g, home = _synced(tmp_path, "acme-messages")
    sarah = identity_id("acme", "sarah-jones")
    personal = identity_id("acme", f"discovered:{PERSONAL}")
    listed = json.loads(_cli(settings, "identities", "list", "--tenant", "acme", "--json").output)
    row = next(p for p in listed if p["identity_id"] == personal)
    text = _cli(settings, "identities", "list").output
    assert "tenant acme" in text and "tenant birch" not in text
    # a tenant no collection has is refused, not listed as empty
    nobody = _cli(settings, "identities", "list", "--tenant", "nosuch")
    assert nobody.exit_code == 2 and "no collection of tenant 'nosuch'" in nobody.output
    assert f"{personal}  discovered:{PERSONAL}" in text and "[discovered 0.50]" in text
    assert row["origin"] == "discovered" and row["mentions"] == 2  # author of ac-3, to in ac-4
    before = _groups_of(home, "ac-3")
    assert before and all(personal in gr["identity_anchors"] for gr in before.values())
    total_groups = home.read("linked_groups", ("acme-messages",), GROUP_SCHEMA).num_rows

    out = _cli(settings, "identities", "merge", f"discovered:{PERSONAL}", "sarah-jones")
    assert out.exit_code == 0, out.output
    md, emb = _sync(g, "acme-messages")
    assert md["merges_applied"] == 1 and md["groups_reanchored"] == len(before)
    mentions = _mentions(home, "acme-messages")
    assert personal not in {m["identity_id"] for m in mentions}
    assert ("ac-3", sarah, "author") in {
        (m["unit_id"], m["identity_id"], m["mention_type"]) for m in mentions
    }
    after = _groups_of(home, "ac-3")
    assert set(after) == set(before)  # the same members: the same groups, re-anchored
    for gid, gr in after.items():
        assert personal not in gr["identity_anchors"] and sarah in gr["identity_anchors"]
        # group-v1 names her as the registry does now, so the input hash changed
        assert PERSONAL in before[gid]["input_text"] and PERSONAL not in gr["input_text"]
        assert "Sarah Jones" in gr["input_text"]
        assert gr["input_hash"] != before[gid]["input_hash"]
    # exactly those groups were embedded again, nothing else
    assert emb["embedded"] == len(after) < total_groups
    listed = json.loads(_cli(settings, "identities", "list", "--json").output)
    assert personal not in {p["identity_id"] for p in listed}
    assert PERSONAL in next(p for p in listed if p["identity_id"] == sarah)["emails"]
    # a sync with nothing new embeds nothing
    md, emb = _sync(g, "acme-messages")
    assert emb["embedded"] == 0 and md["merges_applied"] == 1


def test_the_source_sensor_sees_a_recorded_merge_and_a_changed_people_file(
    tmp_path: Path,
) -> None:
    settings = _settings(tmp_path)
    config, names = settings.load(), ["acme-messages", "birch-messages"]
    first = scan_sources(config, {}, [], home=settings.home)
    assert sorted(first.ingest) == names
    seen = first.cursor["fingerprints"]
    assert scan_sources(config, seen, names, home=settings.home).ingest == {}
    record_merge(Home(settings), "acme", f"discovered:{PERSONAL}", "sarah-jones")
    merged = scan_sources(config, seen, names, home=settings.home)
    assert sorted(merged.ingest) == ["acme-messages"]  # birch's tenant recorded nothing
    seen = merged.cursor["fingerprints"]
    people = tmp_path / "birch" / "people.yaml"
    people.write_text(people.read_text(encoding="utf-8") + "# one more line\n", encoding="utf-8")
    assert sorted(scan_sources(config, seen, names, home=settings.home).ingest) == [
        "birch-messages"
    ]


def test_tenants_never_mix_and_merge_refuses_unknown_self_and_cross_tenant(
    tmp_path: Path,
) -> None:
    settings, _, home = _synced(tmp_path, "acme-messages", "birch-messages")
    cases = [
        (["nobody-here", "sarah-jones", "--tenant", "acme"], "no identity 'nobody-here'"),
        (["sarah-jones", "sarah-jones", "--tenant", "acme"], "into itself"),
        (["mike-brennan", "tom-reid"], "merges never cross tenants"),
        (["sarah-jones", "mike-brennan"], "tenants acme, birch"),  # ambiguous: say which
        (["tom-reid", identity_id("acme", "sarah-jones"), "--tenant", "birch"], "tenant acme"),
    ]
    for args, error in cases:
        out = _cli(settings, "identities", "merge", *args)
        assert out.exit_code == 2 and error in out.output, (args, out.output)
    assert not (settings.home / "identities").exists()  # nothing recorded
    # a recorded merges file that holds no merges is named, and left as it was
    recorded = merges_file(Home(settings), "acme")
    recorded.parent.mkdir(parents=True)
    recorded.write_text("merges: 5\n")
    out = _cli(settings, "identities", "merge", "sarah-jones", "mike-brennan", "--tenant", "acme")
    assert out.exit_code == 2 and f"{recorded}: a merges file needs a list" in out.output
    assert recorded.read_text() == "merges: 5\n"
    recorded.unlink()
    recorded.parent.rmdir()
    recorded.parent.parent.rmdir()
    listed = json.loads(_cli(settings, "identities", "list", "--json").output)
    by_tenant: dict[str, set[str]] = {}
    for p in listed:
        by_tenant.setdefault(p["tenant_id"], set()).add(p["identity_id"])
    assert set(by_tenant) == {"acme", "birch"} and not by_tenant["acme"] & by_tenant["birch"]
    # one name, two tenants: two people, each tenant's mentions naming its own only
    for tenant in ("acme", "birch"):
        mentions = _mentions(home, f"{tenant}-messages")
        assert {m["tenant_id"] for m in mentions} == {tenant}
        assert {m["identity_id"] for m in mentions} <= by_tenant[tenant]
        assert identity_id(tenant, "sarah-jones") in {m["identity_id"] for m in mentions}
    only = json.loads(_cli(settings, "identities", "list", "--tenant", "birch", "--json").output)
    assert {p["tenant_id"] for p in only} == {"birch"}
    # a second merge of one identity (still listed before the sync) would merge the first
    # survivor too: refused, the first left as recorded
    out = _cli(settings, "identities", "merge", f"discovered:{PERSONAL}", "sarah-jones")
    assert out.exit_code == 0, out.output
    kept = recorded.read_text()
    out = _cli(settings, "identities", "merge", f"discovered:{PERSONAL}", "mike-brennan")
    assert out.exit_code == 2 and "is recorded as merged into" in out.output, out.output
    assert recorded.read_text() == kept


def test_a_recorded_merges_file_that_cannot_be_read_is_named_and_kept(tmp_path: Path) -> None:
    home = Home(_settings(tmp_path))
    recorded = merges_file(home, "acme")
    recorded.mkdir(parents=True)  # a folder in its place: os.replace onto it was a traceback
    with pytest.raises(ConfigError, match="merges file is not a regular file"):
        record_merge(home, "acme", f"discovered:{PERSONAL}", "sarah-jones")
    # and a sync's read names it too, where it read no merges at all
    with pytest.raises(ConfigError, match="merges file is not a regular file"):
        recorded_merges(home, "acme")
    assert recorded.is_dir() and [p.name for p in recorded.parent.iterdir()] == ["merges.yaml"]
    recorded.rmdir()
    earlier = "merges:\n- {merge: a, into: b, recorded_at: '2026-01-01T00:00:00+00:00'}\n"
    recorded.write_text(earlier + "# " + "x" * 9 * 2**20 + "\n")  # read once, bounded
    with pytest.raises(ConfigError, match="the limit is limits.max_document_bytes"):
        record_merge(home, "acme", f"discovered:{PERSONAL}", "sarah-jones")
    recorded.write_text(earlier)
    record_merge(home, "acme", f"discovered:{PERSONAL}", "sarah-jones")
    kept = yaml.safe_load(recorded.read_text())["merges"]
    assert kept[0] == {"merge": "a", "into": "b", "recorded_at": "2026-01-01T00:00:00+00:00"}
    assert kept[1]["merge"] == f"discovered:{PERSONAL}" and len(kept) == 2


def test_a_merge_recorded_already_or_reversed_is_refused_not_passed_over(tmp_path: Path) -> None:
    """Sarah recorded into Mike, then Mike into Sarah (the survivor meant the other way), or
    through a chain back to her: a sync would pass the new merge over, the two being one
    already, so it is refused, naming the file, and nothing is recorded."""
    home = Home(_settings(tmp_path))
    recorded = record_merge(home, "acme", "sarah-jones", "mike-brennan")
    record_merge(home, "acme", "tom-reid", "sarah-jones")  # into Sarah, so into Mike
    kept = recorded.read_text()
    for merged, survivor in [
        ("mike-brennan", "sarah-jones"),
        ("sarah-jones", "mike-brennan"),
        (identity_id("acme", "mike-brennan"), "tom-reid"),
    ]:
        with pytest.raises(IdentityError, match=re.escape(f"already by the merges recorded in {recorded}")):  # fmt: skip
            record_merge(home, "acme", merged, survivor)
    assert recorded.read_text() == kept
    record_merge(home, "acme", "jane-okafor", "tom-reid")  # someone else still can be


def test_merge_refuses_two_identities_no_one_collection_of_the_tenant_holds(
    tmp_path: Path,
) -> None:
    """One tenant, two messages collections: an address discovered in one, a number in the
    other. Each collection's pass holds one side only and would set the merge aside at every
    sync, so it is refused (naming where each is), and nothing is recorded."""
    settings = _settings(tmp_path)
    sms = {**ACME[0], "id": "sm-1", "source": "sms_message", "author": "0499 000 111"}
    _write(tmp_path / "sms", "acme", [sms])
    config = yaml.safe_load(settings.config_path.read_text())
    config["collections"]["acme-sms"] = {**config["collections"]["acme-messages"]}
    config["collections"]["acme-sms"]["path"] = "sms/acme"
    settings.config_path.write_text(yaml.safe_dump(config))
    g = Graph(settings)
    for collection in ("acme-messages", "acme-sms"):
        assert g.ingest(collection).success
    out = _cli(settings, "identities", "merge", f"discovered:{PERSONAL}", "discovered:+61499000111")
    assert out.exit_code == 2, out.output
    assert "no collection of tenant 'acme' holds both" in out.output
    assert "(in acme-messages)" in out.output and "(in acme-sms)" in out.output
    assert not (settings.home / "identities").exists()  # nothing recorded
    # a person on file is in both: merging either into them is applied where it was seen
    for merged in (f"discovered:{PERSONAL}", "discovered:+61499000111"):
        out = _cli(settings, "identities", "merge", merged, "sarah-jones", "--tenant", "acme")
        assert out.exit_code == 0, out.output


def test_deleting_a_unit_removes_its_mentions_and_the_audit_finds_nothing(
    tmp_path: Path,
) -> None:
    settings, g, home = _synced(tmp_path, "acme-messages")
    assert g.generation("hash").success
    assert {m["unit_id"] for m in _mentions(home, "acme-messages")} >= {"ac-3"}
    _write(tmp_path, "acme", [r for r in ACME if r["id"] != "ac-3"])
    r = g.ingest("acme-messages")
    assert r.success and metadata(r, "source_manifest")["removed"] == 1
    assert "ac-3" not in {m["unit_id"] for m in _mentions(home, "acme-messages")}
    sightings = home.warehouse.read("identity_sightings", ("acme-messages",))
    assert sightings is not None and "ac-3" not in sightings["source_id"].to_pylist()
    tomb = home.registry.tombstone("acme-messages/ac-3")
    assert tomb is not None
    receipt = json.loads(Path(tomb["receipt"]).read_text())
    removed = {Path(a["location"]).parent.name for a in receipt["artifacts"]}
    assert {"identity_mentions", "identity_sightings"} <= removed
    assert g.embed("hash", "acme-messages").success
    out = _cli(settings, "compact", "--json")
    assert out.exit_code == 0, out.output
    out = _cli(settings, "audit-deletion", "acme-messages/ac-3", "--json")
    audit = json.loads(out.output)
    assert audit["clean"], audit["remaining"]
    assert audit["byte_scan"]["status"] == "done"


# Dana Cole's address and Sarah Jones's work address (on file) are seen in ac-6 alone
KEYS = [
    {
        "id": "ac-6",
        "source": "email_thread",
        "thread": "keys",
        "subject": "Keys",
        "author": "Lee Park <lee.park@acme.org>",
        "recipients": ["Dana Cole <dana@home.net>", "Sarah Jones <sarah.jones@acme.org>"],
        "timestamp": "2025-12-05T19:00:00+11:00",
        "location": "Picton",
        "text": "The spare keys for the Picton house are in the office drawer.",
    },
    {
        "id": "ac-7",
        "source": "discord_chat",
        "channel": "#picton",
        "author": "Dana Cole",
        "timestamp": "2025-12-06T08:00:00+11:00",
        "location": "Picton",
        "text": "Got the keys, thanks Lee.",
    },
]


def _registry(home: Home) -> list[dict[str, Any]]:
    table = home.warehouse.read("identities", ("acme-messages",))
    assert table is not None
    return table.to_pylist()


def test_a_deletion_takes_an_address_only_it_showed_out_of_the_registry_though_the_pass_fails(
    tmp_path: Path,
) -> None:
    """Deleting ac-6 in a sync whose identity pass fails (an invalid merges file): the last
    good registry stays, but without what ac-6 alone showed. Dana Cole, discovered by her
    address there and mentioned by name in ac-7, goes with her mentions until the next pass
    finds her again; Sarah Jones keeps the address her people file gives her. The deletion
    audit looks for such an address in the registry."""
    settings = _settings(tmp_path)
    config = yaml.safe_load(settings.config_path.read_text())
    config["collections"]["acme-messages"]["merges"] = "merges.yaml"
    settings.config_path.write_text(yaml.safe_dump(config))
    merges = tmp_path / "acme" / "merges.yaml"
    merges.write_text(yaml.safe_dump({"merges": []}))
    _write(tmp_path, "acme", ACME + KEYS)
    g = Graph(settings)
    assert g.ingest("acme-messages").success
    home = Home(settings)
    before = home.warehouse.read("identities", ("acme-messages",))
    (dana,) = [p for p in _registry(home) if p["name"] == "Dana Cole"]
    assert (dana["key"], dana["emails"]) == ("discovered:dana@home.net", ["dana@home.net"])
    ac7 = {m["identity_id"] for m in _mentions(home, "acme-messages") if m["unit_id"] == "ac-7"}
    assert dana["identity_id"] in ac7

    _write(tmp_path, "acme", ACME + KEYS[1:])
    merges.write_text("merges: [\n")  # the pass of this sync fails: no registry is written
    assert not g.ingest("acme-messages").success
    registry = _registry(home)
    assert "dana@home.net" not in json.dumps(registry)
    assert [p for p in registry if p["name"] == "Dana Cole"] == []
    assert dana["identity_id"] not in {m["identity_id"] for m in _mentions(home, "acme-messages")}
    (sarah,) = [p for p in registry if p["key"] == "sarah-jones"]
    assert sarah["emails"] == ["sarah.jones@acme.org"]  # on file: hers whatever ac-6 held
    for asset in ("identity_mentions", "identity_sightings", "identity_pass"):
        held = home.warehouse.read(asset, ("acme-messages",))
        assert held is not None and "dana@home.net" not in json.dumps(held.to_pylist())
    tomb = home.registry.tombstone("acme-messages/ac-6")
    assert tomb is not None
    receipt = json.loads(Path(tomb["receipt"]).read_text())
    # Dana's, hashed (Sarah's work address is on file: not the unit's), under a key of the
    # home the receipt does not hold: what is in the receipt alone cannot be searched for it
    (kept,) = receipt["fingerprints"]["identity_details"]
    assert "dana@home.net" not in json.dumps(receipt)
    guessed = hashlib.sha256(f"{receipt['receipt_id']}:dana@home.net".encode()).hexdigest()
    assert kept != guessed
    key = home.registry.home_key(receipt["fingerprints"]["identity_details_key"])
    keyed = hmac.new(key, f"{receipt['receipt_id']}:dana@home.net".encode(), hashlib.sha256)
    assert kept == keyed.hexdigest() and key.hex() not in json.dumps(receipt)

    def addresses_left() -> list[dict[str, Any]]:
        out = _cli(settings, "audit-deletion", "acme-messages/ac-6", "--json")
        remaining = json.loads(out.output)["remaining"]
        return [r for r in remaining if r.get("match") == "address"]

    assert addresses_left() == []
    # the registry as the pass before the deletion left it: the audit names it
    home.warehouse.write("identities", ("acme-messages",), before)
    assert [r["rows"] for r in addresses_left()] == [1]
    # a registry whose key is another (rebuilt from its journal) cannot look: it says so,
    # where it would have found none of the hashes and said nothing
    with home.registry.connect() as con:
        con.execute("DELETE FROM home_keys")
    report = json.loads(_cli(settings, "audit-deletion", "acme-messages/ac-6", "--json").output)
    assert report["identity_details"].startswith("not done: the 1 address(es)")
    assert (
        "identity details: not done"
        in _cli(settings, "audit-deletion", "acme-messages/ac-6").output
    )
    with home.registry.connect() as con:  # the home's own key back
        con.execute("DELETE FROM home_keys")
        con.execute(
            "INSERT INTO home_keys VALUES (?, ?, now())",
            [receipt["fingerprints"]["identity_details_key"], key.hex()],
        )
    assert [r["rows"] for r in addresses_left()] == [1]
    home.warehouse.write("identities", ("acme-messages",), pa.Table.from_pylist(registry))

    merges.write_text(yaml.safe_dump({"merges": []}))
    assert g.ingest("acme-messages").success
    (found,) = [p for p in _registry(home) if p["name"] == "Dana Cole"]
    assert found["emails"] == [] and found["key"] == "discovered:dana cole"
    ac7 = {m["identity_id"] for m in _mentions(home, "acme-messages") if m["unit_id"] == "ac-7"}
    assert found["identity_id"] in ac7
    assert addresses_left() == []


def test_a_people_file_gone_fails_its_collection_alone_and_its_groups_keep_serving(
    tmp_path: Path,
) -> None:
    """A collection's people file is asked for as it is read, not as corpus.yaml loads: once
    it is gone, the configuration still loads, the other tenant's collection syncs, and this
    collection's grouping fails naming the file, its last good groups kept."""
    settings, g, home = _synced(tmp_path, "acme-messages", "birch-messages")
    before = home.read("linked_groups", ("birch-messages",), GROUP_SCHEMA)
    people = tmp_path / "birch" / "people.yaml"
    people.unlink()
    assert settings.load().collections["birch-messages"].people == people
    g = Graph(settings)
    assert g.ingest("acme-messages").success
    failed = g.ingest("birch-messages")
    assert not failed.success
    failure = next(e for e in failed.all_events if e.event_type_value == "STEP_FAILURE")
    assert f"{people}: people file not found" in str(failure.event_specific_data)
    assert Home(settings).read("linked_groups", ("birch-messages",), GROUP_SCHEMA) == before


def test_a_people_file_giving_a_key_twice_fails_its_collection_naming_the_line(
    tmp_path: Path,
) -> None:
    """YAML keeps the last of a key given twice: a second ``people:`` list appended below the
    first would drop the first list's people without a word (their mentions then resolved to
    no one on file). The file is refused instead, naming it and the line, and the last good
    groups keep serving."""
    settings, g, home = _synced(tmp_path, "birch-messages")
    before = home.read("linked_groups", ("birch-messages",), GROUP_SCHEMA)
    people = tmp_path / "birch" / "people.yaml"
    first, second = PEOPLE["birch"]
    people.write_text(
        yaml.safe_dump({"tenant": "birch", "people": [first]})
        + yaml.safe_dump({"people": [second]}),
        encoding="utf-8",
    )
    failed = Graph(settings).ingest("birch-messages")
    assert not failed.success
    failure = next(e for e in failed.all_events if e.event_type_value == "STEP_FAILURE")
    line = people.read_text(encoding="utf-8").splitlines().index("people:", 2) + 1
    assert f"{people}:{line}: people: given twice in one mapping" in str(
        failure.event_specific_data
    )
    assert Home(settings).read("linked_groups", ("birch-messages",), GROUP_SCHEMA) == before
