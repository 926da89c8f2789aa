"""README's "Scaling out" shows configuration; each block of it is the one the code and tests use.

The section's fenced blocks are read from README.md itself, so an edit to either side that
leaves them apart fails here: the production ``dagster.yaml`` against what
``corpus_index.dagster_home`` writes, the object-store environment against the variables the
object-store tests set (and nothing else), and the shards example against the config parser.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from corpus_index.config import parse_config
from corpus_index.dagster_home import prepare
from corpus_index.shards import partition_keys
from tests.test_object_storage import README_ENV

README = Path(__file__).resolve().parents[1] / "README.md"


def _section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def _blocks(language: str) -> list[str]:
    fence = re.compile(rf"^( *)```{language}\n(.*?)^\1```", re.S | re.M)
    found = []
    for match in fence.finditer(_section("Scaling out")):
        indent = len(match.group(1))
        found.append("".join(line[indent:] for line in match.group(2).splitlines(True)))
    return found


def _block_with(language: str, needle: str) -> str:
    chosen = [b for b in _blocks(language) if needle in b]
    assert len(chosen) == 1, f"README Scaling out: one ```{language} block with {needle!r}"
    return chosen[0]


def test_the_production_dagster_yaml_is_the_one_written(tmp_path: Path) -> None:
    shown: dict[str, Any] = yaml.safe_load(_block_with("yaml", "QueuedRunCoordinator"))
    written = yaml.safe_load((prepare(tmp_path, postgres=True) / "dagster.yaml").read_text())
    assert shown.pop("run_monitoring") == "..."  # "as in the embedded file", elided
    assert "run_monitoring" in written
    for key, value in shown.items():
        assert written[key] == value, key
    assert set(written) - {"run_monitoring"} == set(shown)


def test_the_object_store_environment_is_what_the_object_store_tests_set() -> None:
    block = _block_with("sh", "CORPUS_STORAGE")
    exported: dict[str, str] = {}
    for line in block.splitlines():
        words = shlex.split(line)
        if words[:1] == ["export"]:
            for word in words[1:]:
                name, _, value = word.partition("=")
                exported[name] = value
    assert set(exported) == {"CORPUS_STORAGE", *README_ENV}
    assert re.fullmatch(r"s3://[a-z0-9.-]+/\S+", exported["CORPUS_STORAGE"])
    assert "corpus sync && corpus promote" in block


def test_the_shards_example_parses_to_eight_partitions(tmp_path: Path) -> None:
    shown = yaml.safe_load(_block_with("yaml", "shards:"))
    (tmp_path / "deals").mkdir()
    config = parse_config(
        {**shown, "profiles": {"default": {"embedder": "hash:v1-384"}}},
        path=tmp_path / "corpus.yaml",
    )
    deals = config.collections["deals"]
    assert deals.shards == 8
    keys = partition_keys("deals", deals.shards)
    assert keys[0] == "deals~00" and keys[-1] == "deals~07" and len(keys) == 8
