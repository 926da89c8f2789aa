"""The identity pass the linked_groups step runs: the merges file of a collection, checked
against its people file, and merges naming identities a collection never saw."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from corpus_index.errors import ConfigError
from corpus_index.identities import identity_id
from corpus_index.identity_pass import display_names, identify

PEOPLE = {
    "tenant": "care",
    "people": [
        {"id": "sarah-jones", "name": "Sarah Jones", "aliases": ["Sarah"]},
        {"id": "mike-brennan", "name": "Mike Brennan"},
    ],
}
RECORDS = [
    {
        "id": "u1",
        "source": "sms_message",
        "author": "0412 555 301",
        "recipients": ["Mike Brennan"],
        "timestamp": "2025-12-01T08:00:00+11:00",
        "text": "running late, 10 min",
    },
    {
        "id": "u2",
        "source": "sms_message",
        "author": "Mike Brennan",
        "recipients": ["0412 555 301"],
        "timestamp": "2025-12-01T08:02:00+11:00",
        "text": "no worries Sarah",
    },
]
PHONE = "discovered:+61412555301"


def _files(tmp_path: Path, merges: list[dict[str, str]]) -> tuple[Path, Path]:
    people, merges_file = tmp_path / "people.yaml", tmp_path / "merges.yaml"
    people.write_text(yaml.safe_dump(PEOPLE))
    merges_file.write_text(yaml.safe_dump({"merges": merges}))
    return people, merges_file


def test_the_merges_file_moves_mentions_and_renames_the_person(tmp_path: Path) -> None:
    people, merges = _files(tmp_path, [{"merge": PHONE, "into": "sarah-jones"}])
    before = identify("care", RECORDS, people=people)
    phone = identity_id("care", PHONE)
    assert ("u1", phone, "author") in {
        (m.unit_id, m.identity_id, m.mention_type) for m in before.mentions
    }
    assert display_names(before.registry)("0412 555 301") != "Sarah Jones"
    after = identify("care", RECORDS, people=people, merges_file=merges)
    sarah = identity_id("care", "sarah-jones")
    found = {(m.unit_id, m.identity_id, m.mention_type) for m in after.mentions}
    assert ("u1", sarah, "author") in found and ("u2", sarah, "recipient") in found
    assert phone not in {m.identity_id for m in after.mentions}
    assert phone not in {s.identity_id for s in after.sightings}
    assert [r.merged for r in after.merges] == [phone] and not after.not_here
    assert display_names(after.registry)("0412 555 301") == "Sarah Jones"


@pytest.mark.parametrize(
    "ref",
    ["discovered:0412 555 301", "discovered:+61 (0)412 555 301", "discovered:Zed@Q.example"],
)
def test_a_merges_file_key_is_normalised_as_discovery_normalises(tmp_path: Path, ref: str) -> None:
    """A number or address written as a message wrote it names the discovered key (a
    normalised one), never a key nobody has, set aside as not seen here at every sync."""
    zed = {**RECORDS[0], "id": "u3", "author": "Zed Q <zed@q.example>", "recipients": ["Mike"]}
    people, merges = _files(tmp_path, [{"merge": ref, "into": "sarah-jones"}])
    out = identify("care", [*RECORDS, zed], people=people, merges_file=merges)
    merged = "discovered:zed@q.example" if "@" in ref else PHONE
    assert [r.merged for r in out.merges] == [identity_id("care", merged)] and not out.not_here


def test_a_merge_of_an_identity_never_seen_here_waits(tmp_path: Path) -> None:
    people, merges = _files(
        tmp_path, [{"merge": "discovered:x@example.org", "into": "mike-brennan"}]
    )
    recorded = [(identity_id("care", "discovered:nobody"), "sarah-jones")]
    out = identify("care", RECORDS, people=people, merges_file=merges, recorded=recorded)
    assert out.not_here == [("discovered:x@example.org", "mike-brennan"), *recorded]
    assert not out.merges


def test_a_second_merge_of_a_merged_identity_is_refused_never_merging_its_survivor(
    tmp_path: Path,
) -> None:
    """The number merged into Sarah, then into Mike: followed to Sarah, the second merge
    would merge Sarah herself into Mike. A merges file saying so is refused; recorded merges
    saying so (the CLI refuses them now, older ones stay) are applied up to the second,
    which is reported refused."""
    people, merges = _files(
        tmp_path,
        [{"merge": PHONE, "into": "sarah-jones"}, {"merge": PHONE, "into": "mike-brennan"}],
    )
    with pytest.raises(ConfigError, match=r"merges.yaml: merges\[1\]: .* by merges\[0\]"):
        identify("care", RECORDS, people=people, merges_file=merges)
    phone, sarah = identity_id("care", PHONE), identity_id("care", "sarah-jones")
    recorded = [(phone, sarah), (phone, identity_id("care", "mike-brennan"))]
    out = identify("care", RECORDS, people=people, recorded=recorded)
    assert out.registry.get(sarah).key == "sarah-jones"  # type: ignore[union-attr]
    assert [r.merged for r in out.merges] == [phone] and out.refused == recorded[1:]
    authored = {m.unit_id: m.identity_id for m in out.mentions if m.mention_type == "author"}
    assert authored["u1"] == sarah


@pytest.mark.parametrize("ref", ["sarah-jonse", "bob"])
def test_a_merges_file_naming_no_one_on_file_is_refused(tmp_path: Path, ref: str) -> None:
    people, merges = _files(
        tmp_path, [{"merge": PHONE, "into": "sarah-jones"}, {"merge": ref, "into": "mike-brennan"}]
    )
    with pytest.raises(ConfigError, match=rf"merges.yaml: merges\[1\]: '{ref}' is no one"):
        identify("care", RECORDS, people=people, merges_file=merges)


@pytest.mark.parametrize(
    ("merged", "survivor"),
    [
        ("sarah-jones", "sarah-jones"),
        (PHONE, identity_id("care", PHONE)),  # a key and its identity's id
        ("discovered:0412 555 301", PHONE),  # the same number, as a message wrote it
    ],
)
def test_a_merges_file_merging_someone_into_themselves_is_refused(
    tmp_path: Path, merged: str, survivor: str
) -> None:
    """Such an entry is a slip (the other person was meant): refused naming the file and the
    entry, as `corpus identities merge` refuses it, not passed over at every sync."""
    people, merges = _files(
        tmp_path,
        [{"merge": PHONE, "into": "mike-brennan"}, {"merge": merged, "into": survivor}],
    )
    with pytest.raises(ConfigError, match=r"merges.yaml: merges\[1\]: .*into itself"):
        identify("care", RECORDS, people=people, merges_file=merges)
