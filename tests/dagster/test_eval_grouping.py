"""``corpus eval-grouping``: an irc folder synced through the real pipeline into a home of its
own, its conversations read back from the ``linked_groups`` step, scored against gold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.grouping_eval import grouping_settings
from corpus_index.home import Home
from corpus_index.linked.clusters import read_clusters, write_clusters
from tests.test_grouping import LOG, STEM, ids

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``dev/`` with one good log and one that is not UTF-8, and no gold beside it."""
    root = tmp_path_factory.mktemp("irc")
    folder = root / "dev"
    folder.mkdir()
    (folder / f"{STEM}.ascii.txt").write_text(LOG, encoding="utf-8")
    (folder / "2020-01-03_10.ascii.txt").write_bytes(b"[10:00] <x> caf\xe9\n")
    return folder


def corpus(home: Path, *args: str) -> tuple[int, str, str]:
    """Exit code, stdout and stdout with stderr of ``corpus --home HOME eval-grouping ARGS``."""
    result = CliRunner().invoke(main, ["--home", str(home), "eval-grouping", *args])
    return result.exit_code, result.stdout, result.output


def test_clusters_from_the_pipeline_and_scores_against_gold(split: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    refused = corpus(home, str(split))
    assert refused[0] == 2 and "no gold clusters" in refused[2]
    assert not (home / "evals").exists()  # refused before any sync

    out = tmp_path / "clusters.txt"
    code, _, output = corpus(home, str(split), "--write-clusters", str(out))
    assert code == 0, output
    assert "scoring skipped" in output
    # the bad log is named and the good one grouped all the same
    assert "2020-01-03_10.ascii.txt" in output and "UTF-8" in output
    written = read_clusters(out)
    assert sorted(map(sorted, written)) == sorted(
        [ids(STEM, 0, 2, 5, 7), ids(STEM, 1, 3, 6), ids(STEM, 4)]
    )
    # the conversations are the pipeline's: its home holds them as linked groups
    eval_home = Home(
        grouping_settings(Settings(config_path=home / "corpus.yaml", home=home), split)
    )
    groups = eval_home.warehouse.read("linked_groups", ("dev",))
    assert groups.num_rows > 0
    assert "conversation" in groups["group_type"].to_pylist()

    gold = tmp_path / "gold.txt"
    write_clusters(gold, [ids(STEM, 0, 2, 5), ids(STEM, 1, 3, 6)])
    code, stdout, output = corpus(home, str(split), "--gold", str(gold), "--json")
    assert code == 0, output
    report = json.loads(stdout)
    assert (report["logs"], report["messages"], report["conversations"]) == (2, 8, 3)
    assert report["scores"]["one_to_one"] == 100.0 and report["scores"]["f"] == 100.0
    assert report["five_minute_rule"]["one_to_one"] == 50.0
    assert len(report["problems"]) == 1
