"""The storage root (``corpus_index.storage``) on a local folder, the ``CORPUS_STORAGE`` setting,
and the retry of LanceDB commit conflicts. The same operations on the object store are covered by
tests/test_object_storage.py (the S3 server on loopback)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from corpus_index import lance
from corpus_index.cli import main
from corpus_index.config import Settings, settings_from_env
from corpus_index.errors import CommitConflictError, ConfigError, RetryableError
from corpus_index.storage import Location, copy_tree, is_store_failure, parse_storage_uri
from corpus_index.store_copy import copy_stores, receipt_location
from tests.support.lockholder import ROOT
from tests.support.s3_server import LocalS3
from tests.test_cli_basics import missing_help


@pytest.mark.parametrize(
    ("uri", "problem"),
    [
        ("/data/corpus", "not an object-store URI"),
        ("gs://bucket/prefix", "not an object-store URI"),
        ("s3://", "not an object-store URI"),
        ("s3:/bucket", "not an object-store URI"),
    ],
)
def test_a_storage_uri_that_is_not_s3_is_refused_naming_the_setting(uri: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=f"CORPUS_STORAGE={uri!r}: {problem}"):
        settings_from_env({"CORPUS_STORAGE": uri}, cwd=Path("/tmp"))


def test_storage_settles_where_the_stores_live_and_the_home_keeps_the_rest(tmp_path: Path) -> None:
    assert parse_storage_uri("s3://bucket/a/b/") == "s3://bucket/a/b"
    here = settings_from_env({"CORPUS_HOME": str(tmp_path)})
    assert here.storage is None and here.roots == [Location.local(tmp_path)]
    assert here.warehouse == tmp_path / "warehouse" and here.receipts == tmp_path / "receipts"
    away = Settings(config_path=tmp_path / "c.yaml", home=tmp_path, storage="s3://b/p")
    assert (away.registry_path, away.dagster_home) == (here.registry_path, here.dagster_home)
    assert away.lance_uri == "s3://b/p/lance"
    with pytest.raises(ConfigError, match="CORPUS_STORAGE='/data': not an object-store URI"):
        Settings(config_path=tmp_path / "c.yaml", home=tmp_path, storage="/data")


def test_writes_replace_whole_files_and_leave_no_temp_behind(tmp_path: Path) -> None:
    root = Location.local(tmp_path)
    target = root / "a" / "b.json"
    target.write_text("one")
    target.write_text("two")
    assert target.read_text() == "two" and target.is_file() and not target.is_dir()
    assert [p.name for p in root.walk()] == ["b.json"]  # no temp file left
    assert target.file_stat() is not None and target.file_stat().st_size == 3  # type: ignore[union-attr]
    assert (root / "missing").file_stat() is None and not (root / "missing").exists()
    with pytest.raises(FileNotFoundError):
        (root / "missing").unlink()
    (root / "missing").unlink(missing_ok=True)


def test_a_failed_write_raises_its_own_error_not_its_cleanups(tmp_path: Path) -> None:
    """A name too long for the temporary file beside it fails the write, and the removal of that
    temporary file fails too: the error raised is the write's (it was pyarrow's 'Cannot delete
    file', which corpus sidecar verify --mark then gave as the reason)."""
    target = Location.local(tmp_path / f"{'d' * 230}.embeddings.json")
    with pytest.raises(OSError) as caught:
        target.write_bytes(b"{}")
    assert "Cannot delete" not in str(caught.value) and "name too long" in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_listing_walks_globs_and_never_follows_links(tmp_path: Path) -> None:
    root = Location.local(tmp_path / "r")
    for name in ("x/one.parquet", "x/y/two.parquet", "z/two.parquet", "z/.t.tmp"):
        (root / name).write_bytes(b"data")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.parquet").write_bytes(b"s")
    os.symlink(outside, tmp_path / "r" / "link")
    assert [str(p.relative_to(root)) for p in root.walk()] == [
        "x/one.parquet",
        "x/y/two.parquet",
        "z/.t.tmp",
        "z/two.parquet",
    ]
    assert [str(p.relative_to(root)) for p in root.rglob("two.parquet")] == [
        "x/y/two.parquet",
        "z/two.parquet",
    ]
    assert [p.name for p in root.glob("*/two.parquet")] == ["two.parquet"]
    assert [p.name for p in root.iterdir() if p.is_dir()] == ["x", "z"]
    assert (root / "nothing").iterdir() == [] and (root / "nothing").walk() == []


def test_a_tree_replaces_another_whole_and_copies_across_roots(tmp_path: Path) -> None:
    root = Location.local(tmp_path)
    (root / "old" / "gone.json").write_text("old")
    (root / "stage" / "a" / "kept.json").write_text("new")
    (root / "stage").replace_tree(root / "old")
    assert [str(p.relative_to(root)) for p in root.walk()] == ["old/a/kept.json"]
    written = copy_tree(root / "old", Location.local(tmp_path / "copy"))
    assert [p.read_text() for p in written] == ["new"]
    remote = Location.of("s3://bucket/prefix") / "key"  # no request made: nothing read yet
    assert (str(remote), remote.name) == ("s3://bucket/prefix/key", "key")
    assert str(remote.parent) == "s3://bucket/prefix"
    assert remote.is_relative_to(Location.of("s3://bucket")) and not remote.is_relative_to(root)
    with pytest.raises(TypeError, match="on an object store"):
        os.fspath(remote)


@pytest.mark.parametrize(
    ("error", "failure"),
    [
        # what pyarrow 21 says on S3 (moto's server behind a proxy that fails requests)
        (
            OSError(
                "When listing objects under key 'p/' in bucket 'corpus': AWS Error "
                "INVALID_ACCESS_KEY_ID during ListObjectsV2 operation: no such key id"
            ),
            True,
        ),
        (
            OSError(
                "Could not open Parquet input source 'corpus/p/w/x.parquet': AWS Error "
                "SLOW_DOWN during GetObject operation: Reduce your request rate"
            ),
            True,
        ),
        (OSError("AWS Error NO_SUCH_KEY during GetObject operation: gone"), False),
        (FileNotFoundError("[Errno 2] Path does not exist 'corpus/p/w/x.parquet'"), False),
        (OSError("Parquet file size is 7 bytes, smaller than the minimum file footer"), False),
    ],
)
def test_a_request_the_store_failed_is_told_from_a_missing_or_unreadable_file(
    error: OSError, failure: bool
) -> None:
    assert is_store_failure(error) is failure


def test_a_commit_conflict_is_retried_with_backoff_then_succeeds() -> None:
    slept: list[float] = []
    tries: list[int] = []

    def write() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise RuntimeError("lance error: Retryable commit conflict for version 7: preempted")
        return "committed"

    class Table:  # a LanceDB table stays on the version it read until told to move
        checkouts = 0

        def checkout_latest(self) -> None:
            self.checkouts += 1

    table = Table()
    assert lance.retry_commits(write, table=table, sleep=slept.append, base_s=0.1) == "committed"
    assert len(tries) == 3 and len(slept) == 2 and table.checkouts == 2
    assert 0.05 <= slept[0] <= 0.1 and 0.1 <= slept[1] <= 0.2  # jittered, doubling


def test_a_conflict_that_persists_is_a_retryable_error_and_others_pass_through() -> None:
    def losing() -> None:
        raise OSError("Commit conflict for version 3: another writer")

    with pytest.raises(CommitConflictError, match="after 4 attempts") as caught:
        lance.retry_commits(losing, attempts=4, sleep=lambda _: None)
    assert isinstance(caught.value, RetryableError)

    calls: list[int] = []

    def broken() -> None:
        calls.append(1)
        raise ValueError("Schema error: no field named vector")

    with pytest.raises(ValueError, match="Schema error"):
        lance.retry_commits(broken, sleep=lambda _: None)
    assert calls == [1]  # not a conflict: not retried


def test_a_receipt_named_by_its_old_path_is_found_among_the_moved_stores(tmp_path: Path) -> None:
    here = Settings(config_path=tmp_path / "c.yaml", home=tmp_path / "home")
    written = here.receipts / "20260101T000000-deals-r1.json"
    written.write_text("{}")
    assert receipt_location(here, str(written)) == written
    moved = Settings(config_path=here.config_path, home=tmp_path / "elsewhere")
    (moved.receipts / written.name).write_text("{}")
    written.unlink()
    assert receipt_location(moved, str(written)) == moved.receipts / written.name


def test_storage_copy_has_help_and_refuses_a_target_that_is_not_an_object_store(
    tmp_path: Path,
) -> None:
    group = main.commands["storage"]
    assert isinstance(group, click.Group) and missing_help(group) == []
    args = ["--config", str(tmp_path / "c.yaml"), "--home", str(tmp_path / "home")]
    out = CliRunner().invoke(main, [*args, "storage", "copy", "--to", str(tmp_path / "x")])
    assert out.exit_code == 2 and "--to=" in out.output and "not an object-store URI" in out.output
    assert not (tmp_path / "home").exists()  # refused before anything was touched


def test_storage_copy_refuses_a_symbolic_link_in_the_stores_naming_it(
    s3_server: LocalS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link inside a store (a table's data file moved to another disk and linked back) is
    named, and nothing is copied: a copy that left it out would pass the size check."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    target = s3_server.create_bucket("linked") + "/moved"
    settings = Settings(config_path=tmp_path / "c.yaml", home=tmp_path / "home")
    (settings.warehouse / "parsed_blocks").mkdir(parents=True)
    (settings.warehouse / "parsed_blocks" / "deals.parquet").write_bytes(b"blocks")
    data = tmp_path / "home" / "lance" / "gen_g0001.lance" / "data"
    data.mkdir(parents=True)
    (tmp_path / "bigdisk.lance").write_bytes(b"rows")
    (data / "a.lance").symlink_to(tmp_path / "bigdisk.lance")
    with pytest.raises(ConfigError, match=r"gen_g0001\.lance/data/a\.lance.*symbolic link"):
        copy_stores(settings, target)
    assert Location.of(target).walk() == []


# enough files that the copy is still running when the test kills it, after it has copied
# five: about 55 a second reach the loopback server with both cores of two busy besides
FILES = 400


def test_a_storage_copy_killed_half_way_is_run_again_from_the_start(
    s3_server: LocalS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`corpus storage copy` killed part-way leaves part of the stores under the prefix; run
    again, it clears what it left and copies anew (a file removed from the home since, a
    deleted source's partition say, is not kept), where it used to refuse the prefix for
    holding another home's stores. A prefix holding a copy that finished is still refused."""
    env = {**os.environ, **s3_server.env(), "PYTHONPATH": str(ROOT)}
    target = s3_server.create_bucket("halfway") + "/moved"
    settings = Settings(config_path=tmp_path / "c.yaml", home=tmp_path / "home")
    parts = settings.home / "warehouse" / "parsed_blocks"
    parts.mkdir(parents=True)
    for n in range(FILES):
        (parts / f"p{n:04d}.parquet").write_bytes(b"x" * 64)
    args = ["--config", str(settings.config_path), "--home", str(settings.home)]
    proc = subprocess.Popen(  # noqa: S603 - fixed arguments
        [sys.executable, "-m", "corpus_index.cli", *args, "storage", "copy", "--to", target],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = s3_server.client()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        held = client.list_objects_v2(Bucket="halfway", Prefix="moved/warehouse/")
        if held.get("KeyCount", 0) >= 5:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    copied = [k["Key"] for k in client.list_objects_v2(Bucket="halfway")["Contents"]]
    assert "moved/warehouse/parsed_blocks/p0000.parquet" in copied
    last = f"moved/warehouse/parsed_blocks/p{FILES - 1:04d}.parquet"
    assert last not in copied  # killed part-way
    (parts / "p0000.parquet").unlink()

    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    out = CliRunner().invoke(main, [*args, "storage", "copy", "--to", target, "--json"])
    assert out.exit_code == 0, out.output
    moved = Location.of(target) / "warehouse"
    assert [str(p.relative_to(moved)) for p in moved.walk()] == [
        f"parsed_blocks/p{n:04d}.parquet" for n in range(1, FILES)
    ]
    again = CliRunner().invoke(main, [*args, "storage", "copy", "--to", target])
    assert again.exit_code == 2 and "already holds warehouse" in again.output


def test_storage_copy_refuses_a_target_inside_the_homes_own_stores_or_holding_them(
    s3_server: LocalS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stores already on s3://b/home, copied --to s3://b/home/warehouse/copy, would be copied
    into the home's own warehouse (and the copy copied again); --to a prefix whose lance/
    holds the stores would write into them. Both are refused, naming both stores (exit 2),
    and nothing is written."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    bucket = s3_server.create_bucket("nested")
    settings = Settings(
        config_path=tmp_path / "c.yaml", home=tmp_path / "home", storage=f"{bucket}/home"
    )
    (settings.warehouse / "parsed_blocks" / "deals.parquet").write_bytes(b"blocks")
    with pytest.raises(ConfigError, match="inside") as inside:
        copy_stores(settings, f"{bucket}/home/warehouse/copy")
    assert f"{bucket}/home/warehouse/copy/warehouse" in str(inside.value)
    assert f"home's warehouse store {bucket}/home/warehouse;" in str(inside.value)
    assert [p.name for p in settings.warehouse.walk()] == ["deals.parquet"]

    holder = Settings(
        config_path=tmp_path / "c.yaml", home=tmp_path / "home", storage=f"{bucket}/old/lance/h"
    )
    (holder.warehouse / "a.parquet").write_bytes(b"x")
    args = ["--config", str(holder.config_path), "--home", str(holder.home)]
    out = CliRunner().invoke(
        main,
        [*args, "storage", "copy", "--to", f"{bucket}/old"],
        env={"CORPUS_STORAGE": str(holder.storage)},
    )
    assert out.exit_code == 2, out.output
    assert f"lance store {bucket}/old/lance would hold" in out.output
    assert f"warehouse store {bucket}/old/lance/h/warehouse" in out.output
    assert [str(p) for p in Location.of(bucket).walk()] == [
        f"{bucket}/home/warehouse/parsed_blocks/deals.parquet",
        f"{bucket}/old/lance/h/warehouse/a.parquet",
    ]


def test_a_home_does_not_serve_from_a_copy_that_was_cut_short(
    s3_server: LocalS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CORPUS_STORAGE naming a prefix where `corpus storage copy` was killed (its marker
    .storage-copy-unfinished.json still there, half of the tables and partitions missing) is
    refused as the home's stores, naming the prefix and the copy to run again (exit 2), where
    it was served from without a word."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    bucket = s3_server.create_bucket("unfinished")
    (Location.of(f"{bucket}/p") / ".storage-copy-unfinished.json").write_text('{"source": "/x"}')
    (Location.of(f"{bucket}/p") / "warehouse" / "a.parquet").write_bytes(b"x")
    settings = Settings(
        config_path=tmp_path / "c.yaml", home=tmp_path / "home", storage=f"{bucket}/p"
    )
    with pytest.raises(ConfigError, match="unfinished") as refused:
        settings.warehouse.walk()
    assert f"corpus storage copy --to {bucket}/p` again from the home it copies (/x)" in str(
        refused.value
    )
    monkeypatch.setenv("CORPUS_STORAGE", f"{bucket}/p")
    args = ["--config", str(settings.config_path), "--home", str(settings.home)]
    out = CliRunner().invoke(main, [*args, "storage", "copy", "--to", f"{bucket}/q"])
    assert out.exit_code == 2 and f"CORPUS_STORAGE={bucket}/p: " in out.output, out.output
    assert Location.of(f"{bucket}/q").walk() == []
