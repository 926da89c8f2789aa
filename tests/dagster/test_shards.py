"""Hash shards of a collection: a sharded home answers like an unsharded one, a change runs
only its shard, a deletion reaches every generation, and a re-shard loses nothing.

Two generated homes (two tenants, hash embedder) are synced once for the module: one with
``shards: 4`` on both collections and two profiles (two generations, one ACTIVE), one with the
default single partition and one profile. The tests change them in order (module scope, one
expensive setup per home).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import dagster as dg
import pytest
import yaml
from click.testing import CliRunner

from corpus_index.cli import main
from corpus_index.config import Settings, load_config
from corpus_index.errors import ConfigError
from corpus_index.home import Home
from corpus_index.index_store import vector_entry_schema
from corpus_index.search import Principal, Searcher
from corpus_index.shards import partition_key, shard_of, split_key
from definitions import dagster_runner
from pipelines.sensors import scan_sources
from tests.corpusgen import write_home
from tests.searchkit import scratch_home

pytestmark = pytest.mark.slow
COLLECTIONS = ("alpha-deals", "beta-deals")
QUERIES = [
    ("alpha", ("alpha-uw",), "roof boiler capital replacement"),
    ("alpha", ("alpha-credit",), "anchor tenant lease renewal"),
    ("beta", ("beta-team",), "insurance premiums windstorm coast"),
    ("beta", ("beta-team",), "rents grew on job growth"),
]


class Synced(NamedTuple):
    settings: Settings
    report: Any


def _home(root: Path, shards: int, **profiles: dict[str, object]) -> Settings:
    config = write_home(root, deals_per_tenant=6, extra_profiles=profiles)
    _set_shards(config, shards)
    return Settings(config_path=config, home=root / "home")


def _set_shards(config: Path, shards: int) -> None:
    raw = yaml.safe_load(config.read_text(encoding="utf-8"))
    for spec in raw["collections"].values():
        spec["shards"] = shards
    config.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")


def _sync_and_promote(settings: Settings) -> Any:
    report = dagster_runner().sync(settings)
    assert report.ok, report.failed_runs
    _promote_main(settings)
    return report


def _promote_main(settings: Settings) -> None:
    """Promote profile ``main``'s generation (the one both homes build alike)."""
    gen = Home(settings).registry.live_generation("main")
    assert gen is not None
    promoted = dagster_runner().promote(settings, "deals", gen.id)
    assert promoted.success, promoted


def answers(settings: Settings) -> list[list[tuple[str, str, str, float]]]:
    """Every query's hits, dense and hybrid: (source_id, collection, block_key, score)."""
    searcher = Searcher(Home(settings))
    out = []
    for tenant, groups, text in QUERIES:
        for mode in ("dense", "hybrid"):
            result = searcher.search(text, principal=Principal(tenant, groups), k=8, mode=mode)
            out.append(
                [(h.source_id, h.collection, h.block_key, round(h.score, 5)) for h in result.hits]
            )
    return out


def partitions_run(settings: Settings, report: Any) -> set[str]:
    """The collection partition of every ingest and embed run the sync started, read from the
    Dagster instance."""
    instance = dg.DagsterInstance.from_config(str(settings.home / "dagster"))
    found: set[str] = set()
    for run_id in report.runs:
        run = instance.get_run_by_id(run_id)
        assert run is not None
        if run.job_name == "ingest_job":
            found.add(run.tags["dagster/partition"])
        elif run.job_name == "embed_job":
            found.add(run.tags["dagster/partition/collection"])
    return found


def dynamic_partitions(settings: Settings) -> list[str]:
    instance = dg.DagsterInstance.from_config(str(settings.home / "dagster"))
    return sorted(instance.get_dynamic_partitions("collections"))


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synced]:
    wide = {"embedder": "hash:v1-32", "namespace": "deals"}
    settings = _home(tmp_path_factory.mktemp("sharded"), 4, wide=wide)
    yield Synced(settings, _sync_and_promote(settings))


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synced]:
    settings = _home(tmp_path_factory.mktemp("single"), 1)
    yield Synced(settings, _sync_and_promote(settings))


def test_a_sharded_home_syncs_promotes_and_answers_like_an_unsharded_one(
    sharded: Synced, single: Synced
) -> None:
    keys = [partition_key(c, n, 4) for c in COLLECTIONS for n in range(4)]
    assert dynamic_partitions(sharded.settings) == keys
    assert partitions_run(sharded.settings, sharded.report) == set(keys)
    # every document in exactly one shard: the shards' manifests add up to the collection
    home = Home(sharded.settings)
    for name in COLLECTIONS:
        ids = [
            sid
            for n in range(4)
            for sid in home.read("source_manifest", (partition_key(name, n, 4),))[
                "source_id"
            ].to_pylist()
        ]
        assert len(ids) == len(set(ids)) == 6
        assert all(
            shard_of(sid, 4) == n
            for n in range(4)
            for sid in home.read("source_manifest", (partition_key(name, n, 4),))[
                "source_id"
            ].to_pylist()
        )
        assert sharded.report.collections[name]["documents"] == 6
    # one generation, one collection per name (the rows carry the collection, not the shard)
    gen = home.registry.active("deals")
    assert (
        gen is not None
        and gen.row_count == Home(single.settings).registry.active("deals").row_count
    )
    table = home.store.table(gen).to_arrow()
    assert sorted(set(table["collection"].to_pylist())) == list(COLLECTIONS)
    assert answers(sharded.settings) == answers(single.settings)
    assert all(hits for hits in answers(sharded.settings))


def test_a_one_document_change_runs_only_its_shard(sharded: Synced) -> None:
    source = "beta-deals/deal-beta-002"
    shard = partition_key("beta-deals", shard_of(source, 4), 4)
    path = sharded.settings.config_path.parent / "sources" / "beta" / "deal-beta-002.uw.md"
    path.write_text(path.read_text().replace("four percent", "nine percent"), encoding="utf-8")
    report = dagster_runner().sync(sharded.settings)
    assert report.ok, report.failed_runs
    assert partitions_run(sharded.settings, report) == {shard}
    assert report.collections["beta-deals"]["partitions_run"] == [shard]
    assert report.collections["alpha-deals"]["partitions_run"] == []
    assert len(report.skipped_partitions) == 7 and shard not in report.skipped_partitions
    assert report.embedded == 2  # the changed block, under each of the two profiles
    assert report.collections["beta-deals"]["changed"] == 1
    assert report.collections["beta-deals"]["documents"] == 6
    # the change serves once promoted, and the other shards' rows are all still there
    _promote_main(sharded.settings)
    hits = Searcher(Home(sharded.settings)).search(
        "rents grew nine percent", principal=Principal("beta", ("beta-team",)), k=3, mode="dense"
    )
    assert hits.hits[0].source_id == source
    home = Home(sharded.settings)
    gen = home.registry.active("deals")
    assert gen is not None and home.store.count(gen) == gen.row_count
    # nothing changed since: the next sync runs no partition
    again = dagster_runner().sync(sharded.settings)
    assert again.ok and partitions_run(sharded.settings, again) == set()
    assert len(again.skipped_partitions) == 8


def test_a_deletion_leaves_every_generation(sharded: Synced) -> None:
    home = Home(sharded.settings)
    gens = [g for g in home.registry.generations() if g.status != "RETIRED"]
    assert {g.spec.profile for g in gens} == {"main", "wide"}
    source = "alpha-deals/deal-alpha-004"
    where = f"source_id = '{source}'"
    assert all(home.store.count(g, where) > 0 for g in gens)

    (sharded.settings.config_path.parent / "sources" / "alpha" / "deal-alpha-004.uw.md").unlink()
    report = dagster_runner().sync(sharded.settings)
    assert report.ok, report.failed_runs
    shard = partition_key("alpha-deals", shard_of(source, 4), 4)
    assert report.collections["alpha-deals"]["partitions_run"] == [shard]
    assert report.collections["alpha-deals"]["removed"] == 1
    assert report.collections["alpha-deals"]["deletion_receipt"]
    home = Home(sharded.settings)
    assert all(home.store.count(g, where) == 0 for g in gens)
    assert home.registry.tombstone(source) is not None
    blocks = home.read("parsed_blocks", (shard,))
    assert source not in blocks["source_id"].to_pylist()
    for tenant, groups, text in QUERIES[:2]:
        hits = Searcher(home).search(text, principal=Principal(tenant, groups), k=20).hits
        assert source not in {h.source_id for h in hits}


def test_a_generation_table_the_doctor_dropped_is_rebuilt_from_every_shard(
    sharded: Synced,
) -> None:
    """No shard's files changed, yet each shard's rows went with the damaged table that
    `corpus doctor --repair` dropped: the next sync writes every shard again."""
    settings = sharded.settings
    before = answers(settings)
    active = Home(settings).registry.active("deals")
    assert active is not None
    table = settings.home / "lance" / f"{active.table_name}.lance"
    for data in (table / "data").iterdir():  # its data files lost: the table is damaged
        data.unlink()

    args = ["--config", str(settings.config_path), "--home", str(settings.home)]
    result = CliRunner().invoke(main, [*args, "sync", "--repair"])
    assert result.exit_code == 0, result.output
    assert f"dropped the damaged table {active.table_name}" in result.output
    assert "unchanged shard partitions not run" not in result.output
    home = Home(settings)
    rebuilt = home.registry.active("deals")
    assert rebuilt is not None and rebuilt.id == active.id
    assert home.store.count(rebuilt) == rebuilt.row_count == active.row_count
    # dense answers alike (the lexical statistics of the table dropped counted the rows a
    # deletion had masked), and every query answered
    after = answers(settings)
    assert after[::2] == before[::2] and all(after)
    healthy = CliRunner().invoke(main, [*args, "doctor"])
    assert healthy.exit_code == 0 and "healthy" in healthy.output, healthy.output


def test_a_rebuild_of_a_dropped_table_cut_short_runs_every_shard_it_did_not_reach(
    sharded: Synced,
) -> None:
    """`corpus doctor --repair` drops a damaged table; a rebuild that wrote one shard's rows
    and stopped made the table anew, so the other shards' last writes went to the table
    dropped: they are not current, and the next sync writes each of them again."""
    settings = sharded.settings
    home = Home(settings)
    active = home.registry.active("deals")
    assert active is not None
    rows = home.store.count(active)
    assert rows == active.row_count
    for data in (settings.home / "lance" / f"{active.table_name}.lance" / "data").iterdir():
        data.unlink()
    args = ["--config", str(settings.config_path), "--home", str(settings.home)]
    repaired = CliRunner().invoke(main, [*args, "doctor", "--repair"])
    assert f"dropped the damaged table {active.table_name}" in repaired.output, repaired.output
    # the rebuild, cut short: only the first shard's rows written, into a table made anew
    first = partition_key("alpha-deals", 0, 4)
    opened = dagster_runner().open_home(settings)
    result = opened.defs.resolve_job_def("embed_job").execute_in_process(
        partition_key=dg.MultiPartitionKey({"profile": "main", "collection": first}),
        instance=opened.instance,
        raise_on_error=False,
    )
    assert result.success
    assert 0 < Home(settings).store.count(active) < rows

    report = dagster_runner().sync(settings)
    assert report.ok, report.failed_runs
    assert report.skipped_partitions == [first]  # the one shard the rebuild wrote
    home = Home(settings)
    rebuilt = home.registry.active("deals")
    assert rebuilt is not None and rebuilt.id == active.id
    assert home.store.count(rebuilt) == rebuilt.row_count == rows
    healthy = CliRunner().invoke(main, [*args, "doctor"])
    assert healthy.exit_code == 0 and "healthy" in healthy.output, healthy.output
    # nothing changed since: every shard is current again
    again = dagster_runner().sync(settings)
    assert again.ok and len(again.skipped_partitions) == 8


def test_a_generation_table_records_the_id_it_was_made_with_and_an_older_one_none(
    tmp_path: Path,
) -> None:
    """A generation table records, in its schema's metadata, an id of its own making; one
    made before that (an older home) records none, and writes and reads leave either as is."""
    corpus = scratch_home(tmp_path, {"alpha": ["a1"]})
    made = corpus.registry.open_generation(corpus.spec("main"))
    corpus.store.ensure(made)
    marker = corpus.store.created(made)
    assert len(marker) == 32
    corpus.store.delete_where(made, "source_id = 'x'")
    assert corpus.store.created(made) == marker
    corpus.store.db.drop_table(made.table_name)
    corpus.store.ensure(made)
    assert corpus.store.created(made) not in ("", marker)  # made anew, another id
    corpus.store.db.drop_table(made.table_name)
    # as an older home made it: the schema alone
    corpus.store.db.create_table(made.table_name, schema=vector_entry_schema(made))
    assert corpus.store.created(made) == ""
    corpus.store.ensure(made)
    assert corpus.store.created(made) == ""


def test_a_reshard_from_one_to_four_and_back_keeps_every_hit_and_embeds_nothing(
    single: Synced, tmp_path: Path
) -> None:
    root = tmp_path / "copy"
    shutil.copytree(single.settings.config_path.parent, root)
    settings = Settings(config_path=root / "corpus.yaml", home=root / "home")
    before = answers(settings)
    rows = Home(settings).registry.active("deals").row_count

    _set_shards(settings.config_path, 4)
    said: list[str] = []
    report = dagster_runner().sync(settings, progress=said.append)
    assert report.ok, report.failed_runs
    # nothing embedded: every vector comes from the cache or the sidecars the old partition
    # wrote beside the home (content-addressed, either way)
    assert report.embedded == 0
    assert report.reshards["alpha-deals"] == {
        "from": ["alpha-deals"],
        "to": [partition_key("alpha-deals", n, 4) for n in range(4)],
        "dropped": ["alpha-deals"],
    }
    assert any(m.startswith("re-shard alpha-deals: 1 -> 4 partitions") for m in said)
    assert dynamic_partitions(settings) == [
        partition_key(c, n, 4) for c in COLLECTIONS for n in range(4)
    ]
    home = Home(settings)
    assert not home.warehouse.path("parsed_blocks", "alpha-deals").exists()
    assert home.warehouse.path("parsed_blocks", "alpha-deals~00").exists()
    assert home.registry.active("deals").row_count == rows
    assert home.store.count(home.registry.active("deals")) == rows
    assert answers(settings) == before

    _set_shards(settings.config_path, 1)
    # back through the CLI, which says what the sync did
    args = ["--config", str(settings.config_path), "--home", str(settings.home), "sync"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "embedded 0," in result.output
    assert "re-sharded beta-deals: 4 -> 1 partitions; dropped beta-deals~00" in result.output
    assert dynamic_partitions(settings) == list(COLLECTIONS)
    assert not Home(settings).warehouse.path("parsed_blocks", "beta-deals~03").exists()
    assert answers(settings) == before


# every collection's re-shard from 3 to 4, as a sync reports it: no partition key goes
def test_shard_keys_are_read_in_one_place_and_refused_when_wrong(single: Synced) -> None:
    assert split_key("deals") == ("deals", None)
    assert split_key("deals~07") == ("deals", 7)
    with pytest.raises(ValueError, match="deals~x"):
        split_key("deals~x")
    assert partition_key("deals", 7, 8) == "deals~07"
    assert partition_key("deals", 7, 200) == "deals~007"
    # sha256, not Python's salted hash: the same shard in every process
    assert shard_of("alpha-deals/deal-alpha-000", 8) == shard_of("alpha-deals/deal-alpha-000", 8)
    assert {shard_of(f"c/d{i}", 4) for i in range(64)} == {0, 1, 2, 3}
    home = Home(single.settings)
    with pytest.raises(ConfigError, match="shards is 1"):
        home.collection("alpha-deals~02")


@pytest.mark.parametrize(
    ("kind", "extra", "why"),
    [
        ("messages", {}, "linked groups"),
        ("beir", {}, "corpus.jsonl"),
        ("profiles", {}, "flat exports"),
    ],
)
def test_kinds_that_cannot_shard_refuse_it_naming_the_collection(
    tmp_path: Path, kind: str, extra: dict[str, Any], why: str
) -> None:
    (tmp_path / "src").mkdir()
    config = {
        "collections": {
            "chats": {
                "kind": kind,
                "path": "src",
                "tenant": "t",
                "acl_groups": ["g"],
                "shards": 4,
                **extra,
            }
        },
        "profiles": {"p": {"embedder": "hash:v1-16"}},
    }
    path = tmp_path / "corpus.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(
        ConfigError, match=rf"collections\.chats\.shards: collection 'chats'.*{why}"
    ):
        load_config(path)
    config["collections"]["chats"]["shards"] = 0
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError, match="shards: must be a positive integer"):
        load_config(path)


def test_the_source_sensor_ingests_shard_by_shard_and_leaves_a_reshard_to_sync(
    tmp_path: Path,
) -> None:
    settings = _home(tmp_path, 4)
    config = settings.load()
    keys = [partition_key(c, n, 4) for c in COLLECTIONS for n in range(4)]
    first = scan_sources(config, {}, [])
    assert sorted(first.ingest) == sorted(first.add_partitions) == keys
    seen = dict(first.cursor["fingerprints"])
    assert scan_sources(config, seen, keys).ingest == {}

    source = "alpha-deals/deal-alpha-003"
    path = tmp_path / "sources" / "alpha" / "deal-alpha-003.uw.md"
    path.write_text(path.read_text() + "\n", encoding="utf-8")
    changed = scan_sources(config, seen, keys)
    assert list(changed.ingest) == [partition_key("alpha-deals", shard_of(source, 4), 4)]
    # a partition of the earlier shard count is not purged (its collection is configured:
    # `corpus sync` re-shards it); one of a collection gone from the config is
    left = scan_sources(config, seen, [*keys, "alpha-deals", "gone~01"])
    assert sorted(left.purge) == ["gone~01"]
