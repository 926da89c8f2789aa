"""Sidecars that travel (RFC 0013): a deal folder that carries its sidecars is indexed without
embedding, a sidecar given to ``CorpusIndex.add`` lends its current entries, ``remove`` takes
a deal out of every generation and keeps its file, ``sidecars: beside`` placement (served
over HTTP from there too), and ``corpus sidecar verify`` on fixture 02.

One home for the module (hash embedders; two profiles, so two generations), synced in-process
with the library steps. The profiles' real embedders are wrapped to record what they embed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import yaml
from click.testing import CliRunner
from fastapi.testclient import TestClient

from corpus_index import home as home_module
from corpus_index import steps
from corpus_index.api import CorpusIndex
from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.deletion import WITHDRAWN, audit_deletion
from corpus_index.embedders.hashing import HashEmbedder
from corpus_index.errors import ConfigError
from corpus_index.gates import REPRODUCED
from corpus_index.home import Home
from corpus_index.http import create_app
from corpus_index.registry import GenerationSpec
from corpus_index.search import Principal
from corpus_index.sidecar_import import (
    SIDECAR_VECTORS_AGAIN,
    embedder_mismatch,
    matching_vectors,
)
from corpus_index.sidecars import read_sidecar, write_sidecar
from tests.corpusgen import deal_text, write_home
from tests.searchkit import build_home
from tests.support.http_server import serve_config
from tests.test_sidecars import STALE, rfc_example, sidecar_for

ALPHA = Principal("alpha", ("alpha-uw", "alpha-credit"))
MAIN, SECOND = "hash:v1-64", "hash:v1-32"


class CountingEmbedder:
    """A profile's real embedder, recording every text it is asked to embed."""

    def __init__(self, inner: Any, record: dict[str, list[str]]) -> None:
        self.inner = inner
        self.record = record.setdefault(inner.backend_spec, [])

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.record.extend(texts)
        return np.asarray(self.inner.embed(texts), dtype=np.float32)


@dataclasses.dataclass
class Report:
    ok: bool = True
    failed_runs: list[dict[str, Any]] = dataclasses.field(default_factory=list)


class LibrarySync:
    """``corpus sync`` in-process: the library steps, sidecars included."""

    def sync(
        self, settings: Settings, *, progress: Any = None, retry_refused: bool = False
    ) -> Report:
        corpus = build_home(settings, promote=False)
        for profile in corpus.config.profiles:
            for name in corpus.config.collections:
                steps.sidecars.run(corpus, profile, name)
        return Report()


@dataclasses.dataclass
class Travel:
    settings: Settings
    root: Path
    embedded: dict[str, list[str]]

    def index(self, **kwargs: Any) -> CorpusIndex:
        return CorpusIndex(self.settings, principal=ALPHA, runner=LibrarySync(), **kwargs)

    def vectors(self, deal_id: str) -> dict[str, dict[str, list[float]]]:
        """profile -> content_hash -> vector of the deal's rows in each live generation."""
        corpus = Home(self.settings)
        out: dict[str, dict[str, list[float]]] = {}
        for gen in corpus.registry.generations():
            rows = corpus.store.table(gen).search().where(f"deal_id = '{deal_id}'").to_list()
            out[gen.spec.profile] = {r["content_hash"]: list(r["vector"]) for r in rows}
        return out


@pytest.fixture(scope="module")
def travel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Travel]:
    root = tmp_path_factory.mktemp("travel")
    config_path = write_home(
        root, deals_per_tenant=1, extra_profiles={"second": {"embedder": SECOND}}
    )
    config = yaml.safe_load(config_path.read_text())
    config["profiles"]["second"]["namespace"] = "deals"
    del config["collections"]["beta-deals"]  # one tenant is enough here
    (root / "sources" / "carried").mkdir()
    config["collections"]["carried"] = {
        "kind": "uw_deals",
        "path": "sources/carried",
        "tenant": "alpha",
        "acl_groups": ["alpha-uw"],
        "namespace": "deals",
        "sidecars": "beside",
    }
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    settings = Settings(config_path=config_path, home=root / "home")
    embedded: dict[str, list[str]] = {}
    real = home_module.make_embedder
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(
            home_module,
            "make_embedder",
            lambda *a, **k: CountingEmbedder(real(*a, **k), embedded),
        )
        build_home(settings)
        yield Travel(settings, root, embedded)


def nudged(sidecar: dict[str, Any]) -> dict[str, Any]:
    """The sidecar with every vector moved a little (still unit length), so that a vector
    found in the index can only have come from it; little enough that the model gives each
    again (cosine above gates.REPRODUCED)."""
    for block in sidecar["blocks"]:
        v = np.asarray(block["vector"], dtype=np.float64)
        v[0] += 0.02
        block["vector"] = (v / np.linalg.norm(v)).tolist()
    return sidecar


def write_deal(folder: Path, name: str, risk: str, **kwargs: Any) -> Path:
    path = folder / f"{name}.uw.md"
    path.write_text(deal_text(name.upper(), tenant="alpha", acl=["alpha-uw"], risk=risk, **kwargs))
    return path


def test_a_deal_folder_that_carries_its_sidecars_embeds_only_a_sample_of_them_again(
    travel: Travel, tmp_path: Path
) -> None:
    # a sponsor's export: two deals, each with its sidecar from the same model (one in our
    # full shape, one in the RFC's shape), made outside this home
    export = tmp_path / "export"
    export.mkdir()
    full = write_deal(export, "deal-carried-a", "A sinkhole opened under the north lot.")
    rfc = write_deal(export, "deal-carried-b", "Asbestos was found in the boiler room lagging.")
    sidecars = {
        "DEAL-CARRIED-A": nudged(sidecar_for(full, HashEmbedder(64))),
        "DEAL-CARRIED-B": nudged(rfc_example(rfc, dim=64)),
    }
    for path, sidecar in zip((full, rfc), sidecars.values(), strict=True):
        write_sidecar(path.with_name(path.name.replace(".uw.md", ".embeddings.json")), sidecar)
    shutil.copytree(export, travel.root / "sources" / "carried", dirs_exist_ok=True)

    travel.embedded.clear()
    LibrarySync().sync(travel.settings)

    # the sidecars' model embeds again only a few of each sidecar's blocks, to check them (a
    # block whose vector its cache holds, one the home's deals share, is compared with that)
    again = travel.embedded.get(MAIN, [])
    assert 0 < len(again) <= 2 * SIDECAR_VECTORS_AGAIN < 2 * 4, again
    assert travel.embedded[SECOND], "the other profile has no sidecar: it embeds the deals"
    for deal_id, sidecar in sidecars.items():
        indexed = travel.vectors(deal_id)
        pins = {b["content_hash"]: b["vector"] for b in sidecar["blocks"]}
        assert set(indexed["main"]) == set(pins)
        for pin, vector in pins.items():
            np.testing.assert_allclose(indexed["main"][pin], vector, atol=1e-6)
    # ``sidecars: beside``: the main profile's sidecars are rewritten in place, every entry
    # keyed and pinned, the vectors kept; the second profile's stay under the home
    beside = read_sidecar(travel.root / "sources" / "carried" / "deal-carried-b.embeddings.json")
    assert all("block_key" in b and "input_hash" in b for b in beside["blocks"])
    by_pin = {b["content_hash"]: b["vector"] for b in sidecars["DEAL-CARRIED-B"]["blocks"]}
    for block in beside["blocks"]:
        np.testing.assert_allclose(block["vector"], by_pin[block["content_hash"]], atol=1e-6)
    exports = travel.settings.exports / "sidecars"
    assert not (exports / "main" / "carried").exists()
    assert (exports / "second" / "carried" / "deal-carried-b.embeddings.json").is_file()


def test_carried_sidecar_vectors_are_checked_against_the_model(travel: Travel) -> None:
    """A sidecar naming the profile's model whose vectors that model does not give again
    (random unit vectors here) lends none: a warning names it, and its blocks are embedded."""
    folder = travel.root / "sources" / "carried"
    source = write_deal(folder, "deal-forged", "Radon levels exceed limits in unit 4B.")
    honest = sidecar_for(source, HashEmbedder(64))
    forged = json.loads(json.dumps(honest))
    rng = np.random.default_rng(7)
    for block in forged["blocks"]:
        v = rng.normal(size=64)
        block["vector"] = (v / np.linalg.norm(v)).tolist()
    path = folder / "deal-forged.embeddings.json"
    write_sidecar(path, forged)
    corpus = Home(travel.settings)
    for step in (steps.source_manifest, steps.parsed_blocks, steps.embedding_inputs):
        step.run(corpus, "carried")

    outcome = steps.embeddings.run(corpus, "main", "carried")

    assert outcome.passed and outcome.from_sidecars == 0
    assert list(outcome.sidecars_refused) == [str(path)]
    assert "its vectors are not the model's" in outcome.sidecars_refused[str(path)]
    LibrarySync().sync(travel.settings)
    # the model's vectors (or, for a block other deals share, the one the partition holds
    # for it: a nudged sidecar's, above), in the index and in the sidecar written over it
    want = {b["content_hash"]: np.asarray(b["vector"]) for b in honest["blocks"]}
    indexed = travel.vectors("DEAL-FORGED")["main"]
    written = {b["content_hash"]: b["vector"] for b in read_sidecar(path)["blocks"]}
    assert set(indexed) == set(written) == set(want)
    for pin, vector in want.items():
        assert min(vector @ indexed[pin], vector @ np.asarray(written[pin])) > REPRODUCED


def test_add_takes_a_sidecars_current_entries_and_embeds_the_stale_ones(
    travel: Travel, tmp_path: Path
) -> None:
    risk = "Termites hollowed the joists of building C."
    original = write_deal(tmp_path, "deal-given", risk, market="Vacancy fell to three percent.")
    sidecar = tmp_path / "deal-given.embeddings.json"
    write_sidecar(sidecar, sidecar_for(original, HashEmbedder(64)))
    changed = write_deal(tmp_path, "deal-given", "Termites and dry rot in building C.")
    index = travel.index(collection="alpha-deals")

    travel.embedded.clear()
    assert index.add(changed, embeddings=sidecar) == "alpha-deals/deal-given"

    [placed] = index.placed
    assert placed.profile == "main"
    assert (
        placed.path
        == travel.settings.exports / "sidecars/main/alpha-deals/deal-given.embeddings.json"
    )
    assert placed.stale == ["market_analysis/0", "risk_assessment/0"]
    # only the stale blocks reach the model: the changed risk block (the stale market entry's
    # block now has the summary the home's other deals share, so its vector was cached); and
    # the one block the sidecar lends (the property's; the borrower's vector was in the
    # partition already) is embedded again, to show the sidecar's vectors are the model's
    check, text = travel.embedded[MAIN]
    assert check.startswith("property\nname: DEAL-GIVEN property\n")
    assert text.startswith("risk_assessment\n") and "Termites and dry rot" in text
    hits = index.query("termites dry rot joists", k=3)
    assert hits and hits[0].deal_id == "DEAL-GIVEN"


def test_remove_withdraws_a_deal_from_every_generation_and_keeps_its_file(
    travel: Travel, tmp_path: Path
) -> None:
    folder = travel.root / "sources" / "carried"
    source = folder / "deal-given-c.uw.md"
    write_deal(folder, "deal-given-c", "Rising damp spoiled the basement storage units.")
    LibrarySync().sync(travel.settings)
    beside = folder / "deal-given-c.embeddings.json"
    assert beside.is_file()
    assert {p: len(v) for p, v in travel.vectors("DEAL-GIVEN-C").items()} == {
        "main": 4,
        "second": 4,
    }
    kept = source.read_bytes()
    index = travel.index()

    assert index.remove("DEAL-GIVEN-C") is True

    assert source.read_bytes() == kept, "the user's file stays"
    assert travel.vectors("DEAL-GIVEN-C") == {"main": {}, "second": {}}
    assert not beside.exists()
    tomb = Home(travel.settings).registry.tombstone("carried/deal-given-c")
    assert tomb is not None and tomb["reason"] == WITHDRAWN and tomb["receipt"]
    LibrarySync().sync(travel.settings)  # the scan passes over a withdrawn file
    assert travel.vectors("DEAL-GIVEN-C") == {"main": {}, "second": {}}
    assert index.remove("DEAL-GIVEN-C") is False
    # the audit finds a sidecar left beside the file, and nothing else of the deal but what
    # the next compaction removes (old LanceDB versions and fragments, cache entries, the
    # doc_id and full-text indexes built before the deletion)
    shutil.copy(folder / "deal-carried-a.embeddings.json", beside)
    remaining = audit_deletion(Home(travel.settings), "carried/deal-given-c")["remaining"]
    left = [r for r in remaining if r["store"] not in ("lance", "cache", "bytes", "lance index")]
    assert left == [{"store": "sidecar", "path": str(beside), "match": "file name"}]
    assert all(".lance" in r["path"] for r in remaining if r["store"] == "bytes"), remaining
    beside.unlink()
    # adding it again brings it back
    travel.index(collection="carried").add(source)
    assert {p: len(v) for p, v in travel.vectors("DEAL-GIVEN-C").items()} == {
        "main": 4,
        "second": 4,
    }


@pytest.mark.parametrize(
    ("when", "body"),
    [
        ("with-a-new-deal", "[" * 100_000),  # nested past Python's recursion limit
        ("beside-an-indexed-deal", '{"uw_version": ' + "9" * 5000 + "}"),  # past int's digits
    ],
    ids=["with-a-new-deal", "beside-an-indexed-deal"],
)
def test_a_malformed_carried_sidecar_is_refused_not_a_crash(
    travel: Travel, when: str, body: str
) -> None:
    """One broken file dropped beside a deal is refused (the deal's blocks embedded, the
    file written anew), never a crash of the collection's sync."""
    folder = travel.root / "sources" / "carried"
    name = f"deal-bad-{when}"
    source = write_deal(folder, name, "Asbestos tiles in the lobby floor.")
    sidecar = folder / f"{name}.embeddings.json"
    try:
        if when == "beside-an-indexed-deal":
            LibrarySync().sync(travel.settings)
        sidecar.write_text(body)

        LibrarySync().sync(travel.settings)

        assert {p: len(v) for p, v in travel.vectors(name.upper()).items()} == {
            "main": 4,
            "second": 4,
        }
        assert read_sidecar(sidecar)["deal_id"] == name.upper()
    finally:
        sidecar.unlink(missing_ok=True)
        source.unlink()
        LibrarySync().sync(travel.settings)


def test_a_touched_sidecar_with_intact_pins_but_broken_vectors_is_rewritten(
    travel: Travel,
) -> None:
    folder = travel.root / "sources" / "carried"
    write_deal(folder, "deal-torn", "Foundation cracks along the east wall.")
    LibrarySync().sync(travel.settings)
    path = folder / "deal-torn.embeddings.json"
    written = read_sidecar(path)
    broken = json.loads(json.dumps(written))
    broken["blocks"][0]["vector"] = broken["blocks"][0]["vector"][:10]  # torn: 10 of 64 values
    broken["blocks"][1]["vector"] = [-x for x in broken["blocks"][1]["vector"]]  # hand-edited
    path.write_text(json.dumps(broken))

    LibrarySync().sync(travel.settings)

    assert read_sidecar(path)["blocks"] == written["blocks"]
    # touched without a change (a copy, a checkout): read, found to hold the same, and kept
    before = path.read_bytes()
    os.utime(path, ns=(10**18, 10**18))
    LibrarySync().sync(travel.settings)
    assert path.read_bytes() == before and path.stat().st_mtime_ns == 10**18


def test_sidecar_entries_are_in_document_order(travel: Travel) -> None:
    """As a consumer of the RFC's shape (no block_key) pairs them with the file's blocks: by
    line, not by block_key as a string (``risk_assessment/10`` before ``risk_assessment/2``)."""
    folder = travel.root / "sources" / "carried"
    source = write_deal(folder, "deal-ordered", "Flood zone AE.")
    more = "".join(
        f"## risk_assessment\n```yaml\nflags:\n- id: r{n}\n  description: Risk {n} of many.\n```\n"
        for n in range(1, 12)
    )
    source.write_text(source.read_text() + "\n" + more)

    LibrarySync().sync(travel.settings)

    doc = read_sidecar(folder / "deal-ordered.embeddings.json")
    expected = ["property/0", "market_analysis/0", "risk_assessment/0", "borrower_sponsor/0"]
    expected += [f"risk_assessment/{n}" for n in range(1, 12)]
    assert [b["block_key"] for b in doc["blocks"]] == expected


def test_http_serves_the_sidecars_written_beside_the_sources(travel: Travel) -> None:
    folder = travel.root / "sources" / "carried"
    write_deal(folder, "deal-served", "Roof membrane at end of life.")
    LibrarySync().sync(travel.settings)
    key = "ck_alpha-travel"
    serve_config(travel.settings.config_path, {key: ("alpha", list(ALPHA.groups))})
    url = "/v1/namespaces/deals/sidecars/carried/deal-served"
    headers = {"Authorization": f"Bearer {key}"}
    with TestClient(create_app(travel.settings, record_traces=False)) as client:
        main_profile = client.get(url, headers=headers, params={"profile": "main"})  # beside
        second = client.get(url, headers=headers, params={"profile": "second"})  # the home's
    assert main_profile.status_code == 200, main_profile.text
    assert main_profile.json() == read_sidecar(folder / "deal-served.embeddings.json")
    assert second.status_code == 200, second.text
    assert second.json()["embedder"]["model"] == SECOND


def run_verify(*args: str | Path) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(main, ["sidecar", "verify", *map(str, args), "--json"])
    return result.exit_code, json.loads(result.stdout) if result.stdout.strip() else {}


def test_sidecar_verify_marks_the_stale_entry_of_fixture_02(tmp_path: Path) -> None:
    code, report = run_verify(
        STALE / "deal.modified.uw.md", "--sidecar", STALE / "deal.embeddings.json"
    )
    assert (code, report["stale"], report["current"]) == (1, ["risk_assessment/1"], 3)
    assert run_verify(STALE / "deal.uw.md")[0] == 0, "the sidecar beside the original is current"
    # a copy of the modified deal with the sidecar beside it, marked in place
    shutil.copy(STALE / "deal.modified.uw.md", tmp_path / "deal.uw.md")
    shutil.copy(STALE / "deal.embeddings.json", tmp_path / "deal.embeddings.json")
    code, report = run_verify(tmp_path / "deal.uw.md", "--mark")
    assert (code, report["marked"]) == (1, True)
    marked = read_sidecar(tmp_path / "deal.embeddings.json")
    assert {b["block_key"]: b["stale"] for b in marked["blocks"]} == {
        "market_analysis/0": False,
        "risk_assessment/0": False,
        "risk_assessment/1": True,
        "borrower_sponsor/0": False,
    }
    # a sidecar of another deal is refused (exit 2, naming it)
    result = CliRunner().invoke(
        main,
        ["sidecar", "verify", str(STALE / "deal.uw.md"), "--sidecar", str(tmp_path / "x.json")],
    )
    assert result.exit_code == 2
    other = read_sidecar(STALE / "deal.embeddings.json") | {"deal_id": "DEAL-OTHER"}
    write_sidecar(tmp_path / "other.embeddings.json", other)
    result = CliRunner().invoke(
        main,
        [
            "sidecar",
            "verify",
            str(STALE / "deal.uw.md"),
            "--sidecar",
            str(tmp_path / "other.embeddings.json"),
        ],
    )
    assert result.exit_code == 2 and "is for deal 'DEAL-OTHER'" in result.stderr


def test_sidecar_verify_names_a_sidecar_it_cannot_mark(tmp_path: Path) -> None:
    """--mark writes the sidecar over: one that cannot be written (a read-only folder; here,
    as the tests may run as root, a name too long for its temporary sibling) is named with
    why, exit 2, not a traceback; the sidecar is left as it was."""
    shutil.copy(STALE / "deal.modified.uw.md", tmp_path / "deal.uw.md")
    sidecar = tmp_path / f"{'d' * 230}.embeddings.json"
    shutil.copy(STALE / "deal.embeddings.json", sidecar)
    before = sidecar.read_bytes()
    result = CliRunner().invoke(
        main,
        ["sidecar", "verify", str(tmp_path / "deal.uw.md"), "--sidecar", str(sidecar), "--mark"],
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: cannot write the stale marks to {sidecar} ("), (
        result.stderr
    )
    assert "File name too long" in result.stderr and sidecar.read_bytes() == before


@pytest.mark.parametrize("broken", ["deal-not-utf8", "sidecar-nested-too-deep"])
def test_sidecar_verify_says_invalid_for_an_unreadable_file(tmp_path: Path, broken: str) -> None:
    """Exit 2 (invalid) with a message, not a traceback and exit 1 (which reads as stale)."""
    uw, sidecar = tmp_path / "deal.uw.md", tmp_path / "deal.embeddings.json"
    shutil.copy(STALE / "deal.uw.md", uw)
    shutil.copy(STALE / "deal.embeddings.json", sidecar)
    if broken == "deal-not-utf8":
        uw.write_bytes(uw.read_bytes().replace(b"\n## ", b"\n\xe9\n## ", 1))
    else:
        sidecar.write_text("[" * 100_000)
    result = CliRunner().invoke(main, ["sidecar", "verify", str(uw)])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    named = uw if broken == "deal-not-utf8" else sidecar
    assert result.stderr.startswith(f"error: {named}: "), result.stderr


def test_sidecar_placement_is_checked_in_the_config(tmp_path: Path) -> None:
    from corpus_index.config import parse_config

    def config(**collection: Any) -> dict[str, Any]:
        base = {"kind": "uw_deals", "path": ".", "tenant": "t", "acl_groups": ["g"]}
        return {
            "collections": {"c": base | collection},
            "profiles": {"p": {"embedder": "hash:v1-8"}},
        }

    assert parse_config(config(), path=tmp_path / "c.yaml").collections["c"].sidecars == "home"
    with pytest.raises(ConfigError, match=r"collections\.c\.sidecars: must be one of home, beside"):
        parse_config(config(sidecars="next-door"), path=tmp_path / "c.yaml")
    with pytest.raises(ConfigError, match=r"collections\.c\.sidecars: the messages kind writes no"):
        parse_config(config(kind="messages", sidecars="beside"), path=tmp_path / "c.yaml")


SPEC = GenerationSpec("deals", "main", "hash:v1-4", "v1", 4, True, "default-v1", "sections-v1")
UNIT = [0.5, 0.5, 0.5, 0.5]


def embedder_of(**embedder: Any) -> dict[str, Any]:
    return {"embedder": {"model": "hash:v1-4", "dim": 4, "input_format": "default-v1", **embedder}}


@pytest.mark.parametrize(
    ("embedder", "spec", "why"),
    [
        ({}, SPEC, None),
        ({"revision": "v1", "normalized": True}, SPEC, None),
        (
            {"model": "text-embedding-3-large"},
            dataclasses.replace(SPEC, backend_spec="openai:text-embedding-3-large"),
            None,
        ),
        ({"model": "hash:v1-8"}, SPEC, "embedder.model is 'hash:v1-8'"),
        ({"model": "v1-4"}, SPEC, "embedder.model is 'v1-4'"),  # bare names: openai and st only
        ({"input_format": "default-v2"}, SPEC, "embedder.input_format is 'default-v2'"),
        ({"dim": 8}, SPEC, "embedder.dim is 8"),
        ({"revision": "v0"}, SPEC, "embedder.revision is 'v0'"),
        ({"normalized": False}, SPEC, "embedder.normalized is False"),
    ],
)
def test_a_sidecar_stands_for_the_profiles_embedder_only(
    embedder: dict[str, Any], spec: GenerationSpec, why: str | None
) -> None:
    found = embedder_mismatch(embedder_of(**embedder), spec)
    assert found == why if why is None else found is not None and found.startswith(why)


def test_entries_match_by_key_or_by_section_and_pin() -> None:
    pin, other = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    rows = [
        {"section": "risk", "block_key": "risk/0", "content_hash": pin, "input_hash": "a"},
        {"section": "risk", "block_key": "risk/1", "content_hash": other, "input_hash": "b"},
        {"section": "market", "block_key": "market/0#p1", "content_hash": pin, "input_hash": "c"},
        {"section": "market", "block_key": "market/0#p2", "content_hash": pin, "input_hash": "d"},
    ]
    sidecar = {
        "blocks": [
            {"section": "risk", "content_hash": pin, "vector": UNIT},  # RFC shape: by pin
            {"section": "risk", "block_key": "risk/1", "content_hash": pin, "vector": UNIT},
            {"section": "market", "content_hash": pin, "vector": UNIT},  # no paragraph key
            {"section": "market", "block_key": "market/0#p1", "content_hash": pin, "vector": UNIT},
            {
                "section": "market",
                "block_key": "market/0#p2",
                "content_hash": pin,
                "input_hash": "x",  # another input text: not this paragraph's
                "vector": UNIT,
            },
        ]
    }
    assert sorted(matching_vectors(sidecar, rows, SPEC)) == ["a", "c"]
    sidecar["blocks"][0]["vector"] = [1.0, 1.0, 0.0, 0.0]  # off unit norm: not used
    assert sorted(matching_vectors(sidecar, rows, SPEC)) == ["c"]
    assert sorted(matching_vectors(sidecar, rows, dataclasses.replace(SPEC, normalized=False))) == [
        "a",
        "c",
    ]


def test_a_new_model_revision_rewrites_the_sidecars(
    travel: Travel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New weights behind the same backend_spec leave every pin as it was; the sidecars are
    written again, naming the revision whose vectors the index holds. (Last of the module's
    tests of its home: the revision changes for every generation.)"""
    folder = travel.root / "sources" / "carried"
    write_deal(folder, "deal-revised", "Elevator modernisation overdue.")
    LibrarySync().sync(travel.settings)
    beside = folder / "deal-revised.embeddings.json"
    home = travel.settings.exports / "sidecars" / "second" / "carried" / beside.name
    assert {read_sidecar(p)["embedder"]["revision"] for p in (beside, home)} == {"v1"}
    monkeypatch.setattr(HashEmbedder, "revision", "v2")
    assert Home(travel.settings).spec("main").model_revision == "v2"

    LibrarySync().sync(travel.settings)

    assert {read_sidecar(p)["embedder"]["revision"] for p in (beside, home)} == {"v2"}
