"""Damaged homes: each damage gives a message naming the file and what to do, `corpus doctor`
finds it, and `corpus sync --repair` brings the home back so a search works; a lost registry
gets its ACTIVE pointer and tombstones back from the journal."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from corpus_index import lance
from corpus_index.cache import EmbeddingCache, cache_schema, folded_table_name
from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.errors import (
    DamagedRegistryError,
    DamagedTableError,
    DamagedWarehouseError,
    StoreUnreachableError,
)
from corpus_index.home import Home
from corpus_index.registry import Registry
from tests.corpusgen import write_home
from tests.support.lockholder import hold

DELETED = "alpha-deals/deal-alpha-000"
QUERY = ["anchor tenant lease", "--tenant", "beta", "--group", "beta-team", "--json"]


@pytest.fixture(scope="module")
def synced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home synced and promoted, with one deal deleted since (so it has a tombstone)."""
    root = tmp_path_factory.mktemp("synced")
    config = write_home(root)
    base = ["--config", str(config), "--home", str(root / "home")]
    runner = CliRunner()
    for args in (["sync"], ["promote"]):
        result = runner.invoke(main, [*base, *args])
        assert result.exit_code == 0, result.output
    (root / "sources" / "alpha" / "deal-alpha-000.uw.md").unlink()
    result = runner.invoke(main, [*base, "sync"])
    assert result.exit_code == 0, result.output
    return root


@pytest.fixture
def home(synced: Path, tmp_path: Path) -> Iterator[Settings]:
    """A copy of the synced home, free to damage."""
    root = tmp_path / "copy"
    shutil.copytree(synced, root)
    yield Settings(config_path=root / "corpus.yaml", home=root / "home")


def corpus(home: Settings, *args: str) -> Result:
    base = ["--config", str(home.config_path), "--home", str(home.home)]
    return CliRunner().invoke(main, [*base, *args])


def doctor_findings(home: Settings) -> list[dict[str, str]]:
    result = corpus(home, "doctor", "--json")
    assert result.exit_code == 3, result.output
    findings: list[dict[str, str]] = json.loads(result.stdout)["findings"]
    return findings


def assert_repaired(home: Settings) -> None:
    """`corpus sync --repair` rebuilds the home: healthy again, and a search finds hits."""
    result = corpus(home, "sync", "--repair")
    assert result.exit_code == 0, result.output
    assert "repaired:" in result.output
    healthy = corpus(home, "doctor")
    assert healthy.exit_code == 0 and "healthy" in healthy.output, healthy.output
    searched = corpus(home, "search", *QUERY)
    assert searched.exit_code == 0, searched.output
    assert json.loads(searched.stdout)["hits"]


def test_a_truncated_warehouse_partition_is_named_found_and_rebuilt(home: Settings) -> None:
    path = home.warehouse / "embedding_inputs" / "beta-deals.parquet"
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(DamagedWarehouseError) as raised:
        Home(home).read("embedding_inputs", ("beta-deals",))
    assert str(path) in str(raised.value) and "corpus doctor --repair" in str(raised.value)

    (finding,) = doctor_findings(home)
    assert finding["kind"] == "warehouse" and finding["path"] == str(path)
    assert_repaired(home)


def test_repair_waits_for_no_sync_and_removes_nothing_while_one_runs(home: Settings) -> None:
    """A sync in flight writes the partitions and tables repair would remove: `corpus doctor
    --repair` is refused as busy (exit 75), naming the holder; `corpus doctor` still looks."""
    path = home.warehouse / "embedding_inputs" / "beta-deals.parquet"
    path.write_bytes(path.read_bytes()[:300])
    sync = hold(home.home, 60)
    try:
        refused = corpus(home, "doctor", "--repair")
        assert refused.exit_code == 75, refused.output
        assert f"pid {sync.pid} (sync)" in refused.output and "Traceback" not in refused.output
        assert (
            path.is_file() and (home.warehouse / "parsed_blocks" / "beta-deals.parquet").is_file()
        )
        assert doctor_findings(home)[0]["path"] == str(path)
    finally:
        sync.kill()
        sync.wait()
    assert_repaired(home)


def test_a_garbage_embeddings_partition_is_named_found_and_rebuilt(home: Settings) -> None:
    path = home.warehouse / "embeddings" / "main" / "beta-deals.parquet"
    path.write_bytes(b"not parquet at all " * 100)
    with pytest.raises(DamagedWarehouseError) as raised:
        Home(home).keyed("embeddings", ("main", "beta-deals"))
    assert str(path) in str(raised.value) and "corpus doctor --repair" in str(raised.value)
    failed = corpus(home, "sync")
    assert failed.exit_code == 1 and str(path) in failed.output and "damaged" in failed.output

    (finding,) = doctor_findings(home)
    assert finding["kind"] == "warehouse" and finding["path"] == str(path)
    assert_repaired(home)


def test_a_missing_lancedb_data_file_is_named_found_and_rebuilt(home: Settings) -> None:
    table = home.home / "lance" / "gen_g0001.lance"
    # the data files the table's latest version reads for beta's rows (the searched ones)
    manifests = sorted((table / "_versions").glob("*.manifest"), key=lambda p: int(p.stem))
    latest = manifests[0].read_bytes()  # versions are named in descending order
    victims = [
        f
        for f in sorted((table / "data").iterdir())
        if f.name.encode() in latest and b"beta-deals" in f.read_bytes()
    ]
    assert victims
    for victim in victims:
        victim.unlink()

    searched = corpus(home, "search", *QUERY)
    assert searched.exit_code == 3, searched.output
    assert any(v.name in searched.output for v in victims), searched.output
    assert "corpus doctor --repair" in searched.output and "Traceback" not in searched.output

    listed = corpus(home, "generations", "--json")
    assert listed.exit_code == 3
    (gen,) = json.loads(listed.stdout)["generations"]
    assert gen["status"] == "ACTIVE" and gen["damaged"]

    (finding,) = doctor_findings(home)
    assert finding["kind"] == "generation" and finding["name"] == "g0001"
    assert_repaired(home)
    assert corpus(home, "generations").exit_code == 0


def test_a_table_the_registrys_count_is_behind_is_no_damage(home: Settings) -> None:
    """``index_rows`` changes a table before ``index_generation`` records its count: a table
    that reads whole is never dropped for a count (the ACTIVE one least of all)."""
    corpus_home = Home(home)
    gen = corpus_home.registry.require("g0001")
    corpus_home.store.delete_where(gen, "source_id = 'beta-deals/deal-beta-002'")
    assert corpus_home.store.count(gen) != gen.row_count
    healthy = corpus(home, "doctor", "--json")
    assert healthy.exit_code == 0 and json.loads(healthy.stdout)["findings"] == []
    assert corpus(home, "generations").exit_code == 0


def test_a_deleted_active_table_is_an_error_not_no_hits(home: Settings) -> None:
    shutil.rmtree(home.home / "lance" / "gen_g0001.lance")
    searched = corpus(home, "search", *QUERY)
    assert searched.exit_code == 3, searched.output
    assert "gen_g0001.lance" in searched.output and "missing" in searched.output
    assert "corpus doctor --repair" in searched.output
    (finding,) = doctor_findings(home)
    assert finding["kind"] == "generation" and finding["name"] == "g0001"
    rebuilt = corpus(home, "sync", "--repair")  # nothing left to set aside: the sync rebuilds
    assert rebuilt.exit_code == 0, rebuilt.output
    assert json.loads(corpus(home, "search", *QUERY).stdout)["hits"]


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_corrupt_registry_is_named_not_busy_and_restored(home: Settings, damage: str) -> None:
    if damage == "garbage":
        home.registry_path.write_bytes(b"\x00garbage" * 1000)
    else:  # reads past its end fail as a file another process just let go of does
        os.truncate(home.registry_path, home.registry_path.stat().st_size // 2)
    with pytest.raises(DamagedRegistryError):
        Registry(home.registry_path).generations()
    listed = corpus(home, "generations")
    assert listed.exit_code == 3
    assert str(home.registry_path) in listed.output and "busy" not in listed.output
    assert "corpus doctor --repair" in listed.output

    (finding,) = doctor_findings(home)
    assert finding["kind"] == "registry"
    assert_repaired(home)
    assert list(home.home.glob("registry.duckdb.damaged-*"))  # kept aside, not deleted
    assert Registry(home.registry_path).tombstone(DELETED) is not None


def test_a_deleted_registry_gets_its_pointer_and_tombstones_back(home: Settings) -> None:
    home.registry_path.unlink()
    (finding,) = doctor_findings(home)
    assert finding["kind"] == "registry" and "missing" in finding["problem"]

    repaired = corpus(home, "doctor", "--repair")
    assert repaired.exit_code == 0, repaired.output
    registry = Registry(home.registry_path)
    active = registry.active("deals")
    assert active is not None and active.id == "g0001"
    assert registry.tombstone(DELETED) is not None

    synced = corpus(home, "sync", "--json")
    assert synced.exit_code == 0, synced.output
    assert json.loads(synced.stdout)["generations"]["main"]["generation"] == "g0001"
    assert registry.tombstone(DELETED) is not None
    table = Home(home).store.table(active)
    assert table.count_rows(f"source_id = '{DELETED}'") == 0
    searched = corpus(home, "search", *QUERY)
    assert searched.exit_code == 0 and json.loads(searched.stdout)["hits"], searched.output


def test_a_journal_line_that_is_not_utf8_is_skipped_and_named_by_repair(home: Settings) -> None:
    """A damaged journal line (a disk error) neither stops `corpus doctor` nor hides the
    pointer and tombstones recorded beside it."""
    journal = home.home / "registry.journal.jsonl"
    first, rest = journal.read_bytes().split(b"\n", 1)
    journal.write_bytes(first + b"\n\xff\xfe garbage\n" + rest)
    home.registry_path.unlink()
    (finding,) = doctor_findings(home)
    assert finding["kind"] == "registry"

    repaired = corpus(home, "doctor", "--repair")
    assert repaired.exit_code == 0, repaired.output
    assert f"skipped {journal} line 2: bytes that are not UTF-8" in repaired.output
    registry = Registry(home.registry_path)
    active = registry.active("deals")
    assert active is not None and active.id == "g0001"
    assert registry.tombstone(DELETED) is not None


def test_a_damaged_cache_table_is_named_found_and_dropped(home: Settings) -> None:
    table = next((home.home / "lance").glob("cache__*.lance"))
    for data in (table / "data").iterdir():
        data.unlink()
    cache = EmbeddingCache(home.lance_uri, backend_spec="hash:v1-64", revision="v1", dim=64)
    assert cache.table_name == table.name.removesuffix(".lance")
    with pytest.raises(DamagedTableError) as raised:
        cache.lookup(["some-input-hash"])
    assert table.name in str(raised.value) and "corpus doctor --repair" in str(raised.value)

    (finding,) = doctor_findings(home)
    assert finding["kind"] == "cache" and finding["name"] == table.name.removesuffix(".lance")
    assert_repaired(home)


def test_a_cache_table_no_model_can_claim_is_named_and_left(home: Settings) -> None:
    """A cache table named before names were exact that no generation's model folds to is
    read by nothing: doctor names it, why and what to do, as no damage (exit 0), and
    --repair leaves it; one the home's model folds to is that model's, and not named."""
    db = lance.connect(home.lance_uri)
    orphan = folded_table_name("openai:bge-m3", "bge-m3")
    db.create_table(orphan, schema=cache_schema(4))
    db.create_table(folded_table_name("hash:v1-64", "v1"), schema=cache_schema(64))

    found = corpus(home, "doctor", "--json")
    assert found.exit_code == 0, found.output
    report = json.loads(found.stdout)
    assert report["findings"] == []
    (notice,) = report["notices"]
    assert notice["kind"] == "unclaimed" and notice["name"] == orphan
    assert notice["path"] == f"{home.lance_uri}/{orphan}.lance"
    assert "no generation of the home was built with a model" in notice["problem"]
    assert f"delete {notice['path']}" in notice["repair"]
    text = corpus(home, "doctor")
    assert text.exit_code == 0 and "healthy" in text.output, text.output
    assert f"UNCLAIMED cache {orphan}: " in text.output and "to do: " in text.output
    repaired = corpus(home, "doctor", "--repair")
    assert repaired.exit_code == 0, repaired.output
    assert orphan in lance.table_names(lance.connect(home.lance_uri))


# what LanceDB 0.30 says on S3 (moto's server behind a proxy that fails requests), shortened
S3_GET = "http://127.0.0.1:50165/corpus/home/lance/gen_g0001.lance/data/1100.lance"
SLOW_DOWN = (
    "lance error: LanceError(IO): Generic N/A error: LanceError(IO): Generic S3 error: Error "
    f"performing GET {S3_GET} in 396ms, after 3 retries, max_retries: 3, retry_timeout: 180s  - "
    'Server returned non-2xx status code: 503 Service Unavailable: <?xml version="1.0" '
    'encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Reduce your request rate</Message>'
    "</Error>, /rustc/2d81/library/core/src/result.rs:1896:29"
)
REFUSED = (
    "lance error: LanceError(IO): Generic S3 error: Error performing list request: Error "
    "performing GET http://127.0.0.1:50165/corpus?list-type=2&prefix=home%2Flance%2F in 556µs - "
    'Server returned non-2xx status code: 403 Forbidden: <?xml version="1.0"?><Error><Code>'
    "InvalidAccessKeyId</Code><Message>no such key id</Message></Error>, object_store.rs:1506:92"
)
NO_BUCKET = (
    'Invalid input, Failed to connect to namespace: IO { source: Generic { store: "S3", source: '
    "ListRequest { source: RetryError(RetryErrorImpl { method: GET, retries: 0, inner: Status { "
    'status: 404, body: Some("<Error><Code>NoSuchBucket</Code></Error>") } }) } }'
)
GONE_ON_S3 = (
    "lance error: LanceError(IO): Generic N/A error: Wrapped error: Not found: Wrapped error: "
    "Not found: home/lance/gen_g0001.lance/data/1101.lance, /rustc/2d81/result.rs:1896:29"
)


@pytest.mark.parametrize(
    ("error", "raised", "named"),
    [
        (RuntimeError(SLOW_DOWN), StoreUnreachableError, "s3://corpus/home/lance: "),
        (RuntimeError(REFUSED), StoreUnreachableError, "s3://corpus/home/lance: "),
        (ValueError(NO_BUCKET), StoreUnreachableError, "s3://corpus/home/lance: "),
        (
            RuntimeError(GONE_ON_S3),
            DamagedTableError,
            "s3://corpus/home/lance/gen_g0001.lance/data/1101.lance: ",
        ),
    ],
)
def test_a_failed_request_to_the_object_store_is_no_damage(
    error: Exception, raised: type[Exception], named: str
) -> None:
    """Throttling, a server error or refused credentials say nothing of a table's files: a
    StoreUnreachableError (retried; `corpus doctor --repair` drops nothing), where a file the
    store says is not there is damage, named by its place in the bucket."""
    with pytest.raises(raised) as info, lance.damage("s3://corpus/home/lance"):
        raise error
    assert str(info.value).startswith(named), info.value


def test_a_store_error_met_without_the_stores_uri_names_the_request() -> None:
    # LanceDB's error names the object by its URL: the endpoint's port is not part of its path
    with pytest.raises(StoreUnreachableError) as info, lance.damage("LanceDB"):
        raise RuntimeError(SLOW_DOWN)
    assert str(info.value).startswith(f"{S3_GET}: the object store failed a request (SlowDown")
