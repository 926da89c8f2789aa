"""The stores on an S3-compatible object store (moto's server on loopback): a full sync,
search, promotion, a deletion with its receipt and audit, compaction and the doctor, all through
``CORPUS_STORAGE`` and the standard AWS environment variables, with nothing of the warehouse,
the LanceDB tables, the exports or the receipts in the local home; flat-blob exports; two
writers racing on one generation table's rows, and two on its index (a real commit conflict,
retried); and `corpus storage copy` of a local home to the bucket. A second home reaches the
server through a proxy that answers chosen requests with an S3 error (tests/support/faulty_s3.py):
a throttled read or write is a store error to retry, never a damaged table.

One home is synced for the module; the tests run in order on it (each step is the next one of
the same life of a home), so the file costs one sync, one deletion and one compaction (and one
sync of the home behind the proxy).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pyarrow as pa
import pytest
import yaml
from click.testing import CliRunner

from corpus_index import lance, predicates, steps
from corpus_index.cli import main
from corpus_index.config import Settings, settings_from_env
from corpus_index.errors import StoreUnreachableError
from corpus_index.export_reader import load_export
from corpus_index.flat_blob import export_problems
from corpus_index.flat_exports import ExportsOutcome
from corpus_index.home import Home
from corpus_index.index_store import GenerationStore, vector_entry_schema
from corpus_index.search import Principal, Searcher
from corpus_index.storage import Location
from tests.corpusgen import give_words_of_its_own, write_home
from tests.searchkit import build_home
from tests.support.faulty_s3 import Proxy, faulty_proxy
from tests.support.http_server import running_server, serve_config
from tests.support.s3_server import LocalS3

pytestmark = pytest.mark.prod

BUCKET = "corpus-home"
PREFIX = "team/corpus"
GONE = "alpha-deals/deal-alpha-001"
STORES = ("warehouse", "lance", "exports", "receipts")
README_ENV = (
    "AWS_ENDPOINT_URL",
    "AWS_ALLOW_HTTP",
    "AWS_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
)


class Stored(NamedTuple):
    settings: Settings
    s3: LocalS3
    cli: list[str]  # the global options of every `corpus` command of the module


@pytest.fixture(scope="module")
def stored(s3_server: LocalS3, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stored]:
    """A two-tenant hash-embedder home whose stores live under s3://BUCKET/PREFIX."""
    s3_server.create_bucket(BUCKET)
    root = tmp_path_factory.mktemp("s3home")
    config = write_home(root)
    # the deletion test expects the byte scan to find the deal's bytes on the bucket
    give_words_of_its_own(root / "sources" / "alpha" / "deal-alpha-001.uw.md", seed=GONE)
    with pytest.MonkeyPatch.context() as mp:
        env = s3_server.env()
        for name in README_ENV:  # exactly what README's "Scaling out" shows
            mp.setenv(name, env[name])
        for name in set(env) - set(README_ENV):
            mp.delenv(name, raising=False)
        mp.setenv("CORPUS_STORAGE", f"s3://{BUCKET}/{PREFIX}/")
        mp.setenv("CORPUS_CONFIG", str(config))
        mp.setenv("CORPUS_HOME", str(root / "home"))
        settings = settings_from_env()
        yield Stored(settings, s3_server, ["--config", str(config), "--home", str(root / "home")])


def keys(s3: LocalS3, under: str, *, prefix: str = PREFIX) -> list[str]:
    client = s3.client()
    found: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(
        Bucket=BUCKET, Prefix=f"{prefix}/{under}"
    ):
        # (pyarrow keeps an empty "folder/" marker where it removed a folder's last file)
        found.extend(o["Key"] for o in page.get("Contents", []) if not o["Key"].endswith("/"))
    return found


def corpus(stored: Stored, *args: str, code: int = 0) -> Any:
    out = CliRunner().invoke(main, [*stored.cli, *args])
    assert out.exit_code == code, out.output + repr(out.exception)
    return json.loads(out.output) if "--json" in args else out.output


def local_stores(settings: Settings) -> list[str]:
    return sorted(p.name for p in settings.home.iterdir() if p.name in STORES)


def test_storage_uri_is_checked_and_named() -> None:
    from corpus_index.errors import ConfigError

    with pytest.raises(ConfigError, match="CORPUS_STORAGE='gs://b/p': not an object-store URI"):
        settings_from_env({"CORPUS_STORAGE": "gs://b/p"})
    with pytest.raises(ConfigError, match="CORPUS_STORAGE='s3://': not an object-store URI"):
        settings_from_env({"CORPUS_STORAGE": "s3://"})
    assert settings_from_env({}).storage is None


def test_sync_writes_every_store_to_the_bucket_and_none_to_the_home(stored: Stored) -> None:
    settings = stored.settings
    assert settings.storage == f"s3://{BUCKET}/{PREFIX}"
    assert settings.lance_uri == f"s3://{BUCKET}/{PREFIX}/lance"
    corpus(stored, "sync")
    assert any(
        k.endswith("/parsed_blocks/alpha-deals.parquet") for k in keys(stored.s3, "warehouse")
    )
    assert any("/embeddings/main/beta-deals.parquet" in k for k in keys(stored.s3, "warehouse"))
    lance = keys(stored.s3, "lance")
    assert any(k.endswith(".manifest") for k in lance) and any("/data/" in k for k in lance)
    sidecars = keys(stored.s3, "exports/sidecars/main/alpha-deals")
    assert sorted(k.rsplit("/", 1)[1] for k in sidecars) == [
        f"deal-alpha-00{i}.embeddings.json" for i in range(3)
    ]
    assert not [k for k in keys(stored.s3, "") if k.endswith(".tmp")]  # every temp renamed
    # what is this machine's stays here; nothing of the stores does
    assert local_stores(settings) == []
    assert (settings.home / "registry.duckdb").is_file() and (settings.home / "dagster").is_dir()


def test_promotion_and_search_read_the_tables_on_the_object_store(stored: Stored) -> None:
    corpus(stored, "promote", "--namespace", "deals")
    found = corpus(
        stored, "search", "roofs and boilers", "--tenant", "alpha", "--group", "alpha-uw", "--json"
    )
    sources = {h["source_id"] for h in found["hits"]}
    assert sources and {s.split("/")[0] for s in sources} == {"alpha-deals"}  # tenancy holds
    home = Home(stored.settings)
    gen = home.registry.active("deals")
    assert gen is not None and home.store.count(gen) == 24  # 6 deals x 4 embedded blocks
    assert local_stores(stored.settings) == []


def test_a_bucket_that_is_not_there_is_named_not_a_traceback(
    stored: Stored, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORPUS_STORAGE", "s3://no-such-bucket-here/p/")
    missing = settings_from_env()
    with pytest.raises(StoreUnreachableError, match="cannot be listed") as raised:
        Home(missing).store.names()
    assert "s3://no-such-bucket-here/p" in str(raised.value)
    assert stored.s3.env()["AWS_SECRET_ACCESS_KEY"] not in str(raised.value)
    gen = Home(stored.settings).registry.active("deals")
    assert gen is not None
    with pytest.raises(StoreUnreachableError):
        Home(missing).store.table(gen)  # what a search opens
    out = CliRunner().invoke(
        main,
        [*stored.cli, "search", "roofs", "--tenant", "alpha", "--group", "alpha-uw"],
    )
    assert out.exit_code == 1 and "s3://no-such-bucket-here/p" in out.output, out.output
    assert "Traceback" not in out.output


def test_a_deletion_writes_its_receipt_to_the_bucket_and_the_audit_covers_it(
    stored: Stored,
) -> None:
    settings = stored.settings
    (settings.config_path.parent / "sources" / "alpha" / "deal-alpha-001.uw.md").unlink()
    corpus(stored, "sync")
    home = Home(settings)
    tomb = home.registry.tombstone(GONE)
    assert tomb is not None and tomb["receipt"].startswith(f"s3://{BUCKET}/{PREFIX}/receipts/")
    assert [k for k in keys(stored.s3, "receipts/") if k.endswith(".json")]
    receipt = json.loads(Location.of(tomb["receipt"]).read_text())
    assert receipt["source_ids"] == [GONE]
    assert {a["store"] for a in receipt["artifacts"]} >= {"lance", "exports", "warehouse"}
    assert not [k for k in keys(stored.s3, "exports/sidecars") if "deal-alpha-001" in k]
    gen = home.registry.active("deals")
    assert gen is not None and home.store.count(gen, predicates.eq("source_id", GONE)) == 0
    # before compaction, old LanceDB versions on the object store still hold its bytes
    audit = corpus(stored, "audit-deletion", GONE, "--json", code=1)
    assert not audit["clean"] and audit["byte_scan"]["status"] == "done"
    assert audit["byte_scan"]["roots"] == [str(settings.home), f"s3://{BUCKET}/{PREFIX}"]
    byte_paths = [r["path"] for r in audit["remaining"] if r["store"] == "bytes"]
    assert byte_paths and all(p.startswith(f"s3://{BUCKET}/{PREFIX}/lance/") for p in byte_paths)
    assert audit["byte_scan"]["cost"]["files"] > len(keys(stored.s3, "lance")) // 2


def test_compaction_on_the_object_store_leaves_the_audit_clean(stored: Stored) -> None:
    # a temp object a crashed write left behind, old enough to go (the retention window of a
    # pending deletion is zero)
    stale = Location.of(f"s3://{BUCKET}/{PREFIX}/warehouse/.x.parquet.dead.tmp")
    stale.write_bytes(b"half a partition")
    report = corpus(stored, "compact", "--json")
    assert report["tombstones_purged"] == [GONE]
    assert str(stale) in report["temp_files_removed"] and not stale.exists()
    audit = corpus(stored, "audit-deletion", GONE, "--json")
    assert audit["clean"], audit["remaining"]
    assert corpus(stored, "doctor").strip().endswith(f"(stores: s3://{BUCKET}/{PREFIX}): healthy")
    assert local_stores(stored.settings) == []


def test_two_writers_racing_on_one_table_both_land(stored: Stored) -> None:
    """Two processes' worth of writers (own connections) replace the rows of their own source
    of the same generation table at once, over and over: every commit lands, none is lost."""
    home = Home(stored.settings)
    gen = home.registry.active("deals")
    assert gen is not None
    table = home.store.table(gen)
    columns = vector_entry_schema(gen).names
    mine = {
        s: table.search().where(predicates.eq("source_id", s)).limit(100).to_arrow().select(columns)
        for s in ("alpha-deals/deal-alpha-000", "beta-deals/deal-beta-002")
    }
    before = home.store.count(gen)
    errors: list[BaseException] = []
    start = threading.Barrier(len(mine))

    def writer(source: str, rows: pa.Table) -> None:
        store = GenerationStore(stored.settings.lance_uri)  # a connection of its own
        collection = source.split("/")[0]
        start.wait()
        try:
            for _ in range(4):
                store.replace_sources(gen, collection, rows.slice(1), [source])
                store.replace_sources(gen, collection, rows, [source])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=item) for item in mine.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    after = GenerationStore(stored.settings.lance_uri)
    assert after.count(gen) == before
    for source, rows in mine.items():
        assert after.count(gen, predicates.eq("source_id", source)) == rows.num_rows


def test_settings_outside_the_environment_name_the_same_stores(
    stored: Stored, tmp_path: Path
) -> None:
    explicit = Settings(
        config_path=stored.settings.config_path, home=tmp_path, storage=stored.settings.storage
    )
    assert explicit.warehouse == stored.settings.warehouse
    assert explicit.roots[1] == stored.settings.stores and len(explicit.roots) == 2


def test_flat_exports_are_built_replaced_and_read_on_the_object_store(
    stored: Stored, tmp_path: Path
) -> None:
    """A profiles collection's flat-blob exports: built under the bucket, rebuilt without a
    researcher whose file was removed (the tree replaced file by file, the old slug gone), and
    read back by their s3:// URI."""
    people = tmp_path / "people"
    for slug, topic in (("ada-okafor", "Coral reef symbionts."), ("bo-lindqvist", "Tidal mixing.")):
        (people / slug).mkdir(parents=True)
        (people / slug / "expertise.md").write_text(f"# Expertise\n\n{topic}\n")
    coll = {"kind": "profiles", "tenant": "lab", "acl_groups": ["lab"], "tier": "public"}
    config = {
        "collections": {"people": {**coll, "path": "people", "namespace": "people"}},
        "profiles": {"h": {"embedder": "hash:v1-32", "namespace": "people"}},
        "namespaces": {"people": {"eval_gate": "off"}},
    }
    (tmp_path / "corpus.yaml").write_text(yaml.safe_dump(config))
    settings = Settings(
        config_path=tmp_path / "corpus.yaml", home=tmp_path / "home", storage=f"s3://{BUCKET}/lab"
    )
    home = Home(settings)

    def build() -> ExportsOutcome:  # the steps `corpus sync` runs for the collection
        for step in (steps.source_manifest, steps.parsed_blocks, steps.embedding_inputs):
            step.run(home, "people")
        steps.embeddings.run(home, "h", "people", run_id="test")
        return steps.flat_exports.run(home, "h", "people")

    assert build().written
    folder = settings.exports / "flat" / "h" / "people"
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == [
        "ada-okafor",
        "bo-lindqvist",
        "collection",
    ]
    (people / "bo-lindqvist" / "expertise.md").unlink()
    (people / "bo-lindqvist").rmdir()
    build()  # the deletion of bo's file rebuilds the exports (the step then finds them current)
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["ada-okafor", "collection"]
    assert not [k for k in keys(stored.s3, "exports", prefix="lab") if "bo-lindqvist" in k]
    export = load_export(str(folder / "ada-okafor" / "embeddings"))
    assert (
        export.index["count"] == 1 and export_problems(folder / "ada-okafor" / "embeddings") == []
    )
    assert not (tmp_path / "home" / "exports").exists()


def test_storage_copy_moves_a_home_to_the_object_store_where_it_serves_the_same(
    stored: Stored, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A home synced in its folder, copied with `corpus storage copy --to`, then served from the
    bucket (CORPUS_STORAGE set): the same hits, the doctor finds it healthy; a second copy to
    the same prefix is refused."""
    monkeypatch.delenv("CORPUS_STORAGE")
    local = Settings(config_path=write_home(tmp_path, deals_per_tenant=2), home=tmp_path / "home")
    built = build_home(local)
    for collection in built.config.collections:
        assert steps.sidecars.run(built, "main", collection).written == 2
    args = ["--config", str(local.config_path), "--home", str(local.home)]
    target = f"s3://{BUCKET}/moved"
    out = CliRunner().invoke(main, [*args, "storage", "copy", "--to", target, "--json"])
    assert out.exit_code == 0, out.output
    copied = json.loads(out.output)["stores"]
    assert copied["warehouse"]["files"] > 0 and copied["lance"]["bytes"] > 0
    assert copied["exports"]["files"] == 4  # a sidecar per deal
    assert len(keys(stored.s3, "", prefix="moved")) == sum(c["files"] for c in copied.values())
    again = CliRunner().invoke(main, [*args, "storage", "copy", "--to", target])
    assert again.exit_code == 2 and "already holds warehouse, lance, exports" in again.output

    moved = Settings(config_path=local.config_path, home=local.home, storage=target)
    who = Principal("beta", ("beta-team",))
    before = Searcher(Home(local)).search("sponsor experience", principal=who, k=5)
    after = Searcher(Home(moved)).search("sponsor experience", principal=who, k=5)
    assert (
        [(h.source_id, h.section) for h in after.hits]
        == [(h.source_id, h.section) for h in before.hits]
        != []
    )
    monkeypatch.setenv("CORPUS_STORAGE", target)
    assert CliRunner().invoke(main, [*args, "doctor"]).output.strip().endswith("healthy")


def test_index_builds_racing_on_one_table_are_retried_until_both_commit(stored: Stored) -> None:
    """Two writers rebuilding the same table's full-text index at once: LanceDB refuses the
    loser's commit ("Retryable commit conflict"); retry_commits backs off and commits it on the
    new version. Both finish, the conflicts were met and retried, and the index is whole."""
    from lancedb.index import FTS

    home = Home(stored.settings)
    gen = home.registry.active("deals")
    assert gen is not None
    retried: list[float] = []
    errors: list[BaseException] = []

    def backoff(seconds: float) -> None:
        retried.append(seconds)
        time.sleep(seconds)

    def writer(start: threading.Barrier) -> None:
        table = GenerationStore(stored.settings.lance_uri).table(gen)  # a connection of its own
        start.wait()
        try:
            lance.retry_commits(
                lambda: table.create_index("text", config=FTS(with_position=False), replace=True),
                table=table,
                sleep=backoff,
            )
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    for _ in range(5):  # a race is won by timing: a few rounds make sure one is lost
        start = threading.Barrier(2)
        threads = [threading.Thread(target=writer, args=(start,)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        if retried:
            break
    assert retried, "no commit conflict in five races"
    assert home.store.coverage(gen).fts_unindexed == 0
    found = corpus(
        stored,
        "search",
        "windstorm",
        "--tenant",
        "alpha",
        "--group",
        "alpha-uw",
        "--mode",
        "lexical",
        "--json",
    )
    assert found["hits"]


def test_readiness_names_an_unreachable_bucket_only_in_the_servers_log(
    stored: Stored, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/v1/ready`` needs no key: its 503 says the object store cannot be listed, while the
    bucket's name (and where it is) goes to the server's log for the operator."""
    config = stored.settings.config_path
    served = config.with_name("serve-missing-bucket.yaml")
    shutil.copy(config, served)
    serve_config(served, {"ck_alpha": ("alpha", ["alpha-uw"])})
    monkeypatch.setenv("CORPUS_STORAGE", "s3://no-such-bucket-here/p/")
    log = config.with_name("serve-missing-bucket.log")
    with running_server(served, stored.settings.home, log=log) as url:
        answer = httpx.get(f"{url}/v1/ready", timeout=60)
    assert answer.status_code == 503, answer.text
    assert "cannot be listed" in answer.json()["detail"]
    assert "no-such-bucket-here" not in answer.text and stored.s3.endpoint not in answer.text
    assert "s3://no-such-bucket-here/p" in log.read_text(encoding="utf-8")


# -- a store that throttles or refuses requests -------------------------------------------

FAULTY = "corpus-faulty"
SEARCH = ["search", "rents grew", "--tenant", "alpha", "--group", "alpha-uw"]


class Faulty(NamedTuple):
    root: Path
    proxy: Proxy
    cli: list[str]


@pytest.fixture(scope="module")
def faulty(s3_server: LocalS3, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Faulty]:
    """A synced and promoted hash-embedder home whose stores are on the S3 server, reached
    through a proxy that can fail requests."""
    s3_server.create_bucket(FAULTY)
    root = tmp_path_factory.mktemp("faulty")
    config = write_home(root)
    with faulty_proxy(s3_server.endpoint) as proxy, pytest.MonkeyPatch.context() as mp:
        for name, value in s3_server.env().items():
            mp.setenv(name, value)
        for name in ("AWS_ENDPOINT", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            mp.setenv(name, proxy.endpoint)
        mp.setenv("CORPUS_STORAGE", f"s3://{FAULTY}/home")
        home = Faulty(root, proxy, ["--config", str(config), "--home", str(root / "home")])
        for command in ("sync", "promote"):
            done = CliRunner().invoke(main, [*home.cli, command])
            assert done.exit_code == 0, done.output
        yield home


def through(faulty: Faulty, *args: str) -> Any:
    return CliRunner().invoke(main, [*faulty.cli, *args])


def sync_throttled(faulty: Faulty, store: str, old: str, new: str) -> Any:
    """`corpus sync` after a deal's ``old`` text became ``new``, while the proxy refuses the
    PUTs under the home's ``store`` with 503 SlowDown until the client gave up."""
    deal = faulty.root / "sources" / "alpha" / "deal-alpha-000.uw.md"
    deal.write_text(deal.read_text().replace(old, new))
    faulty.proxy.failed.clear()  # the heal waits for this sync's failures, not earlier ones
    faulty.proxy.fail("PUT", rf"/{FAULTY}/home/{store}/", status=503, code="SlowDown")
    faulty.proxy.heal_once_given_up()
    try:
        synced = through(faulty, "sync")
    finally:
        faulty.proxy.heal()
    assert faulty.proxy.failed  # the write did fail
    return synced


def test_a_throttled_write_is_a_store_error_the_step_retries_not_damage(faulty: Faulty) -> None:
    """PUTs refused with 503 SlowDown while a sync writes the embedding cache, until LanceDB
    gave up, are a store error: the step runs again once the store answers and the sync lands,
    where they were a damaged table file to repair, which no step retries."""
    synced = sync_throttled(faulty, "lance", "Rents grew four", "Rents grew nine")
    assert synced.exit_code == 0, synced.output
    served = through(faulty, *SEARCH)
    assert served.exit_code == 0 and "Rents grew nine" in served.output, served.output


def test_a_throttled_warehouse_write_is_retried_by_its_step(faulty: Faulty) -> None:
    """PUTs to the warehouse refused with 503 SlowDown while an ingestion step writes a
    collection's partition, until pyarrow gave up: the step runs again once the store answers,
    as the embeddings step does, and the sync lands. Only the embeddings step was run again,
    and the write's error was pyarrow's own, so such a write failed the sync (and left a change
    out of the index until the next one to its files)."""
    synced = sync_throttled(faulty, "warehouse", "Rents grew", "Rents climbed")
    assert synced.exit_code == 0, synced.output
    served = through(faulty, *SEARCH[:1], "rents climbed", *SEARCH[2:])
    assert served.exit_code == 0 and "Rents climbed" in served.output, served.output


def test_a_throttled_read_is_not_damage_and_repair_keeps_the_active_table(faulty: Faulty) -> None:
    """S3 answering 503 SlowDown to the ACTIVE table's data files is a transient store error:
    the search and the doctor name the store (exit 1: run it again), and `--repair` drops
    nothing, so serving is back once the store is."""
    faulty.proxy.fail("GET", rf"/{FAULTY}/home/lance/gen_.*/data/", status=503, code="SlowDown")
    try:
        searched = through(faulty, *SEARCH)
        repaired = through(faulty, "doctor", "--repair")
    finally:
        faulty.proxy.heal()
    for result in (searched, repaired):
        assert result.exit_code == 1, result.output
        assert "the object store failed a request (SlowDown" in result.output
        assert "damaged" not in result.output.lower() and "dropped" not in result.output
    after = through(faulty, *SEARCH)
    assert after.exit_code == 0 and "Rents grew" in after.output, after.output


@pytest.mark.parametrize("command", [["doctor"], ["audit-deletion", GONE]])
def test_refused_credentials_are_named_not_a_traceback(faulty: Faulty, command: list[str]) -> None:
    """Credentials the store refuses (403 on every request) end the command through the CLI's
    error boundary naming the store (exit 1); `corpus doctor` and `corpus audit-deletion` let
    pyarrow's OSError out."""
    faulty.proxy.fail("*", ".*", status=403, code="InvalidAccessKeyId")
    try:
        result = through(faulty, *command)
    finally:
        faulty.proxy.heal()
    assert isinstance(result.exception, SystemExit) and result.exit_code == 1, result.output
    assert f"s3://{FAULTY}/home/" in result.output and "failed a request" in result.output
    assert "damaged" not in result.output  # (a HEAD's 403 has no body to name the code)


def test_audit_deletion_names_a_missing_bucket_not_a_traceback(
    faulty: Faulty, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `corpus search` and `corpus doctor` do; it let LanceDB's ValueError ("Failed to
    connect to namespace") out."""
    monkeypatch.setenv("CORPUS_STORAGE", "s3://no-such-bucket-here/p")
    result = through(faulty, "audit-deletion", GONE)
    assert isinstance(result.exception, SystemExit) and result.exit_code == 1, result.output
    assert "s3://no-such-bucket-here/p" in result.output and "cannot be listed" in result.output
