"""No bad file stops the others, and none can exhaust the machine (issue 16).

Each test puts one hostile file beside good deals and shows that the hostile one is
quarantined with its file name and the reason, and the good ones are indexed.
"""

from __future__ import annotations

import json
import os
import re
import threading
import tracemalloc
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import yaml
from click.testing import CliRunner

from corpus_index.cli import main
from corpus_index.config import CollectionConfig, Settings
from corpus_index.errors import UnreadableDocumentError
from corpus_index.kinds import StatCheck, bounded_yaml, checked_stat
from corpus_index.limits import Limits
from corpus_index.sources import ParseResult, parse_collection, scan_manifest
from tests.corpusgen import deal_text
from tests.dagster.test_reprocessing import ASKED, home_with, record

GROUPS = ("alpha-uw", "alpha-credit")


def collection(root: Path, **options: object) -> CollectionConfig:
    root.mkdir(parents=True, exist_ok=True)
    return CollectionConfig(
        name="alpha-deals",
        kind="uw_deals",
        path=root,
        tenant="alpha",
        acl_groups=GROUPS,
        **options,  # type: ignore[arg-type]
    )


def good_deals(root: Path, n: int = 2) -> list[str]:
    root.mkdir(parents=True, exist_ok=True)
    ids = [f"deal-{i:03d}" for i in range(n)]
    for doc_id in ids:
        text = deal_text(doc_id.upper(), tenant="alpha", acl=list(GROUPS))
        (root / f"{doc_id}.uw.md").write_text(text, encoding="utf-8")
    return ids


def deal_with_block(yaml_block: str) -> str:
    """A valid deal whose market_analysis block is ``yaml_block``."""
    text = deal_text("HOSTILE", tenant="alpha", acl=list(GROUPS))
    return text.replace(
        "## market_analysis\n```yaml\n", f"## market_analysis\n```yaml\n{yaml_block}\n"
    )


def ingest(coll: CollectionConfig) -> ParseResult:
    manifest = scan_manifest(coll, None).table
    return parse_collection(coll, manifest, None, None)


def ingest_traced(coll: CollectionConfig) -> tuple[ParseResult, int]:
    """:func:`ingest`, and the most memory it held at once."""
    tracemalloc.start()
    try:
        result = ingest(coll)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


def parsed_ids(result: ParseResult) -> set[str]:
    return set(result.blocks["doc_id"].to_pylist())


def quarantined(result: ParseResult) -> dict[str, str]:
    return dict(
        zip(
            result.quarantine["doc_id"].to_pylist(),
            result.quarantine["error"].to_pylist(),
            strict=True,
        )
    )


def test_a_self_looping_symlink_is_quarantined_and_the_rest_indexed(tmp_path: Path) -> None:
    root = tmp_path / "src"
    coll = collection(root)
    ids = good_deals(root)
    os.symlink("loop.uw.md", root / "loop.uw.md")  # points at itself
    result = ingest(coll)
    assert parsed_ids(result) == set(ids)
    errors = quarantined(result)
    assert list(errors) == ["loop"]
    assert "loop.uw.md" in errors["loop"] and "symbolic links" in errors["loop"]


def test_a_symlink_out_of_the_root_is_not_followed_unless_allowed(tmp_path: Path) -> None:
    root = tmp_path / "src"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    ids = good_deals(root)
    (outside / "secret.uw.md").write_text(
        deal_text("SECRET", tenant="alpha", acl=list(GROUPS)), encoding="utf-8"
    )
    os.symlink(outside / "secret.uw.md", root / "secret.uw.md")

    result = ingest(collection(root))
    assert parsed_ids(result) == set(ids)
    errors = quarantined(result)
    assert list(errors) == ["secret"]
    assert "outside the collection root" in errors["secret"]
    assert "follow_symlinks_outside_root" in errors["secret"]

    allowed = ingest(collection(root, follow_symlinks_outside_root=True))
    assert parsed_ids(allowed) == {*ids, "secret"} and allowed.quarantined == 0

    # indexed while allowed, then refused: its blocks stop serving (they are not kept as stale)
    coll = collection(root)
    again = parse_collection(coll, scan_manifest(coll, None).table, allowed.blocks, None)
    assert parsed_ids(again) == set(ids) and again.stale_documents == 0
    assert list(quarantined(again)) == ["secret"]


def test_a_scan_resolves_each_path_as_realpath_does(tmp_path: Path) -> None:
    """The scan resolves each folder once (``StatCheck``); what it accepts and refuses is what
    resolving every path whole (``checked_stat``) gives: a root reached through a symlink, a
    subfolder, links inside the root and out of it, ``..`` in a path."""
    real = tmp_path / "real"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    good_deals(real / "sub", 1)
    (outside / "x.uw.md").write_text("outside", encoding="utf-8")
    os.symlink(real, tmp_path / "via")  # the root as configured is a symlink to the folder
    root = tmp_path / "via"
    os.symlink("sub/deal-000.uw.md", root / "inside.uw.md")
    os.symlink(outside / "x.uw.md", root / "out.uw.md")
    os.symlink(outside, real / "away")  # a symlinked folder: a path through it leaves the root
    paths = [
        str(root / "sub" / "deal-000.uw.md"),
        str(root / "inside.uw.md"),
        str(root / "out.uw.md"),
        str(root / "away" / "x.uw.md"),
        str(root / "sub" / ".." / "sub" / "deal-000.uw.md"),
        str(root / "away" / ".." / "real" / "sub" / "deal-000.uw.md"),  # '..' of elsewhere
    ]

    def outcome(check: Callable[[str], os.stat_result], path: str) -> str:
        try:
            return f"ok {check(path).st_ino}"
        except UnreadableDocumentError as exc:
            return str(exc)

    scan = StatCheck(collection(root))
    each = [outcome(scan, p) for p in paths]
    assert each == [outcome(lambda p: checked_stat(collection(root), p), p) for p in paths]
    assert [e.startswith("ok") for e in each] == [True, True, False, False, True, True]


def test_special_files_are_never_read(tmp_path: Path) -> None:
    root = tmp_path / "src"
    coll = collection(root)
    ids = good_deals(root)
    os.mkfifo(root / "pipe.uw.md")  # a read would block forever
    os.mkfifo(root / "pipe")
    os.symlink("pipe", root / "piped.uw.md")  # a link inside the root to a FIFO
    outcome: list[ParseResult] = []
    worker = threading.Thread(target=lambda: outcome.append(ingest(coll)), daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "ingesting a collection with a FIFO blocked"
    (result,) = outcome
    assert parsed_ids(result) == set(ids)
    errors = quarantined(result)
    assert sorted(errors) == ["pipe", "piped"]
    assert all("not a regular file" in e and "FIFO" in e for e in errors.values())


def test_a_nested_bracket_bomb_is_quarantined_naming_the_file(tmp_path: Path) -> None:
    root = tmp_path / "src"
    coll = collection(root)
    ids = good_deals(root)
    depth = 5000
    (root / "brackets.uw.md").write_text(
        deal_with_block("deep: " + "[" * depth + "]" * depth), encoding="utf-8"
    )
    result = ingest(coll)
    assert parsed_ids(result) == set(ids)
    errors = quarantined(result)
    assert list(errors) == ["brackets"]
    assert "brackets.uw.md" in errors["brackets"]
    assert "max_nesting_depth" in errors["brackets"]


def test_a_deeply_nested_json_record_is_quarantined(tmp_path: Path) -> None:
    root = tmp_path / "beir"
    root.mkdir()
    deep = "[" * 100_000 + "]" * 100_000
    lines = [
        json.dumps({"_id": "a", "title": "A", "text": "fine"}),
        f'{{"_id": "b", "text": "x", "metadata": {{"m": {deep}}}}}',
        json.dumps({"_id": "c", "title": "C", "text": "also fine"}),
    ]
    (root / "corpus.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    coll = CollectionConfig(name="ev", kind="beir", path=root, tenant="t", acl_groups=("g",))
    result = ingest(coll)
    assert parsed_ids(result) == {"a", "c"}
    errors = quarantined(result)
    assert "corpus.jsonl" in errors["line-2"] and "nesting" in errors["line-2"]


def test_a_beir_corpus_symlinked_out_of_the_root_is_quarantined_not_read(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "corpus.jsonl").write_text(json.dumps({"_id": "secret", "text": "x"}) + "\n")
    root = tmp_path / "beir"
    root.mkdir()
    os.symlink(outside / "corpus.jsonl", root / "corpus.jsonl")
    coll = CollectionConfig(name="ev", kind="beir", path=root, tenant="t", acl_groups=("g",))
    result = ingest(coll)
    assert parsed_ids(result) == set()
    errors = quarantined(result)
    assert list(errors) == ["corpus.jsonl"]
    assert "points outside the collection root" in errors["corpus.jsonl"]
    allowed = replace(coll, follow_symlinks_outside_root=True)
    assert parsed_ids(ingest(allowed)) == {"secret"}


def test_a_beir_line_over_the_limit_is_quarantined_unread_the_rest_indexed(
    tmp_path: Path,
) -> None:
    root = tmp_path / "beir"
    root.mkdir()
    huge = json.dumps({"_id": "huge", "text": "x" * 30_000_000})
    lines = [json.dumps({"_id": f"d{i}", "text": f"passage {i}"}) for i in range(3)]
    (root / "corpus.jsonl").write_text("\n".join([lines[0], huge, *lines[1:]]) + "\n")
    # the corpus is far larger than the limit: the limit holds for each record, not the file
    coll = CollectionConfig(
        name="ev",
        kind="beir",
        path=root,
        tenant="t",
        acl_groups=("g",),
        limits=Limits(max_document_bytes=1_000_000),
    )
    result, peak = ingest_traced(coll)
    assert peak < 12_000_000  # the 30 MB line was never held whole
    assert parsed_ids(result) == {"d0", "d1", "d2"}
    errors = quarantined(result)
    assert list(errors) == ["line-2"]
    assert f"corpus.jsonl:2: record is {len(huge)} bytes" in errors["line-2"]
    assert "max_document_bytes = 1000000" in errors["line-2"]


def alias_bomb(levels: int = 9) -> str:
    """The classic "billion laughs": 10**levels strings from a few KB of YAML."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels + 1):
        refs = ",".join([f"*l{i - 1}"] * 10)
        lines.append(f"l{i}: &l{i} [{refs}]")
    return "\n".join(lines)


def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    root = tmp_path / "src"
    coll = collection(root)
    ids = good_deals(root)
    bomb = alias_bomb()
    assert len(bomb) < 5000
    (root / "laughs.uw.md").write_text(deal_with_block(bomb), encoding="utf-8")
    result, peak = ingest_traced(coll)
    assert parsed_ids(result) == set(ids)
    errors = quarantined(result)
    assert list(errors) == ["laughs"]
    assert "laughs.uw.md" in errors["laughs"] and "max_yaml_nodes" in errors["laughs"]
    assert peak < 64 * 2**20, f"refusing the bomb took {peak / 2**20:.0f} MiB"


def test_an_oversize_document_is_refused_unread(tmp_path: Path) -> None:
    root = tmp_path / "src"
    coll = collection(root)
    ids = good_deals(root)
    prose = ("Lorem ipsum dolor sit amet. " * 40 + "\n") * 10_000  # ~11 MB of prose
    text = deal_text("BIG", tenant="alpha", acl=list(GROUPS)).replace("# BIG\n", f"# BIG\n{prose}")
    (root / "big.uw.md").write_text(text, encoding="utf-8")
    result = ingest(coll)
    assert parsed_ids(result) == set(ids)
    errors = quarantined(result)
    assert list(errors) == ["big"]
    assert "big.uw.md" in errors["big"] and "max_document_bytes" in errors["big"]


def test_a_document_grown_past_the_size_limit_keeps_its_last_good_version(tmp_path: Path) -> None:
    # the same regular file, only larger: it is quarantined naming the limit, and what the last
    # sync indexed of it keeps serving, stale, as for a record of a stream file over the limit
    root = tmp_path / "src"
    coll = collection(root, limits=Limits(max_document_bytes=20_000))
    ids = good_deals(root)
    first = ingest(coll)
    assert parsed_ids(first) == set(ids)
    grown = root / f"{ids[0]}.uw.md"
    grown.write_text(grown.read_text() + "\n" + "More prose. " * 2_000, encoding="utf-8")
    again = parse_collection(coll, scan_manifest(coll, None).table, first.blocks, None)
    assert "max_document_bytes = 20000" in quarantined(again)[ids[0]]
    assert again.stale_documents == 1 and [s["source_id"] for s in again.stale] == [
        f"{coll.name}/{ids[0]}"
    ]
    assert parsed_ids(again) == set(ids)

    def refs(blocks: pa.Table) -> list[str]:
        return blocks.filter(pc.equal(blocks["doc_id"], ids[0]))["chunk_ref"].to_pylist()

    assert refs(again.blocks) == refs(first.blocks)


def test_limits_are_configurable_and_name_the_limit(tmp_path: Path) -> None:
    from corpus_index.config import Limits

    root = tmp_path / "src"
    ids = good_deals(root)
    (root / "wide.uw.md").write_text(deal_with_block("long: " + "word " * 2000), encoding="utf-8")
    (root / "aliases.uw.md").write_text(
        deal_with_block("base: &b x\nrefs: [" + ",".join(["*b"] * 20) + "]"), encoding="utf-8"
    )
    strict = Limits(max_block_chars=5000, max_yaml_aliases=10)
    result = ingest(collection(root, limits=strict))
    assert parsed_ids(result) == set(ids)
    errors = quarantined(result)
    assert "max_block_chars = 5000" in errors["wide"]
    assert "max_yaml_aliases = 10" in errors["aliases"]
    loose = ingest(
        collection(root, limits=replace(strict, max_block_chars=50_000, max_yaml_aliases=50))
    )
    assert loose.quarantined == 0


def test_limits_and_the_symlink_setting_load_from_corpus_yaml(tmp_path: Path) -> None:
    from corpus_index.config import Limits, parse_config

    raw = {
        "limits": {"max_document_bytes": 1000, "max_yaml_aliases": 5},
        "collections": {
            "a": {"kind": "uw_deals", "path": "a", "tenant": "t", "acl_groups": ["g"]},
            "b": {
                "kind": "uw_deals",
                "path": "b",
                "tenant": "t",
                "acl_groups": ["g"],
                "follow_symlinks_outside_root": True,
                "limits": {"max_yaml_aliases": 7},
            },
        },
        "profiles": {"p": {"embedder": "hash:v1-64"}},
    }
    config = parse_config(raw, path=tmp_path / "corpus.yaml")
    a, b = config.collections["a"], config.collections["b"]
    assert a.limits == replace(Limits(), max_document_bytes=1000, max_yaml_aliases=5)
    assert b.limits == replace(Limits(), max_document_bytes=1000, max_yaml_aliases=7)
    assert (a.follow_symlinks_outside_root, b.follow_symlinks_outside_root) == (False, True)
    raw["limits"] = {"max_yaml_nodes": 0}
    with pytest.raises(ValueError, match="limits.max_yaml_nodes"):
        parse_config(raw, path=tmp_path / "corpus.yaml")


def test_sync_names_each_newly_quarantined_file(home: Settings) -> None:
    runner = CliRunner()
    base = ["--config", str(home.config_path), "--home", str(home.home)]
    folder = home.config_path.parent / "sources" / "alpha"
    (folder / "brackets.uw.md").write_text(
        deal_with_block("deep: " + "[" * 3000 + "]" * 3000), encoding="utf-8"
    )
    os.symlink("loop.uw.md", folder / "loop.uw.md")
    first = runner.invoke(main, [*base, "sync", "--json"])
    assert first.exit_code == 0, first.output
    summary = json.loads(first.stdout)
    named = {q["source_id"]: q for q in summary["newly_quarantined"]}
    assert sorted(named) == ["alpha-deals/brackets", "alpha-deals/loop"]
    assert named["alpha-deals/brackets"]["path"].endswith("brackets.uw.md")
    assert "max_nesting_depth" in named["alpha-deals/brackets"]["error"]
    assert "symbolic links" in named["alpha-deals/loop"]["error"]
    assert summary["documents"] == 8 and summary["quarantined"] == 2

    (folder / "bad.uw.md").write_text(deal_with_block(": ["), encoding="utf-8")
    text = runner.invoke(main, [*base, "sync"])
    assert text.exit_code == 0, text.output
    (line,) = [ln for ln in text.output.splitlines() if "QUARANTINED" in ln]
    assert "alpha-deals/bad" in line and "bad.uw.md" in line and "broken YAML" in line


@pytest.mark.parametrize("loader", ["libyaml", "python"])
@pytest.mark.parametrize(
    ("text", "limit"),
    [
        ("deep: " + "[" * 70 + "]" * 70, "max_nesting_depth"),  # within libyaml's own 1,000
        ("deep: " + "[" * 5000 + "]" * 5000, "max_nesting_depth"),  # beyond it
        (alias_bomb(), "max_yaml_"),
    ],
)
def test_both_yaml_parsers_refuse_the_same_bombs(
    loader: str, text: str, limit: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if loader == "libyaml":
        assert bounded_yaml._Loader is not bounded_yaml._PyBoundedLoader, "libyaml is missing"
    else:
        monkeypatch.setattr(bounded_yaml, "_Loader", bounded_yaml._PyBoundedLoader)
    with pytest.raises(bounded_yaml.YamlLimitError, match=limit):
        bounded_yaml.load(text, Limits())


@pytest.mark.parametrize("loader", ["libyaml", "python"])
def test_both_yaml_parsers_read_the_sample_corpus_as_safe_load_does(
    loader: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if loader == "python":
        monkeypatch.setattr(bounded_yaml, "_Loader", bounded_yaml._PyBoundedLoader)
    root = Path(__file__).resolve().parents[1] / "sample_corpus"
    blocks = [
        block
        for path in sorted(root.rglob("*.uw.md"))
        for block in re.findall(r"```yaml\n(.*?)```", path.read_text(encoding="utf-8"), re.S)
    ]
    assert len(blocks) > 100
    assert [bounded_yaml.load(b, Limits()) for b in blocks] == [yaml.safe_load(b) for b in blocks]


def test_sync_reports_the_records_held_while_their_stream_file_is_bad(tmp_path: Path) -> None:
    lines = [
        record(f"m{i}", "discord_chat", "Jane O.", ASKED, f"note {i}").strip() for i in range(3)
    ]
    settings = home_with(tmp_path, {"chat.jsonl": "\n".join(lines) + "\n"})
    base = ["--config", str(settings.config_path), "--home", str(settings.home)]
    runner = CliRunner()
    assert runner.invoke(main, [*base, "sync", "--json"]).exit_code == 0
    lines[1] = lines[1][:30]  # m1's line cut short: m1 is held, not deleted
    (tmp_path / "wattle" / "chat.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = runner.invoke(main, [*base, "sync", "--json"])
    assert out.exit_code == 0, out.output
    chat = json.loads(out.stdout)["collections"]["wattle-messages"]
    assert (chat["removed"], chat["held"], chat["quarantined"]) == (0, 1, 1)
    text = runner.invoke(main, [*base, "sync"])  # nothing changed: still held, told in words
    assert "0 removed, 1 held while their file is bad), 1 quarantined" in text.output


def test_a_stream_file_of_more_lines_than_the_limit_is_quarantined_its_records_held(
    tmp_path: Path,
) -> None:
    """A file of millions of short lines fits limits.max_document_bytes but costs a unit (or a
    quarantined line) each; over limits.max_stream_lines it is refused unread, naming the
    file and the limit, its records held, the other files indexed."""
    lines = [
        record(f"m{i}", "discord_chat", "Jane O.", ASKED, f"note {i}").strip() for i in range(3)
    ]
    settings = home_with(
        tmp_path,
        {
            "chat.jsonl": "\n".join(lines) + "\n",
            "other.jsonl": record("o1", "discord_chat", "Tom", ASKED, "the van is booked"),
        },
    )
    config = yaml.safe_load(settings.config_path.read_text(encoding="utf-8"))
    config["limits"] = {"max_stream_lines": 5}
    settings.config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    base = ["--config", str(settings.config_path), "--home", str(settings.home)]
    runner = CliRunner()
    assert runner.invoke(main, [*base, "sync", "--json"]).exit_code == 0
    chat = tmp_path / "wattle" / "chat.jsonl"
    chat.write_text("\n".join(lines) + "\n" + "{}\n" * 3, encoding="utf-8")
    out = runner.invoke(main, [*base, "sync", "--json"])
    assert out.exit_code == 0, out.output
    summary = json.loads(out.stdout)
    stats = summary["collections"]["wattle-messages"]
    assert (stats["removed"], stats["held"], stats["quarantined"]) == (0, 3, 1)
    (bad,) = summary["newly_quarantined"]
    assert bad["error"] == (
        f"{chat}: 6 lines, over limits.max_stream_lines = 5; split the stream into files "
        "of fewer lines, or raise the limit in corpus.yaml"
    )
