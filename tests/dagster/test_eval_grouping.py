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
    # bad input is refused (exit 2) before any sync: a folder with no logs, a malformed gold
    empty = tmp_path / "empty"
    empty.mkdir()
    no_logs = corpus(home, str(empty), "--write-clusters", str(tmp_path / "none.txt"))
    assert no_logs[0] == 2 and "no irc logs (*.ascii.txt)" in no_logs[2]
    bad_gold = tmp_path / "bad-gold.txt"
    bad_gold.write_text(f"{STEM}:0 1\nnot a cluster line\n", encoding="utf-8")
    malformed = corpus(home, str(split), "--gold", str(bad_gold))
    assert malformed[0] == 2 and f"{bad_gold}:2" in malformed[2], malformed[2]
    bad_gold.write_text(f"{STEM}:0 1\n{STEM}:1 2\n", encoding="utf-8")  # 1 in two
    twice = corpus(home, str(split), "--gold", str(bad_gold))
    assert twice[0] == 2 and f"{bad_gold}:2: {STEM}:1 is in" in twice[2], twice[2]
    bad_gold.write_text("\n", encoding="utf-8")
    nothing = corpus(home, str(split), "--gold", str(bad_gold))
    assert nothing[0] == 2 and f"{bad_gold}: no conversations" in nothing[2], nothing[2]
    # a clusters file that cannot be written (a file where its folder should be), and one
    # left as it was where it can be (the check writes nothing and makes no file)
    blocked = tmp_path / "a-file"
    blocked.write_text("kept\n", encoding="utf-8")
    unwritable = corpus(home, str(split), "--write-clusters", str(blocked / "clusters.txt"))
    assert unwritable[0] == 2, unwritable[2]
    assert unwritable[2].startswith(
        f"error: cannot write the conversations to {blocked}/clusters.txt (Not a directory)"
    ), unwritable[2]
    for kept in (blocked, tmp_path / "new.txt"):
        no_gold = corpus(home, str(split), "--write-clusters", str(kept), "--gold", str(bad_gold))
        assert no_gold[0] == 2 and f"{bad_gold}: no conversations" in no_gold[2]
    assert blocked.read_text(encoding="utf-8") == "kept\n"
    assert not (tmp_path / "new.txt").exists()
    assert not (home / "evals").exists()  # refused before any sync

    out = tmp_path / "clusters.txt"
    code, _, output = corpus(home, str(split), "--write-clusters", str(out), "--from-index", "0")
    assert code == 0, output
    assert "scoring skipped" in output
    # the bad log is named and the good one grouped all the same
    assert "2020-01-03_10.ascii.txt" in output and "UTF-8" in output
    written = read_clusters(out)
    assert sorted(map(sorted, written)) == sorted(
        [ids(STEM, 0, 2, 5, 7), ids(STEM, 1, 3, 6), ids(STEM, 4)]
    )
    # the part a gold file covers: from a line index on, the lines before it context
    code, _, output = corpus(home, str(split), "--write-clusters", str(out), "--from-index", "3")
    assert code == 0 and "3 conversations of 5 messages (line index 3 on)" in output
    assert sorted(map(sorted, read_clusters(out))) == sorted(
        [ids(STEM, 5, 7), ids(STEM, 3, 6), ids(STEM, 4)]
    )
    # a clusters file that cannot be written (a file where its folder should be): exit 2
    code, _, output = corpus(home, str(split), "--write-clusters", str(out / "clusters.txt"))
    assert code == 2 and f"error: cannot write the conversations to {out}/clusters.txt (" in output
    # by default the corpus's annotated part (index 1,000 on): this log is all context
    code, _, output = corpus(home, str(split), "--write-clusters", str(out))
    assert code == 0 and read_clusters(out) == []
    assert "no message has a line index of 1000 or more" in output
    # the conversations are the pipeline's: its home holds them as linked groups
    eval_home = Home(
        grouping_settings(Settings(config_path=home / "corpus.yaml", home=home), split)
    )
    groups = eval_home.warehouse.read("linked_groups", ("dev",))
    assert groups.num_rows > 0
    assert "conversation" in groups["group_type"].to_pylist()

    gold = tmp_path / "gold.txt"
    # gold of the unreadable log and of one not in the folder is left out of the scores
    others = [ids("2020-01-03_10", 0), ids("2020-01-09_10", 0, 1)]
    write_clusters(gold, [ids(STEM, 0, 2, 5), ids(STEM, 1, 3, 6), *others])
    code, stdout, output = corpus(home, str(split), "--gold", str(gold), "--json")
    assert code == 0, output
    report = json.loads(stdout)
    assert (report["logs"], report["messages"], report["conversations"]) == (2, 8, 3)
    assert report["scores"]["one_to_one"] == 100.0 and report["scores"]["f"] == 100.0
    assert report["scores"]["messages"] == 6
    assert report["gold_logs_skipped"] == ["2020-01-03_10", "2020-01-09_10"]
    code, _, output = corpus(home, str(split), "--gold", str(gold))
    assert code == 0 and "warning: 2 logs of the gold clusters are not grouped here" in output
    assert report["five_minute_rule"]["one_to_one"] == 50.0
    assert len(report["problems"]) == 1


def test_a_folder_with_nothing_to_embed_is_grouped_or_its_problems_named(tmp_path: Path) -> None:
    """Logs of ``===`` system lines only (never embedded) or empty leave live documents and no
    embedding inputs: the generation's row counts reconcile all the same and the lines are
    grouped (each alone). A folder none of whose logs can be read names each and why."""
    system = tmp_path / "system"
    system.mkdir()
    (system / f"{STEM}.ascii.txt").write_text(
        "=== eve [~eve@example.org] has joined #ubuntu\n=== bob has quit\n", encoding="utf-8"
    )
    (system / "2020-01-03_11.ascii.txt").write_text("", encoding="utf-8")
    out = tmp_path / "c.txt"
    code, _, output = corpus(
        tmp_path / "home", str(system), "--write-clusters", str(out), "--from-index", "0"
    )
    assert code == 0, output
    assert sorted(read_clusters(out)) == [ids(STEM, 0), ids(STEM, 1)]
    assert "2 logs, 2 messages, 2 conversations" in output  # the empty log counts

    unreadable = tmp_path / "unreadable"
    unreadable.mkdir()
    (unreadable / "nodate.ascii.txt").write_text(LOG, encoding="utf-8")
    code, _, output = corpus(tmp_path / "home", str(unreadable), "--write-clusters", str(out))
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert code == 2 and "row_counts_reconcile" not in output, output
    assert f"error: {unreadable / 'nodate.ascii.txt'}: an irc log's file name" in errors[0]
    assert errors[1] == f"error: no log of {unreadable} could be read; fix or remove them"


def test_a_log_that_became_unreadable_is_named_not_grouped_from_its_old_version(
    tmp_path: Path,
) -> None:
    """The eval home, as any, keeps a log's last good version serving while it cannot be read;
    eval-grouping names the log as a problem and groups what the files say now, counting
    each log once."""
    folder = tmp_path / "dev"
    folder.mkdir()
    log = folder / f"{STEM}.ascii.txt"
    log.write_text(LOG, encoding="utf-8")
    (folder / "2020-01-03_11.ascii.txt").write_text(
        "[11:00] <zed> hello\n[11:01] <amy> zed: hi\n", encoding="utf-8"
    )
    home, out = tmp_path / "home", tmp_path / "c.txt"
    args = [str(folder), "--write-clusters", str(out), "--from-index", "0", "--json"]
    assert corpus(home, *args)[0] == 0
    log.write_bytes(LOG.encode() + b"[10:03] <x> caf\xe9\n")  # now not UTF-8
    code, stdout, output = corpus(home, *args)
    assert code == 0, output
    report = json.loads(stdout)
    assert report["problems"] == [f"{log}:9: not UTF-8 text (byte 401); save the file as UTF-8"]
    assert (report["logs"], report["messages"]) == (2, 2), report
    assert read_clusters(out) == [ids("2020-01-03_11", 0, 1)]
    eval_home = Home(
        grouping_settings(Settings(config_path=home / "corpus.yaml", home=home), folder)
    )
    served = eval_home.warehouse.read("parsed_blocks", ("dev",), columns=["doc_id"])
    assert any(STEM in d for d in served["doc_id"].to_pylist())  # the last good version
