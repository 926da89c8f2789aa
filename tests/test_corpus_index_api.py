"""RFC 0013's CorpusIndex: add, query (text or vector, with filters) and remove.

One end-to-end test drives the real Dagster runner (``definitions.dagster_runner()``, as
``corpus sync`` does); the others inject a runner whose sync runs the same library steps
in-process, which is faster.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from corpus_index.api import CorpusHit, CorpusIndex
from corpus_index.config import Settings
from corpus_index.errors import (
    ConfigError,
    IncompatibleEmbedderError,
    IndexUpdateError,
    InvalidFilterError,
    ParseError,
    SidecarError,
)
from corpus_index.filters import CorpusFilter, Geo
from corpus_index.search import Principal
from corpus_index.sidecars import SidecarEntry, build_sidecar
from tests.corpusgen import deal_text
from tests.searchkit import active, build_home

ALPHA = Principal("alpha", ("alpha-uw", "alpha-credit"))
BETA = Principal("beta", ("beta-team",))
FLOOD = "A levee breach flooded the parking garage and the insurer cancelled the flood policy."


def new_deal(deal_id: str = "DEAL-ALPHA-NEW", **kwargs: Any) -> str:
    defaults: dict[str, Any] = {
        "tenant": "alpha",
        "acl": ["alpha-uw"],
        "risk": FLOOD,
        "metro": "Tucson",
        "units": 77,
    }
    return deal_text(deal_id, **{**defaults, **kwargs})


@pytest.mark.slow
def test_add_query_remove_through_the_dagster_sync(home: Settings, tmp_path: Path) -> None:
    from definitions import dagster_runner

    index = CorpusIndex(home, principal=ALPHA, runner=dagster_runner())
    path = tmp_path / "deal-alpha-new.uw.md"
    path.write_text(new_deal())
    # a brand-new home: add runs the sync and promotes the first generation
    assert index.add(path) == "alpha-deals/deal-alpha-new"
    assert (home.home / ".." / "sources" / "alpha" / "deal-alpha-new.uw.md").resolve().is_file()
    hits = index.query("levee breach flooded garage", k=3)
    assert hits and all(isinstance(h, CorpusHit) for h in hits)
    assert hits[0].deal_id == "DEAL-ALPHA-NEW" and hits[0].section == "risk_assessment"
    assert hits[0].content_hash.startswith("sha256:") and "levee" in (hits[0].excerpt or "")
    assert [f.name for f in dataclasses.fields(CorpusHit)] == [
        "deal_id",
        "section",
        "content_hash",
        "score",
        "excerpt",
    ]
    # another tenant never sees it, even asking for it by its words
    beta = CorpusIndex(home, principal=BETA)
    assert "DEAL-ALPHA-NEW" not in {
        h.deal_id for h in beta.query("levee breach flooded garage", k=50)
    }
    assert beta.remove("DEAL-ALPHA-NEW") is False
    # remove takes it out of the ACTIVE generation and leaves the file
    assert index.remove("DEAL-ALPHA-NEW") is True
    assert (home.home / ".." / "sources" / "alpha" / "deal-alpha-new.uw.md").resolve().is_file()
    assert "DEAL-ALPHA-NEW" not in {
        h.deal_id for h in index.query("levee breach flooded garage", k=50)
    }
    assert index.remove("DEAL-ALPHA-NEW") is False


# -- faster: the same library steps, in-process ----------------------------------------------


@dataclasses.dataclass
class Report:
    ok: bool = True
    failed_runs: list[dict[str, Any]] = dataclasses.field(default_factory=list)


class LibraryRunner:
    """Syncs with the library steps in-process (``build_home``); ``report`` overrides the result."""

    def __init__(self, report: Report | None = None) -> None:
        self.report = report

    def sync(
        self, settings: Settings, *, progress: Any = None, retry_refused: bool = False
    ) -> Report:
        if self.report is not None:
            return self.report
        build_home(settings, promote=False)
        return Report()


@pytest.fixture
def built(home: Settings) -> Settings:
    build_home(home)
    return home


def test_add_bytes_then_query_with_filters_and_vectors(built: Settings) -> None:
    index = CorpusIndex(built, principal=ALPHA, runner=LibraryRunner())
    assert index.add(new_deal().encode()) == "alpha-deals/deal-alpha-new"
    hits = index.query(
        "levee flooded garage insurer", k=5, filters=CorpusFilter(geo=Geo(metro="Tucson"))
    )
    assert {h.deal_id for h in hits} == {"DEAL-ALPHA-NEW"}
    assert index.query("levee", filters={"units": {">": 100}}) == []
    with pytest.raises(InvalidFilterError, match="unknown filter key"):
        index.query("levee", filters={"colour": "red"})
    # a vector query is dense: the deal's own risk vector finds its risk block first
    from corpus_index.home import Home

    corpus = Home(built)
    gen = active(corpus)
    rows = corpus.store.table(gen).search().where("deal_id = 'DEAL-ALPHA-NEW'").limit(10).to_list()
    risk = next(r for r in rows if r["section"] == "risk_assessment")
    [first, *_] = index.query(np.asarray(risk["vector"]), k=3)
    assert (first.deal_id, first.section) == ("DEAL-ALPHA-NEW", "risk_assessment")
    assert first.score == pytest.approx(1.0, abs=1e-5)
    assert first.content_hash == risk["content_hash"]


def test_add_replaces_a_changed_file(built: Settings) -> None:
    index = CorpusIndex(built, principal=ALPHA, runner=LibraryRunner())
    index.add(new_deal().encode())
    index.add(new_deal(risk="Termites ate the wooden stairs in every building.").encode())
    lexical = CorpusIndex(built, principal=ALPHA, mode="lexical", runner=LibraryRunner())
    assert [h.deal_id for h in lexical.query("termites wooden stairs")] == ["DEAL-ALPHA-NEW"]
    assert lexical.query("levee breach") == []  # the old version's rows are gone


def test_add_refuses_files_outside_the_principals_scope(built: Settings, tmp_path: Path) -> None:
    index = CorpusIndex(built, principal=ALPHA, runner=LibraryRunner())
    with pytest.raises(ParseError, match="differs from the collection's tenant"):
        index.add(new_deal(tenant="beta", acl=["beta-team"]).encode())
    with pytest.raises(ParseError, match="may only narrow"):
        index.add(new_deal(acl=["beta-team"]).encode())
    with pytest.raises(ParseError, match=r"must be named \*\.uw\.md"):
        (tmp_path / "deal.md").write_text(new_deal())
        index.add(tmp_path / "deal.md")
    with pytest.raises(ParseError, match="front matter"):
        index.add(b"no front matter here")
    # an existing deal under another file name
    with pytest.raises(ParseError, match="already indexed from"):
        (tmp_path / "copy.uw.md").write_text(
            (built.config_path.parent / "sources" / "alpha" / "deal-alpha-000.uw.md").read_text()
        )
        index.add(tmp_path / "copy.uw.md")
    with pytest.raises(ConfigError, match="has no uw_deals collection"):
        CorpusIndex(built, principal=Principal("alpha", ("nobody",)), runner=LibraryRunner()).add(
            new_deal().encode()
        )
    with pytest.raises(ConfigError, match="is not a uw_deals collection"):
        CorpusIndex(built, principal=ALPHA, collection="beta-deals", runner=LibraryRunner()).add(
            new_deal().encode()
        )
    assert not (built.config_path.parent / "sources" / "alpha" / "deal-alpha-new.uw.md").exists()


def test_add_checks_a_sidecar_and_embeds_its_stale_entries(built: Settings) -> None:
    index = CorpusIndex(built, principal=ALPHA, runner=LibraryRunner())

    def sidecar(model: str, dim: int, deal: str = "DEAL-ALPHA-NEW") -> dict[str, Any]:
        entry = SidecarEntry(
            "risk_assessment", "risk_assessment/0", "sha256:" + "0" * 64, [0.5] * dim
        )
        return build_sidecar(
            uw_version="1.1",
            deal_id=deal,
            backend_spec=model,
            dim=dim,
            input_format="default-v1",
            entries=[entry],
        )

    with pytest.raises(IncompatibleEmbedderError, match="text-embedding-3-small"):
        index.add(new_deal().encode(), embeddings=sidecar("openai:text-embedding-3-small", 4))
    with pytest.raises(SidecarError, match=r"\$\.deal_id: the sidecar is for deal 'DEAL-OTHER'"):
        index.add(new_deal().encode(), embeddings=sidecar("hash:v1-64", 64, deal="DEAL-OTHER"))
    assert index.add(new_deal().encode(), embeddings=sidecar("hash:v1-64", 64))
    assert [p.stale for p in index.placed] == [["risk_assessment/0"]]  # its pin is not the block's


def test_remove_only_within_the_principals_collections(built: Settings) -> None:
    source = built.config_path.parent / "sources" / "alpha" / "deal-alpha-001.uw.md"
    beta = CorpusIndex(built, principal=BETA, runner=LibraryRunner())
    assert beta.remove("DEAL-ALPHA-001") is False and source.is_file()
    alpha = CorpusIndex(built, principal=ALPHA, runner=LibraryRunner())
    before = {h.deal_id for h in alpha.query("roofs anchor windstorm sponsor", k=50)}
    assert "DEAL-ALPHA-001" in before
    assert alpha.remove("deal-alpha-001") is True and source.is_file()  # the file stays
    after = {h.deal_id for h in alpha.query("roofs anchor windstorm sponsor", k=50)}
    assert after == before - {"DEAL-ALPHA-001"}
    assert alpha.remove("DEAL-ALPHA-001") is False


CREDIT = Principal("alpha", ("alpha-credit",))  # writes alpha-deals, sees no alpha-uw deal
SECRET = "Sponsor under investigation for fraud."


def test_a_deal_the_principal_may_not_see_is_neither_removed_nor_replaced_nor_named(
    home: Settings,
) -> None:
    """A deal whose file narrows its ACL to alpha-uw is another principal's to credit, who
    may write the collection: remove() and add() act as if it were not there, name no path,
    and replace nothing, not even once the file is broken (its last indexed scope holds)."""
    sources = home.config_path.parent / "sources" / "alpha"
    secret = sources / "deal-alpha-secret.uw.md"
    secret.write_text(new_deal("DEAL-ALPHA-SECRET", acl=["alpha-uw"], risk=SECRET))
    build_home(home)
    underwriting = CorpusIndex(home, principal=Principal("alpha", ("alpha-uw",)))
    credit = CorpusIndex(home, principal=CREDIT, runner=LibraryRunner())
    assert "DEAL-ALPHA-SECRET" in {h.deal_id for h in underwriting.query(SECRET, k=50)}
    assert "DEAL-ALPHA-SECRET" not in {h.deal_id for h in credit.query(SECRET, k=50)}
    written = secret.read_text()
    assert credit.remove("DEAL-ALPHA-SECRET") is False  # as for a deal that does not exist
    # the same id under another name, or the same name: refused without the hidden path
    for name in ("other-name.uw.md", "deal-alpha-secret.uw.md"):
        mine = home.config_path.parent / name
        mine.write_text(new_deal("DEAL-ALPHA-SECRET", acl=["alpha-credit"]))
        with pytest.raises(ParseError, match="not free") as refused:
            credit.add(mine)
        assert str(secret) not in str(refused.value)
    secret.write_text("not a deal file any more")  # broken: indexed as alpha-uw's still
    with pytest.raises(ParseError, match="not free"):
        credit.add(mine)
    assert secret.read_text() == "not a deal file any more"
    secret.write_text(written)
    assert "DEAL-ALPHA-SECRET" in {h.deal_id for h in underwriting.query(SECRET, k=50)}
    # a deal credit may see (of both groups) is removed as before
    assert credit.remove("DEAL-ALPHA-002") is True


def test_finding_a_deals_files_reads_them_as_the_scan_does(home: Settings, tmp_path: Path) -> None:
    """remove() and add() look for a deal's files by their front matter: a FIFO among them is
    never opened (it hung them), a symlink out of the root is not followed, and a file saved
    with a byte order mark is read as indexed."""
    sources = home.config_path.parent / "sources" / "alpha"
    os.mkfifo(sources / "pipe.uw.md")
    outside = tmp_path / "elsewhere.uw.md"
    outside.write_text(new_deal("DEAL-OUTSIDE"))
    (sources / "link.uw.md").symlink_to(outside)
    bom = sources / "with-bom.uw.md"
    bom.write_bytes(b"\xef\xbb\xbf" + new_deal("DEAL-BOM").encode())
    build_home(home)
    index = CorpusIndex(home, principal=ALPHA, runner=LibraryRunner())
    removed: list[bool] = []
    worker = threading.Thread(
        target=lambda: removed.extend(index.remove(d) for d in ("DEAL-OUTSIDE", "DEAL-BOM"))
    )
    worker.start()
    worker.join(30)
    hung = worker.is_alive()
    while worker.is_alive():  # a writer lets each blocked open return, so the test ends
        with contextlib.suppress(OSError):  # ENXIO: no reader waits just now
            os.close(os.open(sources / "pipe.uw.md", os.O_WRONLY | os.O_NONBLOCK))
        worker.join(0.1)
    assert not hung, "remove() opened the FIFO and waited for a writer"
    assert removed == [False, True]  # the outside file is no deal of this collection's


def test_a_failed_sync_is_an_error(built: Settings) -> None:
    failing = Report(ok=False, failed_runs=[{"job": "embed_job", "partition": "main/alpha-deals"}])
    index = CorpusIndex(built, principal=ALPHA, runner=LibraryRunner(failing))
    with pytest.raises(IndexUpdateError, match="embed_job"):
        index.add(new_deal().encode())


def test_query_records_traces_unless_told_not_to(built: Settings) -> None:
    from corpus_index.registry import open_registry
    from corpus_index.traces import TraceStore

    store = TraceStore(open_registry(built))
    before = store.count()
    CorpusIndex(built, principal=ALPHA).query("roofs")
    CorpusIndex(built, principal=ALPHA, record_traces=False).query("roofs")
    assert store.count() == before + 1
