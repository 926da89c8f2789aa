"""Deletion is provable from the bytes: after compaction no file of the home holds a deleted
deal's text or vectors (masked rows included), no file is left of an index built before the
deletion (which holds its id or words), and ``audit-deletion`` proves it by scanning every
file; before compaction the bytes are there and the audit says so.

LanceDB may store a text column compressed (FSST) in files its own compaction writes, where the
whole sentence is not contiguous; the row's vector (fixed-size float32, never compressed) and a
short phrase of the text are then what the raw bytes still show, so the test looks for those
too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from corpus_index import predicates
from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.home import Home
from definitions import dagster_runner
from tests.corpusgen import deal_text, write_home

pytestmark = pytest.mark.slow
GONE = "alpha-deals/deal-alpha-007"
SECRET = "Quarry blasting next door cracked the east garage slab; its variance lapses in March."
PHRASE = b"Quarry blasting"  # survives in a compressed Lance text page (seen with the old purge)


def home_with_secret(tmp_path: Path, deals_per_tenant: int) -> Settings:
    """A synced home whose deal-alpha-007 alone carries SECRET as its risk flag."""
    config = write_home(tmp_path, deals_per_tenant=deals_per_tenant)
    (tmp_path / "sources" / "alpha" / "deal-alpha-007.uw.md").write_text(
        deal_text("DEAL-ALPHA-007", tenant="alpha", acl=["alpha-uw"], risk=SECRET),
        encoding="utf-8",
    )
    settings = Settings(config_path=config, home=tmp_path / "home")
    assert dagster_runner().sync(settings).ok
    return settings


def secret_vectors(corpus: Home) -> list[bytes]:
    """The float32 bytes of every vector the generations hold for SECRET's input."""
    out = []
    for gen in corpus.registry.generations():
        rows = corpus.store.table(gen).to_arrow().to_pylist()
        out += [np.asarray(r["vector"], dtype="<f4").tobytes() for r in rows if SECRET in r["text"]]
    assert out
    return out


def _column_bytes(column: pa.ChunkedArray) -> bytes:
    parts = []
    for value in column.to_pylist():
        if isinstance(value, bytes):
            parts.append(value)
        elif value is not None:
            parts.append(str(value).encode("utf-8"))
    return b"\x00".join(parts)


def files_holding(home: Path, needle: bytes) -> list[str]:
    """Every file of ``home`` whose raw bytes, or a decoded Parquet column, contain ``needle``
    (written here, independently of the audit)."""
    found = []
    for path in sorted(home.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if needle in data:
            found.append(str(path.relative_to(home)))
        elif data[:4] == b"PAR1" and data[-4:] == b"PAR1":
            table = pq.read_table(path)
            if any(needle in _column_bytes(c) for c in table.columns):
                found.append(f"{path.relative_to(home)} (decoded)")
    return found


def index_dirs(corpus: Home) -> list[Path]:
    """The folder of each generation table's current ``doc_id`` and full-text index."""
    out = []
    for g in corpus.registry.generations():
        for idx in corpus.store.table(g).list_indices():
            if idx.name in ("doc_id_idx", "text_idx"):
                table_dir = corpus.settings.home / "lance" / f"{g.table_name}.lance"
                out.append(table_dir / "_indices" / idx.index_uuid)
    assert out
    return out


def audit(settings: Settings) -> tuple[int, dict[str, Any]]:
    args = ["--config", str(settings.config_path), "--home", str(settings.home)]
    out = CliRunner().invoke(main, [*args, "audit-deletion", GONE, "--json"])
    return out.exit_code, json.loads(out.output)


def compact(settings: Settings) -> dict[str, Any]:
    args = ["--config", str(settings.config_path), "--home", str(settings.home)]
    out = CliRunner().invoke(main, [*args, "compact", "--json"])
    assert out.exit_code == 0, out.output
    report: dict[str, Any] = json.loads(out.output)
    return report


def test_one_deleted_deal_of_many_leaves_no_byte_after_compaction(tmp_path: Path) -> None:
    settings = home_with_secret(tmp_path, deals_per_tenant=21)  # 42 deals, 168 rows a table
    corpus = Home(settings)
    vectors = secret_vectors(corpus)
    rows_before = {g.id: corpus.store.count(g) for g in corpus.registry.generations()}
    old_index_dirs = index_dirs(corpus)
    (tmp_path / "sources" / "alpha" / "deal-alpha-007.uw.md").unlink()
    assert dagster_runner().sync(settings).ok
    for g in corpus.registry.generations():
        assert corpus.store.count(g) == rows_before[g.id] - 4  # its rows are a small share

    # before compaction the text and vectors are still on disk, masked in LanceDB data files
    holding = files_holding(settings.home, SECRET.encode())
    assert any(p.startswith("lance/") and p.endswith(".lance") for p in holding), holding
    assert all(files_holding(settings.home, v) for v in vectors)
    code, report = audit(settings)
    assert code == 1 and not report["clean"]
    in_bytes = [r for r in report["remaining"] if r["store"] == "bytes"]
    assert any("/data/" in r["path"] and r["path"].endswith(".lance") for r in in_bytes)
    # the hashing embedder's vectors are too sparse to fingerprint (a window of zeros and
    # repeated magnitudes recurs in other vectors): its text proves the rows still there
    assert report["byte_scan"]["vectors_too_sparse"] > 0
    assert not any(r["matches"].get("vector") for r in in_bytes), in_bytes
    assert report["byte_scan"]["status"] == "done" and report["byte_scan"]["cost"]["files"] > 0
    # the doc_id and full-text indexes built before the deletion hold its id and words (their
    # pages may be compressed, so the bytes need not show them): their files are still there,
    # and the audit says so from the indexes' build time
    assert all(d.is_dir() for d in old_index_dirs)
    stale = {(r["table"], r["index"]) for r in report["remaining"] if r["store"] == "lance index"}
    tables = [g.table_name for g in corpus.registry.generations()]
    assert stale == {(t, i) for t in tables for i in ("doc_id_idx", "text_idx")}

    compaction = compact(settings)
    assert compaction["tombstones_purged"] == [GONE]
    gen_tables = [t for t in compaction["tables"] if t["table"].startswith("gen_")]
    assert gen_tables and all(t["fragments_rewritten"] >= 1 for t in gen_tables)
    assert all(t["indexes_rebuilt"] == ["doc_id_idx", "text_idx"] for t in gen_tables)
    assert [d for d in old_index_dirs if d.exists()] == []
    assert [d for d in index_dirs(corpus) if d in old_index_dirs] == []

    assert files_holding(settings.home, SECRET.encode()) == []
    assert files_holding(settings.home, PHRASE) == []
    assert [files_holding(settings.home, v) for v in vectors] == [[] for _ in vectors]
    code, report = audit(settings)
    assert code == 0 and report["clean"], report["remaining"]
    # the other 41 deals are whole, indexed and searchable
    for g in corpus.registry.generations():
        cov = corpus.store.coverage(g)
        assert cov.rows == rows_before[g.id] - 4 and cov.fts_unindexed == 0


def test_an_earlier_version_of_a_deleted_deal_leaves_no_byte_after_compaction(
    tmp_path: Path,
) -> None:
    """An edit that rewrites every block of the deal masks its first rows where they lie and
    writes the new ones to a fragment of their own; deleting the deal then empties that one
    alone, so no receipt names the fragment where SECRET lies masked. The compaction that
    purges a deletion rewrites every fragment holding masked rows."""
    settings = home_with_secret(tmp_path, deals_per_tenant=8)
    vectors = secret_vectors(Home(settings))
    source = tmp_path / "sources" / "alpha" / "deal-alpha-007.uw.md"
    source.write_text(
        deal_text(
            "DEAL-ALPHA-007",
            tenant="alpha",
            acl=["alpha-uw"],
            risk="Rewritten risk text for the edit.",
            market="Rewritten market text for the edit.",
            metro="Mesa",
            units=171,
        ),
        encoding="utf-8",
    )
    assert dagster_runner().sync(settings).ok
    source.unlink()
    assert dagster_runner().sync(settings).ok
    assert files_holding(settings.home, SECRET.encode())  # masked, in a fragment kept whole

    compact(settings)
    assert files_holding(settings.home, SECRET.encode()) == []
    assert files_holding(settings.home, PHRASE) == []
    assert [files_holding(settings.home, v) for v in vectors] == [[] for _ in vectors]
    code, report = audit(settings)
    assert code == 0 and report["clean"], report["remaining"]


def test_compaction_removes_orphaned_temp_files_holding_deleted_text(tmp_path: Path) -> None:
    settings = home_with_secret(tmp_path, deals_per_tenant=8)
    (tmp_path / "sources" / "alpha" / "deal-alpha-007.uw.md").unlink()
    assert dagster_runner().sync(settings).ok
    # what a crash mid-write leaves: a sidecar's temp file, and a half-written Parquet partition
    sidecar_tmp = settings.exports / "sidecars" / "main" / "alpha-deals" / ".x.json.abc.tmp"
    sidecar_tmp.parent.mkdir(parents=True, exist_ok=True)
    sidecar_tmp.write_text(json.dumps({"text": SECRET}), encoding="utf-8")
    parquet_tmp = settings.warehouse / "embedding_inputs" / ".alpha-deals.parquet.def.tmp"
    pq.write_table(pa.table({"text": [SECRET * 3]}), parquet_tmp, compression="lz4")
    parquet_tmp.write_bytes(parquet_tmp.read_bytes()[:-12])  # no footer: not readable Parquet

    code, report = audit(settings)
    assert code == 1
    layers: dict[str, set[str]] = {}
    for r in report["remaining"]:
        if r["store"] == "bytes":
            layers.setdefault(r["path"], set()).add(r["layer"])
    assert layers[str(sidecar_tmp)] == {"raw bytes"}
    assert "unreadable" in layers[str(parquet_tmp)]  # compressed: absence cannot be proven

    compaction = compact(settings)
    assert sorted(compaction["temp_files_removed"]) == sorted([str(sidecar_tmp), str(parquet_tmp)])
    assert not sidecar_tmp.exists() and not parquet_tmp.exists()
    assert files_holding(settings.home, SECRET.encode()) == []
    code, report = audit(settings)
    assert code == 0, report["remaining"]


def test_a_data_file_a_lost_commit_left_keeps_no_deleted_text_after_compaction(
    tmp_path: Path,
) -> None:
    """A write that lost its commit (a conflict given up on, then retried; a crash before the
    manifest) leaves its data file in the table's data/ folder, named by no version. LanceDB
    keeps such a file for 7 days as possibly another writer's work in flight; the compaction
    that purges a deletion holds the home alone, so it removes it at once, and a deleted deal's
    text in it with it."""
    settings = home_with_secret(tmp_path, deals_per_tenant=3)
    corpus = Home(settings)
    (gen,) = corpus.registry.generations()
    data = settings.home / "lance" / f"{gen.table_name}.lance" / "data"
    held = next(p for p in sorted(data.iterdir()) if SECRET.encode() in p.read_bytes())
    stray = data / "0110100101101011010010110f1e2d3c4b5a69788796a5b4c3.lance"
    stray.write_bytes(held.read_bytes())  # the same rows, written by a commit that was lost
    (tmp_path / "sources" / "alpha" / "deal-alpha-007.uw.md").unlink()
    assert dagster_runner().sync(settings).ok

    compact(settings)
    assert not stray.exists()
    assert files_holding(settings.home, SECRET.encode()) == []
    code, report = audit(settings)
    assert code == 0 and report["clean"], report["remaining"]


def test_a_retired_generations_table_left_behind_keeps_no_deleted_row(tmp_path: Path) -> None:
    """A crash between marking a generation RETIRED and dropping its table leaves the table: a
    deletion takes the deal's rows out of it as out of any other, and the next compaction drops
    it (what the retire left undone), so no byte of the deal stays there."""
    settings = home_with_secret(tmp_path, deals_per_tenant=3)
    corpus = Home(settings)
    (old,) = corpus.registry.generations()
    corpus.registry.retire(old.id, window_hours=0)  # the registry's half of `corpus retire`
    assert corpus.store.exists(old)
    (tmp_path / "sources" / "alpha" / "deal-alpha-007.uw.md").unlink()
    assert dagster_runner().sync(settings).ok
    assert corpus.store.count(old, predicates.eq("source_id", GONE)) == 0  # at once there too

    compaction = compact(settings)
    assert compaction["retired_tables_dropped"] == [old.table_name]
    assert not corpus.store.exists(old)
    assert files_holding(settings.home, SECRET.encode()) == []
    code, report = audit(settings)
    assert code == 0 and report["clean"], report["remaining"]
