"""The per-tenant identity registry and identity mentions, on the messages sample's people."""

from __future__ import annotations

import difflib
import json
import random
import string
import unicodedata
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from rapidfuzz import fuzz, process

from corpus_index.errors import ConfigError, IdentityError
from corpus_index.identities import (
    Identity,
    IdentityRegistry,
    identities_table,
    identity_id,
    load_people,
)
from corpus_index.identity_forms import (
    FUZZY_CUTOFF,
    FUZZY_MIN_CHARS,
    NameIndex,
    display_name,
    normalize_email,
    normalize_name,
    normalize_phone,
)
from corpus_index.identity_mentions import (
    MENTION_SCHEMA,
    ROLES,
    discover,
    extract_mentions,
    mentions_table,
)
from corpus_index.identity_merges import (
    apply_merges,
    conflicts,
    load_merges,
    merge_identities,
)
from corpus_index.identity_sightings import SIGHTING_SCHEMA, corroborate, write_sightings

SAMPLE = Path(__file__).resolve().parents[1] / "sample_corpus" / "messages"
TENANTS = ("wattle", "bluegum")


def registry(tenant: str) -> IdentityRegistry:
    return load_people(SAMPLE / tenant / "people.yaml", tenant_id=tenant)


def records(tenant: str) -> list[dict[str, Any]]:
    out = []
    for path in sorted((SAMPLE / tenant).glob("*.jsonl")):
        out.extend(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines())
    return out


def truth(tenant: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((SAMPLE / "truth.yaml").read_text())
    return dict(data["tenants"][tenant])


def add_person(reg: IdentityRegistry, key: str, name: str, **details: Any) -> Identity:
    person = Identity(identity_id(reg.tenant_id, key), reg.tenant_id, key, name, **details)
    return reg.put(person)


def person_id(reg: IdentityRegistry, key: str) -> str:
    person = reg.by_key(key)
    assert person is not None, key
    return person.id


# ---------------------------------------------------------------------- resolving names
SARAH_VARIANTS = [
    "Sarah",
    "SJ",
    "Sarah J",
    "Sarah Jones",
    "sarah.jones@wattlegrove.org.au",
    "Sarah Jones <SARAH.JONES@wattlegrove.org.au>",
    "0412 555 301",
    "+61412555301",
    "Sara Jones",  # a typo: the fuzzy step
]


@pytest.mark.parametrize("raw", SARAH_VARIANTS)
def test_variants_of_sarah_resolve_to_one_identity_in_wattle(raw: str) -> None:
    reg = registry("wattle")
    match = reg.resolve(raw)
    assert match.identity_id == person_id(reg, "sarah-jones"), match
    assert 0 < match.confidence <= 1
    assert match.reason


@pytest.mark.parametrize("raw", SARAH_VARIANTS)
def test_no_variant_of_wattles_sarah_resolves_to_her_in_bluegum(raw: str) -> None:
    wattle, bluegum = registry("wattle"), registry("bluegum")
    match = bluegum.resolve(raw)
    assert match.identity_id != person_id(wattle, "sarah-jones")
    if match.identity_id is not None:
        person = bluegum.get(match.identity_id)
        assert person is not None and person.tenant_id == "bluegum"


@pytest.mark.parametrize(
    "raw",
    [
        "sarah.jones@wattlegrove.org.au",
        "Sarah Jones <sarah.jones@wattlegrove.org.au>",  # a known name on an unknown address
        "0412 555 301",
    ],
)
def test_wattle_details_name_nobody_in_bluegum(raw: str) -> None:
    assert registry("bluegum").resolve(raw).identity_id is None


@pytest.mark.parametrize(
    ("tenant", "raw", "key", "reason"),
    [
        ("wattle", "Jane O.", "jane-okafor", "name_initial"),
        ("wattle", "Grace F (RN)", "grace-fitzgerald", "name_initial"),
        ("wattle", "priya.r", "priya-raman", "alias"),
        ("wattle", "mikeb", "mike-brennan", "alias"),
        ("wattle", "DanK", "daniel-kim", "alias"),
        ("wattle", "Dr Anand Shah", "anand-shah", "name"),
        ("wattle", "Mick Brennan", "mike-brennan", "fuzzy"),
        ("bluegum", "SJ", "sarah-jonas", "alias"),
        ("bluegum", "Sarah (Bowral)", "sarah-jonas", "alias"),
        ("bluegum", "Ellie T", "ellie-thompson", "name_initial"),
        ("bluegum", "0419 772 104", "karen-doyle", "phone"),
        ("bluegum", "Karen Doyle <karen.doyle@bluegumcare.org.au>", "karen-doyle", "email + name"),
    ],
)
def test_chat_handles_and_header_forms_resolve(
    tenant: str, raw: str, key: str, reason: str
) -> None:
    reg = registry(tenant)
    match = reg.resolve(raw)
    assert match.identity_id == person_id(reg, key)
    assert match.reason.startswith(reason)


def test_every_sender_and_recipient_in_the_sample_is_on_file_or_a_list() -> None:
    """Only the one outsider the sample writes to (a new support coordinator) is unknown."""
    unknown: set[str] = set()
    for tenant in TENANTS:
        reg = registry(tenant)
        for rec in records(tenant):
            for raw in [rec["author"], *rec["recipients"], *rec["cc"]]:
                if not reg.is_list(raw) and reg.resolve(raw).identity_id is None:
                    unknown.add(f"{tenant}: {raw}")
    assert unknown == {
        "wattle: Kate Morrison",
        "wattle: Kate Morrison <kate.morrison@brightpath-coordination.example>",
    }


def test_evidence_that_agrees_is_more_certain_than_either_piece() -> None:
    reg = registry("wattle")
    by_mail = reg.resolve("leanne.walsh@wattlegrove.org.au")
    by_name = reg.resolve("Leanne Walsh")
    both = reg.resolve("Leanne Walsh <leanne.walsh@wattlegrove.org.au>")
    assert both.identity_id == by_mail.identity_id == by_name.identity_id
    assert both.confidence > max(by_mail.confidence, by_name.confidence)


def test_evidence_that_conflicts_picks_the_stronger_and_says_so() -> None:
    reg = registry("wattle")
    match = reg.resolve("Tom Hadley <sarah.jones@wattlegrove.org.au>")
    assert match.identity_id == person_id(reg, "sarah-jones")
    assert "conflicting" in match.reason and person_id(reg, "tom-hadley") in match.reason


def test_a_name_two_people_share_is_ambiguous_not_guessed() -> None:
    reg = registry("wattle")
    add_person(reg, "sarah-nguyen", "Sarah Nguyen", aliases=("Sarah",))
    match = reg.resolve("Sarah")
    assert match.identity_id is None
    assert set(match.candidates) == {person_id(reg, "sarah-jones"), person_id(reg, "sarah-nguyen")}
    assert reg.resolve("SJ").identity_id == person_id(reg, "sarah-jones")  # still unique


def test_a_registry_refuses_another_tenants_identity() -> None:
    wattle, bluegum = registry("wattle"), registry("bluegum")
    sarah = bluegum.by_key("sarah-jonas")
    assert sarah is not None
    with pytest.raises(IdentityError, match="never mix tenants"):
        wattle.put(sarah)


def test_identity_ids_come_from_tenant_and_key() -> None:
    assert identity_id("wattle", "sarah-jones") == identity_id("wattle", "sarah-jones")
    assert identity_id("wattle", "sarah-jones") != identity_id("bluegum", "sarah-jones")
    assert {p.id for p in registry("wattle")}.isdisjoint({p.id for p in registry("bluegum")})


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("0412 555 301", "+61412555301"),
        ("+61 409 336 812", "+61409336812"),
        ("(02) 4655 1020", "+61246551020"),
        ("61412555301", "+61412555301"),
        ("0011 44 20 7946 0958", "+442079460958"),
        ("0061 412 555 301", "+61412555301"),
        ("+61 (0)412 555 301", "+61412555301"),
        ("+44 (0)20 7946 0958", "+442079460958"),
        ("0044 (0)20 7946 0958", "+442079460958"),
        ("4655", None),
        ("call me", None),
    ],
)
def test_phone_numbers_normalise_to_e164(raw: str, expected: str | None) -> None:
    assert normalize_phone(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Grace F (RN)", "grace f"),
        ("priya.r", "priya r"),
        ("Dr Anand Shah", "anand shah"),
        ("  Sarah   JONES ", "sarah jones"),
        ("O'Brien-Smith", "obrien smith"),
    ],
)
def test_names_normalise(raw: str, expected: str) -> None:
    assert normalize_name(raw) == expected


# ---------------------------------------------------------------------- the people file
def _load_people(path: Path) -> Any:
    return load_people(path, tenant_id="wattle")


@pytest.mark.parametrize(
    ("loader", "text", "message"),
    [
        (_load_people, "tenant: bluegum\npeople: []\n", "for tenant 'bluegum', not 'wattle'"),
        (_load_people, "people: {}\n", "needs a list under 'people'"),
        (_load_people, "people:\n  - {id: a, name: A}\n  - {id: a, name: B}\n", "duplicate id 'a'"),
        (_load_people, "people:\n  - {id: a}\n", "people[0]: needs a non-empty 'name'"),
        (
            _load_people,
            "people:\n  - {id: a, name: A, emails: [nope]}\n",
            "'nope' is not an e-mail",
        ),
        (_load_people, "people:\n  - {id: a, name: A, phones: ['12']}\n", "'12' is not a phone"),
        (
            _load_people,  # YAML reads it as the octal 69917377: refused, never another number
            "people:\n  - {id: sarah, name: Sarah, phones: [0412555301]}\n",
            "people[0] (sarah).phones: 69917377 is not a string; quote phone numbers",
        ),
        (_load_people, "people: [\n", "invalid YAML"),
        (
            _load_people,  # YAML reads an unquoted On as true: refused, never the alias "True"
            "people:\n  - {id: on-lee, name: On Lee, aliases: [On]}\n",
            "people[0] (on-lee).aliases: True is not a string; quote it",
        ),
        (_load_people, "people: []\nlists: 5\n", "lists must be a list of e-mail addresses"),
        (_load_people, "people: []\nlists: abc\n", "lists must be a list of e-mail addresses"),
        (_load_people, "people: []\ncountry_code: [1]\n", "country_code must be a calling code"),
        (load_merges, "merges: {}\n", "needs a list under 'merges'"),
        (load_merges, "merges:\n  - {merge: a}\n", "merges[0]: needs 'merge' and 'into'"),
        (load_merges, "merges: [\n", "invalid YAML"),
        # YAML keeps the last of a key given twice: the first list would be lost unseen
        (
            _load_people,
            "people:\n  - {id: a, name: A}\npeople:\n  - {id: b, name: B}\n",
            "people.yaml:3: people: given twice in one mapping (also on line 1)",
        ),
        (
            _load_people,
            "people:\n  - id: a\n    name: A\n    emails: [a@x.org]\n    emails: [b@x.org]\n",
            "people.yaml:5: people[0].emails: given twice in one mapping (also on line 4)",
        ),
        (
            load_merges,
            "merges:\n  - {merge: a, into: b}\nmerges:\n  - {merge: c, into: d}\n",
            "people.yaml:3: merges: given twice in one mapping (also on line 1)",
        ),
    ],
)
def test_a_bad_people_or_merges_file_names_the_file_and_the_problem(
    tmp_path: Path, loader: Any, text: str, message: str
) -> None:
    path = tmp_path / "people.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        loader(path)
    assert str(path) in str(err.value) and message in str(err.value)


@pytest.mark.parametrize("loader", [_load_people, load_merges])
def test_a_people_or_merges_file_is_bounded_and_utf8(tmp_path: Path, loader: Any) -> None:
    path = tmp_path / "people.yaml"
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="is not UTF-8 text") as err:
        loader(path)
    assert str(path) in str(err.value)
    path.write_text("people: []\nmerges: []\n# " + "x" * 9 * 2**20 + "\n")
    with pytest.raises(ConfigError, match="the limit is limits.max_document_bytes") as err:
        loader(path)
    assert str(path) in str(err.value)
    (tmp_path / "folder.yaml").mkdir()
    with pytest.raises(ConfigError, match="is not a regular file"):
        loader(tmp_path / "folder.yaml")
    with pytest.raises(ConfigError, match="not found") as err:
        loader(tmp_path / "absent.yaml")
    assert str(tmp_path / "absent.yaml") in str(err.value)
    outside = tmp_path.parent / f"{tmp_path.name}-outside.yaml"
    outside.write_text("people: []\nmerges: []\n")
    (tmp_path / "link.yaml").symlink_to(outside)  # it could lead anywhere: never followed
    with pytest.raises(ConfigError, match="is a symbolic link"):
        loader(tmp_path / "link.yaml")
    outside.unlink()


def test_an_address_of_deeply_nested_comments_is_no_address_not_a_crash(tmp_path: Path) -> None:
    """The standard library reads each level of a header's comments by recursion: a value of
    thousands of "(" (a record's author, a people file's list) exhausted the stack."""
    deep = "a@b" + "(" * 5000
    assert normalize_email(deep) is None and display_name(deep) == deep
    assert normalize_email("Dana (home (old)) <dana@home.net>") == "dana@home.net"
    path = tmp_path / "people.yaml"
    path.write_text(f"people:\n  - {{id: a, name: A}}\nlists: ['{deep}']\n")
    assert _load_people(path).get(identity_id("wattle", "a")) is not None


def test_names_composed_or_decomposed_are_one_person(tmp_path: Path) -> None:
    composed, decomposed = "Ren\u00e9 M\u00fcller", "Rene\u0301 Mu\u0308ller"
    path = tmp_path / "people.yaml"
    path.write_text(f"people:\n  - {{id: rene, name: '{composed}'}}\n", encoding="utf-8")
    reg = _load_people(path)
    assert reg.resolve(decomposed).identity_id == reg.resolve(composed).identity_id is not None
    zoe = ["zo\u00eb", "zoe\u0308"]
    path.write_text(
        "people:\n" + "".join(f"  - {{id: '{z}', name: Zoe {i}}}\n" for i, z in enumerate(zoe)),
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match="duplicate id"):
        _load_people(path)


def test_the_registry_is_stored_as_a_table() -> None:
    reg = registry("bluegum")
    table = identities_table(reg)
    assert table.num_rows == len(reg) == 10
    assert set(table.column("tenant_id").to_pylist()) == {"bluegum"}
    keys = table.column("key").to_pylist()
    phones = table.column("phones").to_pylist()
    assert phones[keys.index("karen-doyle")] == ["+61419772104", "+61248613300"]


# ---------------------------------------------------------------------- mentions
@pytest.fixture(scope="module")
def extracted() -> dict[str, Any]:
    out = {}
    for tenant in TENANTS:
        reg = registry(tenant)
        out[tenant] = (reg, extract_mentions(reg, records(tenant)))
    return out


def test_every_unit_has_an_identity_anchor(extracted: dict[str, Any]) -> None:
    for tenant in TENANTS:
        _, found = extracted[tenant]
        anchored = {m.unit_id for m in found.mentions}
        assert anchored == {r["id"] for r in records(tenant)}


def test_mentions_are_unique_per_unit_identity_and_role(extracted: dict[str, Any]) -> None:
    for tenant in TENANTS:
        reg, found = extracted[tenant]
        keys = [(m.unit_id, m.identity_id, m.mention_type) for m in found.mentions]
        assert len(keys) == len(set(keys))
        assert len({m.mention_id for m in found.mentions}) == len(keys)
        for m in found.mentions:
            assert m.mention_type in ROLES
            assert m.tenant_id == tenant and reg.get(m.identity_id) is not None
            assert 0 < m.confidence < 1 and m.match_reasoning and m.context_snippet


def test_everything_about_sarah_spans_every_kind_of_source_and_one_tenant(
    extracted: dict[str, Any],
) -> None:
    reg, found = extracted["wattle"]
    sarah = person_id(reg, "sarah-jones")
    units = {m.unit_id for m in found.mentions if m.identity_id == sarah}
    sources = {r["source"] for r in records("wattle") if r["id"] in units}
    assert sources >= {"discord_chat", "sms_message", "email_thread", "phone_call", "shift_note"}
    _, bluegum = extracted["bluegum"]
    assert sarah not in {m.identity_id for m in bluegum.mentions}


def test_incidents_name_their_subjects_and_the_staff_present(extracted: dict[str, Any]) -> None:
    for tenant in TENANTS:
        reg, found = extracted[tenant]
        for incident in truth(tenant)["incidents"]:
            roles: dict[str, set[str]] = {}
            for m in found.mentions:
                if m.unit_id == incident["incident"]:
                    roles.setdefault(m.mention_type, set()).add(m.identity_id)
            subjects = {person_id(reg, k) for k in incident["subjects"]}
            present = {person_id(reg, k) for k in incident["staff_present"]}
            assert roles.get("subject", set()) == subjects, incident["key"]
            assert present <= roles.get("witness", set()) | roles["author"], incident["key"]


def test_cc_is_mentioned_and_recipients_are_recipients(extracted: dict[str, Any]) -> None:
    reg, found = extracted["wattle"]
    leanne = person_id(reg, "leanne-walsh")
    cc_units = [r["id"] for r in records("wattle") if any("leanne" in c for c in r["cc"])]
    assert cc_units
    for unit in cc_units:
        assert (unit, leanne, "mentioned") in {
            (m.unit_id, m.identity_id, m.mention_type) for m in found.mentions
        }
    helen = person_id(reg, "helen-pereira")
    sms_to_helen = [
        r["id"]
        for r in records("wattle")
        if r["source"] == "sms_message" and "+61400118245" in r["recipients"]
    ]
    assert sms_to_helen and all(
        any(
            m.unit_id == u and m.identity_id == helen and m.mention_type == "recipient"
            for m in found.mentions
        )
        for u in sms_to_helen
    )


def test_shared_mailboxes_are_nobody(extracted: dict[str, Any]) -> None:
    for tenant in TENANTS:
        reg, found = extracted[tenant]
        assert reg.lists
        addressed = {a for r in records(tenant) for a in [*r["recipients"], *r["cc"]]}
        assert reg.lists & addressed  # the sample does write to them
        assert not any(addr in reg.lists for p in reg for addr in p.emails)
        assert not any(s.email in reg.lists for s in found.sightings)


def test_an_outsider_is_discovered_once_and_corroborated_by_a_second_source() -> None:
    reg = registry("wattle")
    found = extract_mentions(reg, records("wattle"))
    discovered = [p for p in reg if p.origin == "discovered"]
    assert [p.name for p in discovered] == ["Kate Morrison"]
    kate = discovered[0]
    assert kate.emails == ("kate.morrison@brightpath-coordination.example",)
    assert kate.confidence == 0.5
    seen_in = {s.unit_source for s in found.sightings if s.identity_id == kate.id}
    assert seen_in == {"email_thread", "phone_call"}
    changed = corroborate(reg, found.sightings)
    assert changed == {kate.id: 0.75}
    assert corroborate(reg, found.sightings) == {}  # idempotent
    assert all(p.confidence == 1.0 for p in reg if p.origin == "people_file")


@settings(max_examples=5, deadline=None)
@given(st.randoms(use_true_random=False))
def test_mentions_do_not_depend_on_record_order(rnd: Any) -> None:
    recs = records("wattle")
    first = extract_mentions(registry("wattle"), recs)
    rnd.shuffle(recs)
    again = extract_mentions(registry("wattle"), recs)
    assert sorted(first.mentions, key=lambda m: m.mention_id) == sorted(
        again.mentions, key=lambda m: m.mention_id
    )


# ---------------------------------------------------------------------- merges and sightings
def test_merging_a_discovered_identity_moves_its_mentions_and_reports_reindexing() -> None:
    reg = registry("wattle")
    recs = records("wattle")
    personal = {
        "id": "wg-sms-900",
        "source": "sms_message",
        "thread": "sms-personal",
        "author": "sarah.j.home@example.com",
        "recipients": ["+61431902277"],
        "cc": [],
        "timestamp": "2025-12-30T09:00:00+11:00",
        "location": "Picton SIL",
        "text": "From my own email, Sarah. Can you cover the 2nd?",
    }
    found = extract_mentions(reg, [*recs, personal])
    stray = reg.resolve("sarah.j.home@example.com").identity_id
    sarah = person_id(reg, "sarah-jones")
    assert stray is not None and stray != sarah
    before = [m for m in found.mentions if m.identity_id == stray]
    assert {m.unit_id for m in before} == {"wg-sms-900"}
    # the text's "Sarah" already mentions her in that unit: the two collapse into one
    groups = {"grp_personal": ["wg-sms-900", "wg-sms-001"], "grp_other": ["wg-dc-001"]}
    after, report = merge_identities(reg, found.mentions, stray, sarah, group_members=groups)
    assert report.survivor == sarah and report.merged == stray
    assert report.moved == len(before)
    assert report.units == ("wg-sms-900",) and report.groups == ("grp_personal",)
    assert stray not in {m.identity_id for m in after}
    roles = {(m.identity_id, m.mention_type) for m in after if m.unit_id == "wg-sms-900"}
    assert (sarah, "author") in roles and (sarah, "mentioned") in roles
    keys = [(m.unit_id, m.identity_id, m.mention_type) for m in after]
    assert len(keys) == len(set(keys))
    assert reg.resolve("sarah.j.home@example.com").identity_id == sarah
    assert reg.canonical(stray) == sarah and reg.get(stray) == reg.get(sarah)


def test_merges_never_cross_tenants_or_merge_an_identity_into_itself() -> None:
    wattle, bluegum = registry("wattle"), registry("bluegum")
    found = extract_mentions(bluegum, records("bluegum"))
    jonas = person_id(bluegum, "sarah-jonas")
    jones = person_id(wattle, "sarah-jones")
    with pytest.raises(IdentityError, match="never cross tenants"):
        merge_identities(wattle, [], jonas, jones)
    with pytest.raises(IdentityError, match="into itself"):
        merge_identities(wattle, [], jones, jones)
    with pytest.raises(IdentityError, match="of tenant 'bluegum'"):
        merge_identities(wattle, found.mentions, person_id(wattle, "tom-hadley"), jones)


def test_sightings_are_written_as_a_table_an_identity_system_reads(
    extracted: dict[str, Any], tmp_path: Path
) -> None:
    reg, found = extracted["wattle"]
    path = write_sightings(found.sightings, tmp_path / "sightings" / "wattle.parquet")
    table = pq.read_table(path)
    assert table.schema.equals(SIGHTING_SCHEMA)
    assert table.num_rows == len(found.sightings) > 0
    rows = table.to_pylist()
    assert {r["tenant_id"] for r in rows} == {"wattle"}
    assert {r["source_type"] for r in rows} == {"embedding_extraction"}
    assert all(0 < r["confidence"] <= 100 for r in rows)
    assert len({r["sighting_id"] for r in rows}) == len(rows)
    by_phone = [r for r in rows if r["phone"] == "+61412555301"]
    assert by_phone and {r["identity_id"] for r in by_phone} == {person_id(reg, "sarah-jones")}
    assert any(r["raw_name"] == "Sarah J" for r in rows)


def test_a_merges_file_is_applied_by_keys_once(tmp_path: Path) -> None:
    reg = registry("wattle")
    found = extract_mentions(reg, records("wattle"))
    kate = next(p for p in reg if p.origin == "discovered")
    add_person(reg, "kate-morrison", "Katherine Morrison", role="external")
    path = tmp_path / "merges.yaml"
    path.write_text(f"merges:\n  - {{merge: '{kate.key}', into: kate-morrison}}\n")
    pairs = load_merges(path)
    assert pairs == [(kate.key, "kate-morrison")]
    after, reports, _ = apply_merges(reg, found.mentions, pairs)
    survivor = person_id(reg, "kate-morrison")
    assert [r.survivor for r in reports] == [survivor] and reports[0].moved == 3
    assert reg.resolve("kate.morrison@brightpath-coordination.example").identity_id == survivor
    assert reg.resolve("Kate Morrison").identity_id == survivor  # the old name is an alias now
    again, more, refused = apply_merges(reg, after, pairs)
    assert more == [] and again == after and refused == []


def test_an_identity_merged_before_is_never_followed_to_its_survivor_by_a_second_merge() -> None:
    """Merging Kate (merged into Sarah already) into Tom would merge Sarah, whom nobody named:
    refused, and Sarah stays herself."""
    reg = registry("wattle")
    found = extract_mentions(reg, records("wattle"))
    kate = next(p for p in reg if p.origin == "discovered")
    sarah, tom = person_id(reg, "sarah-jones"), person_id(reg, "tom-hadley")
    pairs = [(kate.key, "sarah-jones"), (kate.key, "tom-hadley"), (kate.id, "sarah-jones")]
    after, reports, refused = apply_merges(reg, found.mentions, pairs)
    assert [r.survivor for r in reports] == [sarah] and refused == [pairs[1]]
    assert reg.canonical(sarah) == sarah and reg.canonical(kate.id) == sarah
    assert not {m.identity_id for m in after} & {kate.id} and tom in {m.identity_id for m in after}
    with pytest.raises(IdentityError, match="merged into .* already"):
        merge_identities(reg, after, kate.id, tom)
    assert conflicts(pairs, tenant="wattle") == [(1, 0)]
    # a chain is one person: merged into Sarah, who is merged into Tom, then into Tom again
    chain = [(kate.key, "sarah-jones"), ("sarah-jones", "tom-hadley"), (kate.key, "tom-hadley")]
    assert conflicts(chain, tenant="wattle") == []


def test_mentions_are_stored_as_a_table(extracted: dict[str, Any]) -> None:
    _, found = extracted["bluegum"]
    table = mentions_table(found.mentions)
    assert table.schema.equals(MENTION_SCHEMA)
    assert table.num_rows == len(found.mentions)
    assert set(table.column("tenant_id").to_pylist()) == {"bluegum"}
    assert table.column("group_id").null_count == table.num_rows  # groups attach them later


def test_a_shared_address_is_ambiguous_until_a_name_tells_them_apart() -> None:
    reg = registry("wattle")
    helen = reg.by_key("helen-pereira")
    assert helen is not None
    family = "pereira.family@example.net"
    reg.put(replace(helen, emails=(*helen.emails, family)))
    tony = add_person(reg, "tony-pereira", "Tony Pereira", emails=(family,), role="family")
    shared = reg.resolve(family)
    assert shared.identity_id is None and set(shared.candidates) == {helen.id, tony.id}
    assert reg.resolve(f"Tony Pereira <{family}>").identity_id == tony.id


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("Grace checked his bloods", {"grace-fitzgerald"}),
        ("we got through the night by grace and patience", set()),
        ("SJ said it's fine, ask Jane Okafor", {"sarah-jones", "jane-okafor"}),
        ("@DanK can you cover", {"daniel-kim"}),
        (
            "call 0412 555 301 or email leanne.walsh@wattlegrove.org.au",
            {"sarah-jones", "leanne-walsh"},
        ),
    ],
)
def test_names_in_text_are_found_as_written(text: str, named: set[str]) -> None:
    reg = registry("wattle")
    rec = {"id": "t1", "source": "discord_chat", "author": "Tom H", "recipients": [], "cc": []}
    found = extract_mentions(reg, [{**rec, "text": text, "timestamp": "2025-12-01T09:00:00+11:00"}])
    mentioned = {m.identity_id for m in found.mentions if m.mention_type == "mentioned"}
    assert mentioned == {person_id(reg, k) for k in named}


# ---------------------------------------------------------------------- keeping the index up to date
def lookups(reg: IdentityRegistry) -> list[tuple[str, str | None]]:
    """Values to resolve (with an address beside some): every form each person is on file
    under, the name steps' forms of their names, near misses and strangers."""
    out: list[tuple[str, str | None]] = [
        (raw, None)
        for raw in ("Sarah", "SJ", "Kate", "Nobody Here", "nobody@example.com", "0400 000 000")
    ]
    for p in reg:
        words = p.name.split()
        forms = [p.name, *p.aliases, *p.emails, *p.phones]
        forms += [p.name[:-1], p.name + "e", p.name.upper()]  # near misses
        if len(words) > 1:
            forms += [f"{words[0]} {words[-1][0]}.", "".join(w[0] for w in words), words[0]]
        out += [(raw, None) for raw in forms]
        out += [(f"{p.name} <{addr}>", None) for addr in p.emails]
        out += [(p.name[:-1], addr) for addr in (*p.emails[:1], "someone.else@example.com")]
    return list(dict.fromkeys(out))


def assert_answers_as_rebuilt(reg: IdentityRegistry) -> None:
    """``reg`` (its index kept up to date, its answers remembered) resolves every lookup as a
    registry of the same people whose index is built afresh."""
    fresh = replace(reg, _index=None, _memo={})
    for raw, address in lookups(reg):
        assert reg.resolve(raw, address=address) == fresh.resolve(raw, address=address), raw


def test_an_index_kept_up_to_date_answers_as_one_rebuilt() -> None:
    reg = registry("wattle")
    assert_answers_as_rebuilt(reg)  # builds the index: each change below updates it
    raws = [
        "Kate Morrison <kate@brightpath.example>",
        "0499 111 222",
        "Sara Jnes",
        "Sarah Jones <sarah.j.home@example.com>",  # her: on file, so nothing is learnt
        "Kate Morrison <kate.morrison@home.example>",  # learnt by the discovered Kate
        "Katie M <0499 111 222>",
    ]
    for raw in raws:
        discover(reg, [raw])
        assert_answers_as_rebuilt(reg)
    kate = reg.by_key("discovered:kate@brightpath.example")
    sarah = reg.by_key("sarah-jones")
    assert kate is not None and sarah is not None
    changes = [
        lambda: reg.put(replace(kate, aliases=(*kate.aliases, "Katie", "KM"))),
        lambda: add_person(reg, "sarah-jonas", "Sarah Jonas", aliases=("Sarah",)),
        lambda: reg.learn(kate.id, address="km@example.org", phone="+61499111333"),
        lambda: reg.put(replace(reg.get(kate.id) or kate, name="Katherine Morrison")),
        lambda: reg.put(replace(sarah, aliases=sarah.aliases[1:], emails=(), phones=())),
        lambda: merge_identities(reg, [], "discovered:+61499111222", kate.key),
        lambda: reg.remove(person_id(reg, "sarah-jonas")),
    ]
    for change in changes:
        change()
        assert_answers_as_rebuilt(reg)
    assert reg.resolve("Sarah").identity_id == sarah.id  # the second Sarah is gone again


NAMES = ("Sarah Jones", "Sara Jones", "Sarah Jonas", "Kate Morrison", "Kate", "Tom H", "SJ", "Mike")
ADDRESSES = ("a@x.example", "b@x.example", "sarah.jones@wattlegrove.org.au")
PHONES = ("0412 555 301", "0499 111 222")
changes = st.one_of(
    st.tuples(
        st.just("discover"),
        st.sampled_from(
            [*NAMES, *ADDRESSES, *PHONES, *(f"{n} <{a}>" for n in NAMES for a in ADDRESSES)]
        ),
    ),
    st.tuples(st.just("alias"), st.integers(0, 99), st.sampled_from(NAMES)),
    st.tuples(st.just("learn"), st.integers(0, 99), st.sampled_from(ADDRESSES + PHONES)),
    st.tuples(st.just("rename"), st.integers(0, 99), st.sampled_from(NAMES)),
    st.tuples(st.just("drop"), st.integers(0, 99)),
    st.tuples(st.just("merge"), st.integers(0, 99), st.integers(0, 99)),
    st.tuples(st.just("remove"), st.integers(0, 99)),
)


@settings(max_examples=30, deadline=None)
@given(st.lists(changes, max_size=8))
def test_any_sequence_of_changes_answers_as_a_rebuilt_index(steps: list[tuple[Any, ...]]) -> None:
    reg = registry("wattle")
    assert_answers_as_rebuilt(reg)
    for what, *args in steps:
        people = list(reg)
        p = people[args[0] % len(people)] if args and isinstance(args[0], int) else people[0]
        if what == "discover":
            discover(reg, [args[0]])
        elif what == "alias":
            reg.put(replace(p, aliases=(*p.aliases, args[1])))
        elif what == "learn":
            phone = normalize_phone(args[1])
            reg.learn(p.id, address=None if phone else args[1], phone=phone)
        elif what == "rename":
            reg.put(replace(p, name=args[1]))
        elif what == "drop":
            reg.put(replace(p, aliases=p.aliases[1:], emails=p.emails[1:], phones=p.phones[:-1]))
        elif what == "merge":
            other = people[args[1] % len(people)]
            if other.id != p.id:
                merge_identities(reg, [], p.id, other.id)
        else:
            reg.remove(p.id)
        assert_answers_as_rebuilt(reg)


def test_discovering_identities_indexes_each_detail_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A record with thousands of recipients costs linear work, not the whole index again for
    each one (that held a sync, and the home's lock, for minutes)."""
    indexed = 0
    add = NameIndex.add

    def counted(self: NameIndex, pid: str, *, name: str, **details: Any) -> None:
        nonlocal indexed
        details = {k: tuple(v) for k, v in details.items()}
        indexed += 1 + sum(len(v) for v in details.values())
        add(self, pid, name=name, **details)

    monkeypatch.setattr(NameIndex, "add", counted)
    n = 2_000
    reg = IdentityRegistry("t1")
    discover(reg, [f"p{i}@x{i}.example" for i in range(n)])
    assert len(reg) == n and indexed <= 2 * n
    # one unknown person seen with n addresses grows by one address at a time
    indexed = 0
    reg = IdentityRegistry("t1")
    discover(reg, [f"Pat Example <pat{i}@x.example>" for i in range(n)])
    pat = reg.by_key("discovered:pat0@x.example")
    assert len(reg) == 1 and pat is not None and len(pat.emails) == n
    assert indexed <= 2 * n


def brute_force_fuzzy(forms: dict[str, set[str]], norm: str) -> list[tuple[str, float]]:
    """The fuzzy step as difflib alone answers it: every form scored in Python."""
    best: dict[str, float] = {}
    for form, pids in forms.items():
        if len(form) < FUZZY_MIN_CHARS:
            continue
        ratio = difflib.SequenceMatcher(None, form, norm, autojunk=False).ratio()
        if ratio >= FUZZY_CUTOFF:
            for pid in pids:
                best[pid] = max(best.get(pid, 0.0), ratio)
    return sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))


near_names = st.text(alphabet="aeinorst jk", min_size=3, max_size=14)


@settings(max_examples=200, deadline=None)
@given(st.lists(near_names, min_size=1, max_size=30), st.lists(near_names, max_size=10))
def test_the_fuzzy_step_finds_what_a_scan_of_every_form_finds(
    names: list[str], queries: list[str]
) -> None:
    """The C prefilter drops no form difflib would keep at the cutoff, and scores as difflib."""
    index = NameIndex()
    forms: dict[str, set[str]] = {}
    for i, name in enumerate(names):
        index.add(f"p{i % 7}", name=name)
        norm = normalize_name(name)
        if norm:
            forms.setdefault(norm, set()).add(f"p{i % 7}")
    for query in [*queries, *names]:
        norm = normalize_name(query)
        assert index.fuzzy(norm) == brute_force_fuzzy(forms, norm), norm


def test_fuzzy_lookups_against_thousands_of_names_read_only_the_names_near_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each lookup hands the C comparison only the forms sharing enough of its trigrams, and
    takes into Python only those near it: not every name on file (in Python that took a
    record of 4,000 strangers 34 s; in C it still grew as the square of the names)."""
    scored = 0
    compared: list[int] = []
    set_seq1 = difflib.SequenceMatcher.set_seq1
    extract_iter = process.extract_iter

    def counted(self: difflib.SequenceMatcher[str], a: str) -> None:
        nonlocal scored
        scored += 1
        set_seq1(self, a)

    def handed(query: str, choices: Any, **kwargs: Any) -> Any:
        choices = list(choices)
        compared.append(len(choices))
        return extract_iter(query, choices, **kwargs)

    monkeypatch.setattr(difflib.SequenceMatcher, "set_seq1", counted)
    monkeypatch.setattr(process, "extract_iter", handed)
    rnd = random.Random(7)
    names = [
        " ".join("".join(rnd.choices(string.ascii_lowercase, k=6)) for _ in range(2))
        for _ in range(3_000)
    ]
    index = NameIndex()
    for i, name in enumerate(names):
        index.add(f"p{i}", name=name)
    for i in range(34, 3_000, 100):
        typo = names[i][:3] + names[i][4:]
        assert [pid for pid, _ in index.fuzzy(typo)] == [f"p{i}"]
    assert scored < 30 * 3
    assert max(compared) < 60, compared


GIVEN = (
    "Sarah", "Sara", "Jon", "John", "Jonathan", "Kate", "Katie", "Mick", "Mike", "Priya",
    "Anand", "Zoë", "José", "Björn", "Siobhán", "Wei", "Li", "Ngọc", "Fatima", "Ann", "Anne",
)  # fmt: skip
SURNAMES = (
    "Jones", "Jonas", "Smith", "Smyth", "Morrison", "Brennan", "Müller", "Mueller", "García",
    "Garcia", "O'Brien", "McDonald", "MacDonald", "Nguyen", "Shah", "Ó Súilleabháin", "Li", "Ng",
)  # fmt: skip


def written(rnd: random.Random, given: str, surname: str) -> str:
    """One way a stream writes a person: initials, surname first, an e-mail local part,
    accents decomposed, a title, a typo."""
    roll = rnd.randrange(9)
    if roll == 0:
        return f"{given[0]}. {surname}"
    if roll == 1:
        return f"{surname}, {given}"
    if roll == 2:
        return rnd.choice([f"{given}.{surname}", f"{given[0]}{surname}", f"{given}_{surname}42"])
    if roll == 3:
        return unicodedata.normalize("NFD", f"{given} {surname}")
    if roll == 4:
        return f"Dr {given} {surname} (RN)"
    if roll == 5:
        return f"{given} {rnd.choice(GIVEN)} {surname}"
    if roll == 6:
        return f"{given} {surname[0]}"
    text = f"{given} {surname}"
    i = rnd.randrange(len(text) - 1)
    return rnd.choice(
        [
            text[:i] + text[i + 1 :],
            text[:i] + rnd.choice("aeiouyknst") + text[i + 1 :],
            text[:i] + text[i + 1] + text[i] + text[i + 2 :],
            text[:i] + text[i] + text[i:],
        ]
    )


def test_the_fuzzy_step_finds_what_comparing_every_pair_finds_among_thousands_of_names() -> None:
    """On a few thousand people written every way streams write them, the trigrams leave out
    no form whose ratio reaches the cutoff, and every lookup answers as one comparing every
    form (rapidfuzz's ratio, never below difflib's, scores every pair; difflib those at the
    cutoff); discarding everyone empties the index."""
    rnd = random.Random(23)
    index = NameIndex()
    owners: dict[str, set[str]] = {}
    for i in range(1_500):
        given, surname = rnd.choice(GIVEN), rnd.choice(SURNAMES)
        name = f"{given} {surname}"
        aliases = [written(rnd, given, surname) for _ in range(rnd.randrange(3))]
        index.add(f"p{i}", name=name, aliases=aliases)
        for raw in (name, *aliases):
            if norm := normalize_name(raw):
                owners.setdefault(norm, set()).add(f"p{i}")
    forms = [form for form in owners if len(form) >= FUZZY_MIN_CHARS]
    queries = [
        *owners,
        *(
            normalize_name(written(rnd, rnd.choice(GIVEN), rnd.choice(SURNAMES)))
            for _ in range(1_500)
        ),
    ]
    queries = [q for q in dict.fromkeys(queries) if q]
    assert len(forms) > 1_000 and len(queries) > 2_000
    scores = process.cdist(
        queries, forms, scorer=fuzz.ratio, score_cutoff=FUZZY_CUTOFF * 100 - 1e-6, workers=1
    )
    accepted = 0
    for row, query in zip(scores, queries, strict=True):
        near = [forms[j] for j in row.nonzero()[0]]
        assert set(near) <= index._near(query), query
        expected = brute_force_fuzzy({form: owners[form] for form in near}, query)
        assert index.fuzzy(query) == expected, query
        accepted += len(expected)
    assert accepted > len(queries)  # many names near many others, not a population of strangers
    for i in range(1_500):
        index.discard(f"p{i}")
    assert not index._by_length and not index._by_trigram and not index._trigram_forms
