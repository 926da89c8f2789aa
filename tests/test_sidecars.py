"""RFC 0013 embedding sidecars: conformance fixtures 01 and 02, and what the schema rejects."""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

import pytest

from corpus_index.config import DEFAULT_SECTIONS
from corpus_index.embedders.hashing import HashEmbedder
from corpus_index.errors import CorpusError, SidecarError
from corpus_index.hashing import content_hash
from corpus_index.inputs import input_units
from corpus_index.kinds.uw_deals import parse_text
from corpus_index.sidecars import (
    MAX_SIDECAR_BYTES,
    SidecarEntry,
    build_sidecar,
    current_block_hashes,
    mark_stale,
    read_sidecar,
    sidecar_path,
    validate_sidecar,
    write_sidecar,
)

FIXTURES = Path(__file__).parent / "fixtures" / "corpus-fixtures"
ROUNDTRIP = FIXTURES / "01-sidecar-roundtrip"
STALE = FIXTURES / "02-stale-sidecar"
EMBEDDABLE = tuple(DEFAULT_SECTIONS)
FIXED_TIME = dt.datetime(2026, 3, 15, 12, 0, tzinfo=dt.UTC)


def sidecar_for(
    path: Path, embedder: HashEmbedder, *, generated_at: dt.datetime | None = None
) -> dict[str, Any]:
    """A sidecar for one ``.uw.md`` file, the way a producer makes one (also made fixture 02)."""
    front, blocks = parse_text(str(path), path.read_text(encoding="utf-8"))
    keyed: list[tuple[str, str, dict[str, Any]]] = []
    counters: dict[str, int] = {}
    for section, _line, content in blocks:
        n = counters.get(section, 0)
        counters[section] = n + 1
        if section in EMBEDDABLE:
            keyed.append((section, f"{section}/{n}", content))
    units = [
        input_units("default-v1", section=s, content=c, source_type="uw_block")[0]
        for s, _, c in keyed
    ]
    vectors = embedder.embed([u.text for u in units])
    entries = [
        SidecarEntry(s, key, content_hash(c), vectors[i].tolist(), units[i].input_hash)
        for i, (s, key, c) in enumerate(keyed)
    ]
    return build_sidecar(
        uw_version=str(front["uw_version"]),
        deal_id=str(front["deal_id"]),
        backend_spec=embedder.backend_spec,
        dim=embedder.dim,
        input_format="default-v1",
        entries=entries,
        generated_at=generated_at,
        revision=embedder.revision,
        normalized=embedder.normalized,
    )


@pytest.fixture
def sidecar() -> dict[str, Any]:
    return sidecar_for(ROUNDTRIP / "deal.uw.md", HashEmbedder(8), generated_at=FIXED_TIME)


# -- 01: produce, validate, write, read back ------------------------------------------------


def test_fixture_01_roundtrip(tmp_path: Path) -> None:
    source = ROUNDTRIP / "deal.uw.md"
    doc = sidecar_for(source, HashEmbedder(64))
    validate_sidecar(doc)

    assert doc["uw_version"] == "1.1"
    assert doc["deal_id"] == "DEAL-2026-0042"
    assert doc["embedder"] == {
        "model": "hash:v1-64",
        "dim": 64,
        "input_format": "default-v1",
        "revision": "v1",
        "normalized": True,
    }
    assert dt.datetime.fromisoformat(doc["generated_at"]).tzinfo is not None

    current = current_block_hashes(source, EMBEDDABLE)
    assert sorted(current) == [
        "borrower_sponsor/0",
        "market_analysis/0",
        "property/0",
        "risk_assessment/0",
    ], "debt_terms is not embeddable"
    assert [b["block_key"] for b in doc["blocks"]] == [
        "property/0",
        "market_analysis/0",
        "risk_assessment/0",
        "borrower_sponsor/0",
    ], "one entry per embeddable block, in document order"
    for block in doc["blocks"]:
        assert block["content_hash"] == current[block["block_key"]], "every entry is pinned"
        assert len(block["vector"]) == 64

    out = sidecar_path(tmp_path / "deal.uw.md")
    assert out.name == "deal.embeddings.json"
    write_sidecar(out, doc)
    assert [p.name for p in tmp_path.iterdir()] == ["deal.embeddings.json"], "no temp file left"
    back = read_sidecar(out)
    validate_sidecar(back)
    assert back == doc, "vectors survive the JSON round trip exactly"
    assert mark_stale(back, current).stale == []


def test_write_refuses_a_nonconformant_sidecar_and_keeps_the_old_file(
    tmp_path: Path, sidecar: dict[str, Any]
) -> None:
    out = tmp_path / "deal.embeddings.json"
    write_sidecar(out, sidecar)
    before = out.read_bytes()
    broken = copy.deepcopy(sidecar)
    del broken["blocks"][0]["content_hash"]
    with pytest.raises(
        SidecarError, match=r"deal\.embeddings\.json: \$\.blocks\[0\]\.content_hash"
    ):
        write_sidecar(out, broken)
    assert out.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["deal.embeddings.json"]
    # validate=False is for a document build_sidecar has just validated: it is not checked again
    write_sidecar(out, broken, validate=False)
    assert "content_hash" not in json.loads(out.read_text(encoding="utf-8"))["blocks"][0]


def test_read_rejects_non_json(tmp_path: Path) -> None:
    path = tmp_path / "x.embeddings.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(SidecarError, match=r"x\.embeddings\.json: \$: not a JSON document"):
        read_sidecar(path)
    path.write_text("[]", encoding="utf-8")
    with pytest.raises(SidecarError, match=r"expected a JSON object, got list"):
        read_sidecar(path)


@pytest.mark.parametrize(
    ("body", "limit", "message"),
    [
        ("[" * 100_000, None, r"not a JSON document that can be read \(nested too deeply\)"),
        ('{"uw_version": ' + "[" * 900 + "]" * 900 + "}", None, r"nested 901 deep"),
        ('{"uw_version": ' + "9" * 5000 + "}", None, r"not a JSON document \(Exceeds the limit"),
        (b"\xff{}", None, r"not a JSON document \('utf-8' codec"),
        ("{}" + " " * 100, 64, r"the file is over 64 bytes; it is not read"),
    ],
    ids=["too-deep-to-parse", "too-deep-to-check", "integer-too-long", "not-utf8", "too-large"],
)
def test_read_refuses_what_json_cannot_take_in(
    tmp_path: Path, body: str | bytes, limit: int | None, message: str
) -> None:
    path = tmp_path / "x.embeddings.json"
    path.write_bytes(body if isinstance(body, bytes) else body.encode())
    with pytest.raises(SidecarError, match=r"x\.embeddings\.json: \$: " + message):
        read_sidecar(path, max_bytes=limit or MAX_SIDECAR_BYTES)


def test_read_reports_nan_written_by_another_producer(
    tmp_path: Path, sidecar: dict[str, Any]
) -> None:
    sidecar["blocks"][1]["vector"][2] = math.nan
    path = tmp_path / "deal.embeddings.json"
    path.write_text(json.dumps(sidecar), encoding="utf-8")  # Python writes a bare NaN token
    with pytest.raises(SidecarError, match=r"\$\.blocks\[1\]\.vector\[2\]: nan is not a finite"):
        read_sidecar(path)
    assert read_sidecar(path, validate=False)["deal_id"] == "DEAL-2026-0042"


def build8(entries: list[SidecarEntry], **kwargs: Any) -> dict[str, Any]:
    """A sidecar of deal ``D`` from ``hash:v1-8``."""
    return build_sidecar(
        uw_version="1.1",
        deal_id="D",
        backend_spec="hash:v1-8",
        dim=8,
        input_format="default-v1",
        entries=entries,
        **kwargs,
    )


def test_build_requires_an_aware_timestamp() -> None:
    with pytest.raises(SidecarError, match=r"\$\.generated_at: .* no time zone"):
        build8([], generated_at=dt.datetime(2026, 1, 1))


def test_build_writes_utc_whole_seconds() -> None:
    doc = build_sidecar(
        uw_version="1.1",
        deal_id="D",
        backend_spec="hash:v1-8",
        dim=8,
        input_format="default-v1",
        entries=[],
        generated_at=dt.datetime(
            2026, 1, 1, 9, 30, 15, 123456, tzinfo=dt.timezone(dt.timedelta(hours=-7))
        ),
    )
    assert doc["generated_at"] == "2026-01-01T16:30:15Z"
    assert "revision" not in doc["embedder"] and "normalized" not in doc["embedder"]


def test_build_rejects_a_vector_of_the_wrong_length() -> None:
    entry = SidecarEntry("property", "property/0", content_hash({"a": "b"}), [0.5] * 7)
    with pytest.raises(
        SidecarError, match=r"\$\.blocks\[0\]\.vector: has 7 values, embedder\.dim is 8"
    ):
        build_sidecar(
            uw_version="1.1",
            deal_id="D",
            backend_spec="hash:v1-8",
            dim=8,
            input_format="default-v1",
            entries=[entry],
        )


def test_sidecar_error_is_a_permanent_value_error() -> None:
    assert issubclass(SidecarError, CorpusError) and issubclass(SidecarError, ValueError)


# -- 02: a changed block marks exactly its entry stale --------------------------------------


def test_fixture_02_committed_sidecar_is_valid_and_current() -> None:
    doc = read_sidecar(STALE / "deal.embeddings.json")
    current = current_block_hashes(STALE / "deal.uw.md", EMBEDDABLE)
    marked, stale = mark_stale(doc, current)
    assert stale == []
    assert all(b["stale"] is False for b in marked["blocks"])
    assert [b["block_key"] for b in doc["blocks"]] == [
        "market_analysis/0",
        "risk_assessment/0",
        "risk_assessment/1",
        "borrower_sponsor/0",
    ]


def test_fixture_02_committed_sidecar_is_what_our_code_produces() -> None:
    committed = read_sidecar(STALE / "deal.embeddings.json")
    fresh = sidecar_for(STALE / "deal.uw.md", HashEmbedder(8), generated_at=FIXED_TIME)
    pins = [(b["block_key"], b["content_hash"], b["input_hash"]) for b in fresh["blocks"]]
    assert [
        (b["block_key"], b["content_hash"], b["input_hash"]) for b in committed["blocks"]
    ] == pins
    assert committed["embedder"] == fresh["embedder"]


def test_fixture_02_modified_block_is_stale() -> None:
    doc = read_sidecar(STALE / "deal.embeddings.json")
    original = copy.deepcopy(doc)
    current = current_block_hashes(STALE / "deal.modified.uw.md", EMBEDDABLE)

    marked, stale = mark_stale(doc, current)

    assert stale == ["risk_assessment/1"]
    assert {b["block_key"]: b["stale"] for b in marked["blocks"]} == {
        "market_analysis/0": False,  # only a YAML comment was added: content, not text, is pinned
        "risk_assessment/0": False,
        "risk_assessment/1": True,
        "borrower_sponsor/0": False,
    }
    assert doc == original, "mark_stale returns a copy"
    validate_sidecar(marked)


def test_entry_of_a_removed_block_is_stale(sidecar: dict[str, Any]) -> None:
    current = current_block_hashes(ROUNDTRIP / "deal.uw.md", EMBEDDABLE)
    del current["market_analysis/0"]
    marked, stale = mark_stale(sidecar, current)
    assert stale == ["market_analysis/0"]
    assert sum(b["stale"] for b in marked["blocks"]) == 1


def test_paragraph_entries_follow_their_block(sidecar: dict[str, Any]) -> None:
    block = sidecar["blocks"][0]
    sidecar["blocks"] = [
        {**block, "block_key": f"{block['block_key']}#p0"},
        {**block, "block_key": f"{block['block_key']}#p1"},
    ]
    validate_sidecar(sidecar)
    assert mark_stale(sidecar, {block["block_key"]: block["content_hash"]}).stale == []
    assert mark_stale(sidecar, {}).stale == [f"{block['block_key']}#p0", f"{block['block_key']}#p1"]


def rfc_example(path: Path, dim: int = 8) -> dict[str, Any]:
    """A sidecar in the shape RFC 0013 draws: ``uw_version``, ``deal_id``, ``embedder``
    (``model``, ``dim``, ``input_format`` only), ``generated_at``, and ``blocks`` whose entries
    carry only ``section``, ``content_hash`` and ``vector`` (no ``block_key``)."""
    front, blocks = parse_text(str(path), path.read_text(encoding="utf-8"))
    embedder = HashEmbedder(dim)
    embeddable = [(s, c) for s, _line, c in blocks if s in EMBEDDABLE]
    texts = [
        input_units("default-v1", section=s, content=c, source_type="uw_block")[0].text
        for s, c in embeddable
    ]
    vectors = embedder.embed(texts)
    return {
        "uw_version": str(front["uw_version"]),
        "deal_id": str(front["deal_id"]),
        "embedder": {"model": embedder.backend_spec, "dim": dim, "input_format": "default-v1"},
        "generated_at": "2026-04-27T15:00:00Z",
        "blocks": [
            {"section": s, "content_hash": content_hash(c), "vector": vectors[i].tolist()}
            for i, (s, c) in enumerate(embeddable)
        ],
    }


def test_the_rfc_example_shape_is_accepted_and_checked_by_section() -> None:
    doc = rfc_example(STALE / "deal.uw.md")
    validate_sidecar(doc)  # no block_key, no revision, no normalized, no input_hash
    assert {frozenset(b) for b in doc["blocks"]} == {
        frozenset({"section", "content_hash", "vector"})
    }
    current = current_block_hashes(STALE / "deal.uw.md", EMBEDDABLE)
    assert mark_stale(doc, current).stale == []
    # the modified file changed the second risk block: only that entry goes stale, named by
    # its section and position since it has no key
    modified = current_block_hashes(STALE / "deal.modified.uw.md", EMBEDDABLE)
    marked, stale = mark_stale(doc, modified)
    assert stale == ["risk_assessment ($.blocks[2])"]
    assert [b["stale"] for b in marked["blocks"]] == [False, False, True, False]
    validate_sidecar(marked)
    # an RFC-shaped entry still MUST be pinned, and its pin checked
    del doc["blocks"][1]["content_hash"]
    with pytest.raises(SidecarError, match=r"\$\.blocks\[1\]\.content_hash: is required"):
        validate_sidecar(doc)


def test_our_writer_still_keys_and_pins_every_entry() -> None:
    doc = sidecar_for(STALE / "deal.uw.md", HashEmbedder(8), generated_at=FIXED_TIME)
    for block in doc["blocks"]:
        assert block["block_key"].startswith(block["section"] + "/")
        assert block["content_hash"].startswith("sha256:") and len(block["input_hash"]) == 64
    keyless = SidecarEntry("property", "", "sha256:" + "0" * 64, [0.5] * 8)
    with pytest.raises(SidecarError, match=r"\$\.blocks\[0\]\.block_key: '' does not match"):
        build8([keyless])


def test_block_keys_count_within_their_section(tmp_path: Path) -> None:
    text = (STALE / "deal.uw.md").read_text(encoding="utf-8")
    path = tmp_path / "d.uw.md"
    path.write_text(text, encoding="utf-8")
    hashes = current_block_hashes(path, ["risk_assessment"])
    assert list(hashes) == ["risk_assessment/0", "risk_assessment/1"]
    assert hashes["risk_assessment/0"] != hashes["risk_assessment/1"]


# -- what the schema and the code reject ----------------------------------------------------


def _broken(doc: dict[str, Any], change: str) -> dict[str, Any]:
    bad = copy.deepcopy(doc)
    block = bad["blocks"][1]
    if change == "missing content_hash":
        del block["content_hash"]
    elif change == "bad hash pattern":
        block["content_hash"] = "sha256:" + "A" * 64
    elif change == "hash without prefix":
        block["content_hash"] = "0" * 64
    elif change == "hash with trailing newline":
        block["content_hash"] = "sha256:" + "0" * 64 + "\n"
    elif change == "short vector":
        block["vector"] = block["vector"][:-1]
    elif change == "long vector":
        block["vector"] = [*block["vector"], 0.0]
    elif change == "NaN":
        block["vector"][3] = math.nan
    elif change == "infinity":
        block["vector"][3] = math.inf
    elif change == "string in vector":
        block["vector"][3] = "0.5"
    elif change == "unknown entry field":
        block["text"] = "the input text"
    elif change == "key of another section":
        block["block_key"] = "property/9"
    elif change == "duplicate key":
        block["block_key"] = bad["blocks"][0]["block_key"]
        block["section"] = bad["blocks"][0]["section"]
    elif change == "unnormalized vector":
        block["vector"] = [x * 2 for x in block["vector"]]
    elif change == "zero dim":
        bad["embedder"]["dim"] = 0
    elif change == "missing model":
        del bad["embedder"]["model"]
    elif change == "bad timestamp":
        bad["generated_at"] = "2026-13-01T00:00:00Z"
    elif change == "timestamp without zone":
        bad["generated_at"] = "2026-01-01T00:00:00"
    elif change == "unknown top-level field":
        bad["vectors"] = []
    else:  # pragma: no cover
        raise AssertionError(change)
    return bad


REJECTIONS = [
    ("missing content_hash", r"^\$\.blocks\[1\]\.content_hash: is required \(RFC 0013: .*MUST"),
    ("bad hash pattern", r"^\$\.blocks\[1\]\.content_hash: 'sha256:A+' does not match"),
    ("hash without prefix", r"^\$\.blocks\[1\]\.content_hash: '0+' does not match"),
    ("hash with trailing newline", r"^\$\.blocks\[1\]\.content_hash: .* is not sha256:<64 hex>"),
    ("short vector", r"^\$\.blocks\[1\]\.vector: has 7 values, embedder\.dim is 8"),
    ("long vector", r"^\$\.blocks\[1\]\.vector: has 9 values, embedder\.dim is 8"),
    ("NaN", r"^\$\.blocks\[1\]\.vector\[3\]: nan is not a finite number"),
    ("infinity", r"^\$\.blocks\[1\]\.vector\[3\]: inf is not a finite number"),
    ("string in vector", r"^\$\.blocks\[1\]\.vector\[3\]: '0\.5' is not of type 'number'"),
    ("unknown entry field", r"^\$\.blocks\[1\]: Additional properties .*'text'"),
    (
        "key of another section",
        r"^\$\.blocks\[1\]\.block_key: 'property/9' does not belong to section",
    ),
    ("duplicate key", r"^\$\.blocks\[1\]\.block_key: 'property/0' repeats \$\.blocks\[0\]"),
    (
        "unnormalized vector",
        r"^\$\.blocks\[1\]\.vector: norm is 2\.0+ but embedder\.normalized is true",
    ),
    ("zero dim", r"^\$\.embedder\.dim: 0 is less than the minimum of 1"),
    ("missing model", r"^\$\.embedder\.model: is required"),
    ("bad timestamp", r"^\$\.generated_at: '2026-13-01T00:00:00Z' is not a valid date-time"),
    ("timestamp without zone", r"^\$\.generated_at: '2026-01-01T00:00:00' does not match"),
    ("unknown top-level field", r"^\$: Additional properties .*'vectors'"),
]


@pytest.mark.parametrize(("change", "message"), REJECTIONS, ids=[r[0] for r in REJECTIONS])
def test_validate_rejects(sidecar: dict[str, Any], change: str, message: str) -> None:
    validate_sidecar(sidecar)
    with pytest.raises(SidecarError, match=message) as info:
        validate_sidecar(_broken(sidecar, change))
    assert info.value.json_path.startswith("$")


def test_validate_names_the_source_file_and_lists_further_problems(sidecar: dict[str, Any]) -> None:
    for block in sidecar["blocks"]:
        del block["content_hash"]
    with pytest.raises(SidecarError) as info:
        validate_sidecar(sidecar, source="exports/deal.embeddings.json")
    err = info.value
    assert str(err).startswith(
        "exports/deal.embeddings.json: $.blocks[0].content_hash: is required"
    )
    assert err.source == "exports/deal.embeddings.json"
    assert err.__notes__[0].startswith("also: $.blocks[1].content_hash: is required")


def test_validate_rejects_a_non_object() -> None:
    with pytest.raises(SidecarError, match=r"^\$: \[\] is not of type 'object'"):
        validate_sidecar([])


def test_mark_stale_validates_its_input(sidecar: dict[str, Any]) -> None:
    del sidecar["blocks"][0]["content_hash"]
    with pytest.raises(SidecarError, match="content_hash"):
        mark_stale(sidecar, {})
