"""The registry on a real PostgreSQL server: processes promoting at once leave one consistent
ACTIVE pointer and history; a whole home runs on it (`corpus sync`, `promote`, search, doctor);
`corpus registry copy` moves a DuckDB registry into it."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from click.testing import CliRunner, Result

from corpus_index.cli import main
from corpus_index.registry import (
    JOURNAL_NAME,
    Registry,
    journaled_pointers,
    restore_from_journal,
)
from corpus_index.traces import TraceStore
from tests.corpusgen import give_words_of_its_own, write_home
from tests.registry_backends import new_database
from tests.test_registry import SPEC, ready

pytestmark = pytest.mark.prod

WORKER = """
import json, sys, time
from pathlib import Path
from corpus_index.registry import GenerationSpec, Registry

url, journal, start, order = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
reg = Registry(url, journal=journal, lock_timeout_s=60)
spec = GenerationSpec("deals", "raced", "hash:v1-16", "v1", 16, True, "default-v1", "sections-v1")
time.sleep(max(0.0, start - time.time()))  # both workers start together
opened = reg.open_generation(spec).id  # both open the same new generation at once
for gen in order:
    reg.promote(gen)
print(json.dumps({"opened": opened}))
"""


def test_two_processes_promoting_at_once_leave_one_consistent_pointer(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = new_database(request)
    journal = tmp_path / JOURNAL_NAME
    reg = Registry(url, journal=journal)
    gens = [
        ready(reg, dataclasses.replace(SPEC, backend_spec=f"hash:v{n}-8", dim=8)) for n in range(6)
    ]
    rounds = 15
    orders = [gens[:3] * rounds, gens[3:] * rounds]  # each worker cycles through its own three
    start = time.time() + 2.0
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, url, str(journal), str(start), *order],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for order in orders
    ]
    outputs = [w.communicate(timeout=240) for w in workers]
    for w, (_, err) in zip(workers, outputs, strict=True):
        assert w.returncode == 0, err
    opened = {json.loads(out)["opened"] for out, _ in outputs}
    assert opened == {"g0007"}  # one new generation, not two with the same id

    active = reg.active("deals")
    assert active is not None and active.id in gens
    statuses = {g.id: g.status for g in reg.generations()}
    assert [g for g, s in statuses.items() if s == "ACTIVE"] == [active.id]
    assert all(statuses[g] == "READY" for g in gens if g != active.id)

    history = reg.history("deals")
    # every promotion that moved the pointer is one entry, each from where the last one left it
    assert len(history) == 2 * 3 * rounds
    assert history[0]["from_generation"] is None
    for before, after in zip(history, history[1:], strict=False):
        assert after["from_generation"] == before["to_generation"], (before, after)
    assert history[-1]["to_generation"] == active.id
    previous = reg.previous("deals")
    assert previous is not None and previous.id == history[-1]["from_generation"]
    # the journal agrees: its latest pointer move names the serving generation (the two
    # processes may have appended their lines in the other order than they committed)
    assert sum(e["op"] == "pointer" for e in reg.journal.entries()) == len(history)
    assert journaled_pointers(reg.journal.entries())["deals"]["generation"] == active.id
    restored = Registry(new_database(request), journal=journal)
    restore_from_journal(restored)
    assert restored.active("deals").id == active.id  # type: ignore[union-attr]
    assert restored.previous("deals").id == previous.id  # type: ignore[union-attr]


# -- a whole home with its registry in PostgreSQL ------------------------------------------


def corpus(root: Path, url: str | None, *args: str) -> Result:
    base = ["--config", str(root / "corpus.yaml"), "--home", str(root / "home")]
    env = {"CORPUS_REGISTRY": url} if url else {}
    return CliRunner(env=env).invoke(main, [*base, *args])


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


QUERY = ["anchor tenant lease", "--tenant", "beta", "--group", "beta-team", "--json"]


@pytest.fixture(scope="module")
def on_postgres(tmp_path_factory: pytest.TempPathFactory, postgres_server: Any) -> tuple[Path, str]:
    """A home synced and promoted with CORPUS_REGISTRY naming a PostgreSQL database."""
    root = tmp_path_factory.mktemp("pg-home")
    write_home(root)
    url = str(postgres_server.create_database("home_registry"))
    ok(corpus(root, url, "sync"))
    ok(corpus(root, url, "promote"))
    return root, url


def test_sync_promote_and_search_with_the_registry_in_postgres(
    on_postgres: tuple[Path, str],
) -> None:
    root, url = on_postgres
    assert not (root / "home" / "registry.duckdb").exists()  # nothing wrote a DuckDB registry
    gens = json.loads(ok(corpus(root, url, "generations", "--json")).stdout)
    listed = gens["generations"]
    assert [g["status"] for g in listed] == ["ACTIVE"]
    registry = Registry(url, journal=root / "home" / JOURNAL_NAME)
    assert registry.active("deals") is not None
    assert registry.active("deals").id == listed[0]["id"]  # type: ignore[union-attr]
    checks = listed[0]["checks"]
    # every check outcome reached the registry: all passed but the eval gate (no golden set)
    assert any(name.startswith("index_rows:rows_have_tenant_and_acl") for name in checks)
    assert {n for n, c in checks.items() if not c["passed"]} == {
        "index_generation:retrieval_not_worse_than_active"
    }

    found = json.loads(ok(corpus(root, url, "search", *QUERY)).stdout)
    assert found["hits"] and all(h["tenant_id"] == "beta" for h in found["hits"])
    traces = json.loads(ok(corpus(root, url, "traces", "--json")).stdout)["traces"]
    assert traces[0]["seq"] == found["trace"]["trace_id"]  # the trace went to PostgreSQL too

    # --registry names the same database as the environment does
    flag = ["--registry", url, "--config", str(root / "corpus.yaml"), "--home", str(root / "home")]
    via_flag = ok(CliRunner().invoke(main, [*flag, "generations", "--json"]))
    assert json.loads(via_flag.stdout) == gens
    healthy = ok(corpus(root, url, "doctor"))
    assert "healthy" in healthy.output


def test_doctor_restores_an_emptied_postgres_registry_from_the_journal(
    on_postgres: tuple[Path, str], request: pytest.FixtureRequest
) -> None:
    root, url = on_postgres
    active = Registry(url, journal=root / "home" / JOURNAL_NAME).active("deals")
    assert active is not None
    empty = new_database(request)  # the registry database was lost: a new one is empty
    found = corpus(root, empty, "doctor", "--json")
    assert found.exit_code == 3, found.output
    (finding,) = json.loads(found.stdout)["findings"]
    assert finding["kind"] == "journal" and f"should serve {active.id}" in finding["problem"]
    ok(corpus(root, empty, "doctor", "--repair"))
    restored = Registry(empty, journal=root / "home" / JOURNAL_NAME).active("deals")
    assert restored is not None and restored.id == active.id
    assert json.loads(ok(corpus(root, empty, "search", *QUERY)).stdout)["hits"]


def test_the_code_location_takes_the_registry_from_corpus_registry(
    on_postgres: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from corpus_index.lifecycle import retire_choices
    from definitions import build_definitions

    root, url = on_postgres
    monkeypatch.setenv("CORPUS_CONFIG", str(root / "corpus.yaml"))
    monkeypatch.setenv("CORPUS_HOME", str(root / "home"))
    monkeypatch.setenv("CORPUS_REGISTRY", url)
    import dagster as dg

    defs = build_definitions()  # what `dagster dev` and the daemon load
    # the URL stays in the environment (the UI shows the variable's name), and a run reads it
    assert defs.resources["corpus"].registry_url == "CORPUS_REGISTRY"
    with dg.build_resources({"corpus": defs.resources["corpus"]}) as resources:
        resource = resources.corpus
        assert resource.registry_url == url  # every run's steps open this registry
        choices = retire_choices(resource.settings())  # the retire job's launchpad, read from it
    assert [c.generation for c in choices] == ["g0001"] and "ACTIVE" in choices[0].description


# -- moving a DuckDB registry into PostgreSQL ------------------------------------------------


def test_registry_copy_moves_a_duckdb_registry_into_postgres(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    write_home(tmp_path)
    ok(corpus(tmp_path, None, "sync"))
    ok(corpus(tmp_path, None, "promote"))
    searched = json.loads(ok(corpus(tmp_path, None, "search", *QUERY)).stdout)
    before = json.loads(ok(corpus(tmp_path, None, "generations", "--json")).stdout)
    home = tmp_path / "home"
    key = Registry(home / "registry.duckdb", journal=home / "j.jsonl").home_key("deletion-details")
    url = new_database(request)

    copied = json.loads(
        ok(corpus(tmp_path, None, "registry", "copy", "--to", url, "--json")).stdout
    )
    assert copied["to"] == url and copied["from"].endswith("registry.duckdb")
    assert copied["rows"]["generations"] == 1 and copied["rows"]["active_pointers"] == 1
    assert copied["rows"]["query_traces"] == 1
    # the key its deletion receipts' details are hashed under comes along: they still match
    assert Registry(url, journal=home / "j.jsonl").home_key("deletion-details") == key

    assert json.loads(ok(corpus(tmp_path, url, "generations", "--json")).stdout) == before
    again = json.loads(ok(corpus(tmp_path, url, "search", *QUERY)).stdout)
    assert [h["provenance"] for h in again["hits"]] == [h["provenance"] for h in searched["hits"]]
    assert again["trace"]["trace_id"] == searched["trace"]["trace_id"] + 1  # numbering goes on

    refused = corpus(tmp_path, None, "registry", "copy", "--to", url)
    assert refused.exit_code == 2 and "not empty" in refused.output


def test_the_sqlalchemy_spelling_of_a_url_names_the_same_registry(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """One URL can serve CORPUS_DAGSTER_POSTGRES_URL (SQLAlchemy's postgresql+psycopg2://) and
    CORPUS_REGISTRY: both spellings open the same database."""
    url = new_database(request)
    journal = tmp_path / JOURNAL_NAME
    gen = ready(Registry(url, journal=journal), SPEC)
    Registry(url, journal=journal).promote(gen)
    spelled = url.replace("postgresql://", "postgresql+psycopg2://", 1)
    active = Registry(spelled, journal=journal).active(SPEC.namespace)
    assert spelled != url and active is not None and active.id == gen


# -- the database's user and its sessions ----------------------------------------------------


@contextmanager
def owner(url: str) -> Iterator[Any]:
    """A cursor on ``url``'s database as the server's superuser (its owner), autocommitting."""
    con = psycopg2.connect(url)
    con.autocommit = True
    try:
        with con.cursor() as cur:
            yield cur
    finally:
        con.close()


def test_a_user_that_may_not_create_tables_is_told_the_grant_and_uses_tables_made_for_it(
    request: pytest.FixtureRequest, postgres_server: Any, tmp_path: Path
) -> None:
    """PostgreSQL 15 gives a database's non-owner no CREATE on schema public: the registry
    names the database and the grant it needs (exit 2, no traceback); once the owner made the
    tables and granted their use, it works without creating anything."""
    url = new_database(request)
    with owner(url) as cur:
        cur.execute(
            "DO $$BEGIN CREATE ROLE registry_user LOGIN; "
            "EXCEPTION WHEN duplicate_object THEN NULL; END$$"
        )
    limited = url.replace(f"//{postgres_server.user}@", "//registry_user@", 1)
    write_home(tmp_path)
    refused = corpus(tmp_path, limited, "generations")
    assert refused.exit_code == 2, refused.output
    assert url.rsplit("/", 1)[1] in refused.output
    assert "GRANT CREATE ON SCHEMA public TO registry_user" in refused.output

    Registry(url, journal=tmp_path / JOURNAL_NAME).generations()  # the owner creates them
    with owner(url) as cur:
        cur.execute(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO registry_user"
        )
    listed = ok(corpus(tmp_path, limited, "generations", "--json"))
    assert json.loads(listed.stdout)["generations"] == []


def end_sessions(url: str) -> None:
    """End the registry's sessions on ``url``'s database, as a restart or a failover does."""
    with owner(url) as cur:
        cur.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = 'corpus-index registry'"
        )
        for _ in range(100):  # the sessions end shortly after they are told to
            cur.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name = 'corpus-index registry'"
            )
            if cur.fetchone() == (0,):
                break
            time.sleep(0.05)


def test_a_kept_connection_lost_to_a_database_restart_is_opened_again(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A long-lived process (`corpus serve`, the code location's sensors) keeps one connection
    per thread: after the database restarted, its next read and its next write run on a new
    connection instead of failing once."""
    url = new_database(request)
    reg = Registry(url, journal=tmp_path / JOURNAL_NAME)
    gen = ready(reg, SPEC)
    reg.promote(gen)
    assert reg.active(SPEC.namespace).id == gen  # type: ignore[union-attr]
    end_sessions(url)
    assert reg.active(SPEC.namespace).id == gen  # type: ignore[union-attr]
    end_sessions(url)
    other = ready(reg, dataclasses.replace(SPEC, profile="other", backend_spec="hash:v2-8", dim=8))
    assert [g.id for g in reg.generations()] == [gen, other]


def table_files(server: Any, url: str, table: str) -> bytes:
    """The bytes of ``table``'s files and its TOAST table's, as the server has them on disk
    (after a checkpoint, so no page is only in its memory)."""
    with owner(url) as cur:
        cur.execute("CHECKPOINT")
        cur.execute(
            "SELECT pg_relation_filepath(c.oid), pg_relation_filepath(c.reltoastrelid)"
            " FROM pg_class c WHERE c.oid = to_regclass(%s)",
            (table,),
        )
        paths = [p for p in cur.fetchone() if p]
    out = b""
    for rel in paths:
        for segment in sorted(Path(server.data_dir).glob(f"{rel}*")):
            if segment.name.split(".")[0] == Path(rel).name and "_" not in segment.name:
                out += segment.read_bytes()  # the table's segments, not its free-space map
    return out


def test_a_deletion_rewrites_the_traces_table_so_no_file_of_it_holds_the_quoted_words(
    request: pytest.FixtureRequest, postgres_server: Any, tmp_path: Path
) -> None:
    """PostgreSQL keeps a deleted row in its page until the space is reused: the deletion that
    takes out a trace quoting the source rewrites the traces table (VACUUM FULL), so no file
    of it holds the quoted words; the receipt says so and the audit names no pages."""
    gone = tmp_path / "sources" / "alpha" / "deal-alpha-001.uw.md"
    write_home(tmp_path)
    quoted = give_words_of_its_own(gone, seed="traced", words=40)
    url = new_database(request)
    ok(corpus(tmp_path, url, "sync"))
    ok(corpus(tmp_path, url, "promote"))
    ok(corpus(tmp_path, url, "search", quoted, "--tenant", "alpha", "--group", "alpha-uw"))
    ok(corpus(tmp_path, url, "search", *QUERY))
    needle = quoted.encode("utf-8")[:48]
    assert needle in table_files(postgres_server, url, "query_traces")  # the reading sees it
    gone.unlink()
    ok(corpus(tmp_path, url, "sync"))
    traces = json.loads(ok(corpus(tmp_path, url, "traces", "--json")).stdout)["traces"]
    assert [t["query"] for t in traces] == [QUERY[0]]  # the other trace is kept
    assert needle not in table_files(postgres_server, url, "query_traces")
    tomb = Registry(url, journal=tmp_path / "home" / JOURNAL_NAME).tombstone(
        "alpha-deals/deal-alpha-001"
    )
    assert tomb is not None
    receipt = json.loads(Path(tomb["receipt"]).read_text())
    (artifact,) = [a for a in receipt["artifacts"] if a["location"] == "query_traces"]
    assert artifact["rows"] == 1 and artifact["pages"] == "rewritten"
    audit = corpus(tmp_path, url, "audit-deletion", "alpha-deals/deal-alpha-001", "--json")
    assert not [r for r in json.loads(audit.stdout)["remaining"] if r["store"] == "registry"]


def test_traces_a_registry_user_may_not_rewrite_are_named_until_the_owner_does(
    request: pytest.FixtureRequest, postgres_server: Any, tmp_path: Path
) -> None:
    """VACUUM FULL needs the table's owner: a registry user that only uses the tables made for
    it takes the traces out, is told who must rewrite the table, and the pages count as left
    until the owner has (the table's file node changes)."""
    url = new_database(request)
    with owner(url) as cur:
        cur.execute(
            "DO $$BEGIN CREATE ROLE registry_user LOGIN; "
            "EXCEPTION WHEN duplicate_object THEN NULL; END$$"
        )
    TraceStore(Registry(url, journal=tmp_path / JOURNAL_NAME)).recent()  # the owner makes them
    with owner(url) as cur:
        cur.execute(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO registry_user"
        )
        cur.execute("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO registry_user")
    limited = url.replace(f"//{postgres_server.user}@", "//registry_user@", 1)
    traces = TraceStore(Registry(limited, journal=tmp_path / JOURNAL_NAME))
    for query in ("quarry blasting cracked the slab", "anchor tenant lease"):
        traces.record(query=query, tenant="alpha", groups=["alpha-uw"], hits=0, trace={})
    assert traces.forget(lambda text: "quarry" in text) == 1
    left = traces.clear_pages()
    assert left["pages"] == "left" and f"owner ({postgres_server.user})" in left["why"]
    assert b"quarry blasting" in table_files(postgres_server, url, "query_traces")
    assert traces.pages_left(left)
    with owner(url) as cur:
        cur.execute("VACUUM FULL query_traces")
    assert not traces.pages_left(left)
    assert b"quarry blasting" not in table_files(postgres_server, url, "query_traces")
