"""RFC 0013's ``CorpusIndex`` (``add``, ``query``, ``remove``) over a corpus-index home.

``add`` and ``remove`` change a ``uw_deals`` collection folder and run the pipeline through the
injected ``PipelineRunner`` (by default the installed one: the same Dagster runs ``corpus sync``
starts, so they show in the UI); ``query`` is a search as one principal. The runner is loaded
only when ``add``/``remove`` run, so this module keeps the library free of Dagster.

Differences from the RFC's TypeScript sketch, on purpose:

- ``add`` takes the file (a path or its bytes) and optionally its sidecar (a path or the
  loaded document). The sidecar must name the namespace's model; its entries are marked
  ``stale`` against the file's blocks and stored where the profile's sidecars live, and the
  sync takes the current entries' vectors from it and embeds only the stale blocks
  (``sidecar_import``).
- ``remove`` takes the deal out of every generation (a tombstone) but leaves its file where it
  is; the scan passes over the file until it is added again. It returns whether a document
  was removed ("not found" is a value, not an error).
- Every call acts as a principal (tenant + groups): a principal may only add to and remove from
  collections of its own tenant that share one of its groups.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc

from corpus_index.config import CollectionConfig, Settings
from corpus_index.deletion import WITHDRAWN
from corpus_index.errors import (
    ConfigError,
    IncompatibleEmbedderError,
    IndexUpdateError,
    ParseError,
    SidecarError,
)
from corpus_index.filters import FilterSpec
from corpus_index.home import Home
from corpus_index.kinds import kind_of
from corpus_index.kinds.base import narrowed_scope, utf8_text
from corpus_index.kinds.uw_deals import SUFFIX, UW_DEALS, parse_text
from corpus_index.records import SourceDoc
from corpus_index.registry import open_registry
from corpus_index.runner import PipelineRunner, SyncOutcome, load_runner
from corpus_index.search import Principal, Searcher
from corpus_index.shards import partition_key, shard_of
from corpus_index.sidecar_import import PlacedSidecar, embedder_mismatch, place_given_sidecar
from corpus_index.sidecars import read_sidecar, validate_sidecar
from corpus_index.traces import TraceStore

_SAFE_NAME = re.compile(r"[^a-z0-9._-]+")


@dataclass(frozen=True, slots=True)
class CorpusHit:
    """RFC 0013 ``CorpusHit``."""

    deal_id: str
    section: str
    content_hash: str
    score: float
    excerpt: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "deal_id": self.deal_id,
            "section": self.section,
            "content_hash": self.content_hash,
            "score": self.score,
            "excerpt": self.excerpt,
        }


class CorpusIndex:
    """RFC 0013 ``CorpusIndex`` for one principal over one namespace of a home."""

    def __init__(
        self,
        settings: Settings,
        *,
        principal: Principal,
        namespace: str | None = None,
        collection: str | None = None,
        mode: str = "hybrid",
        record_traces: bool = True,
        runner: PipelineRunner | None = None,
    ) -> None:
        """
        Args:
            settings: the home and its configuration.
            principal: who acts; every call is scoped to its tenant and groups.
            namespace: the namespace to query (default: the principal's tenant's).
            collection: the ``uw_deals`` collection ``add`` writes to (default: the only one of
                the principal's tenant in the namespace).
            mode: search mode of ``query`` for text (``dense``, ``lexical``, ``hybrid``).
            record_traces: store a trace of each query in the registry.
            runner: what updates the index after a file changed (default: the installed
                runner, ``corpus_index.runner.load_runner()``: the Dagster one).
        """
        self.settings = settings
        self.principal = principal
        self.corpus = Home(settings)
        traces = TraceStore(open_registry(settings, lock_timeout_s=5.0)) if record_traces else None
        self.searcher = Searcher(self.corpus, traces=traces)
        self.namespace = namespace or self.searcher.default_namespace(principal)
        self.mode = mode
        self._collection = collection
        self._runner = runner
        # where the last ``add`` stored the sidecar it was given, and its stale entries
        self.placed: list[PlacedSidecar] = []

    # -- RFC API ---------------------------------------------------------------------------

    def add(
        self,
        file: str | os.PathLike[str] | bytes,
        embeddings: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    ) -> str:
        """Add (or replace) one underwriting file and update the index; returns its source_id.

        Args:
            file: a ``.uw.md`` path, or the file's bytes.
            embeddings: an optional RFC 0013 sidecar for the file (its path, or the loaded
                document). It must name the namespace's model; the vectors of its entries
                still pinned to the file's blocks are used, the others are marked
                ``stale: true`` and embedded anew.

        Raises:
            ParseError: the file is not a valid underwriting file for the collection.
            SidecarError / IncompatibleEmbedderError: the sidecar is invalid or names another model.
            ConfigError: no collection the principal may write to.
            IndexUpdateError: the sync run failed (the file stays; fix it and sync again).
        """
        collection = self._target_collection()
        raw, name = _read_file(file)
        doc_id = name[: -len(SUFFIX)]
        source = SourceDoc(doc_id=doc_id, path=name, raw=raw, size=len(raw), mtime=0.0)
        # raises ParseError with the line
        blocks = kind_of(collection).parse(collection, source, "0" * 16)
        deal_id = str(blocks[0].metadata["deal_id"]) if blocks else doc_id
        sidecar, self.placed = None, []
        if embeddings is not None:
            sidecar = self._check_sidecar(embeddings, deal_id)
        existing = self._files_of(deal_id, [collection])
        target = collection.path / name
        taken = ParseError(name, f"deal id {deal_id} is not free in collection {collection.name!r}")
        # a file the principal may not see is neither named nor replaced, withdrawn or not
        if target.exists() and not self._may_see_file(collection, target):
            raise taken
        for path, visible in existing:
            if not visible:
                raise taken
            if path != target:
                raise ParseError(
                    str(target),
                    f"deal {deal_id} is already indexed from {path}; remove it first or add the "
                    "file under that name",
                )
        collection.path.mkdir(parents=True, exist_ok=True)
        source_id = f"{collection.name}/{doc_id}"
        if sidecar is not None:
            current = {
                b.block_key: b.content_hash
                for b in blocks
                if b.section in self.corpus.config.sections
            }
            self.placed = place_given_sidecar(
                self.corpus, collection.name, doc_id, current, sidecar
            )
        _atomic_write(target, raw)
        if source_id in self.corpus.registry.tombstoned(collection.name, WITHDRAWN):
            self.corpus.registry.lift_tombstones([source_id])  # added again: scanned again
        self._update()
        return source_id

    def query(
        self,
        text: str | Sequence[float] | np.ndarray,
        k: int = 10,
        filters: FilterSpec = None,
    ) -> list[CorpusHit]:
        """The top ``k`` hits for a text (hybrid by default) or a vector (dense).

        Raises:
            InvalidFilterError, InvalidQueryError, MissingGenerationError,
            DimensionMismatchError: see ``Searcher.search``.
        """
        if isinstance(text, str):
            result = self.searcher.search(
                text,
                principal=self.principal,
                k=k,
                namespace=self.namespace,
                mode=self.mode,
                filters=filters,
            )
        else:
            result = self.searcher.search(
                "",
                principal=self.principal,
                k=k,
                namespace=self.namespace,
                mode="dense",
                filters=filters,
                vector=np.asarray(text, dtype=np.float32),
            )
        return [
            CorpusHit(
                deal_id=h.deal_id or h.doc_id,
                section=h.section,
                content_hash=h.provenance.content_hash,
                score=h.score,
                excerpt=h.excerpt,
            )
            for h in result.hits
        ]

    def contexts(
        self,
        text: str,
        k: int = 5,
        *,
        as_of: dt.datetime | None = None,
        units: bool = False,
        filters: FilterSpec = None,
    ) -> dict[str, Any]:
        """Group-first search of a messages namespace (whole conversations, incidents with
        their shift notes, questions with their answers), as the JSON ``corpus search
        --json`` prints: ``{query, analysis, results: {category: [record]}, total_hits,
        trace}``. See :func:`corpus_index.group_search.search_contexts`."""
        from corpus_index.group_search import search_contexts

        return search_contexts(
            self.searcher,
            text,
            principal=self.principal,
            k=k,
            namespace=self.namespace,
            as_of=as_of,
            mode=self.mode,
            filters=filters,
            units=units,
        ).to_json()

    def person(self, name: str, *, limit: int = 50) -> dict[str, Any]:
        """Everything the principal may see about one person of its tenant, as ``corpus
        person --json`` prints it (``person`` null when the name names nobody)."""
        from corpus_index.person_search import person_contexts

        return person_contexts(
            self.searcher, name, principal=self.principal, namespace=self.namespace, limit=limit
        ).to_json()

    def remove(self, deal_id: str) -> bool:
        """Remove the deal from the index: its rows leave every generation, its sidecars and
        warehouse rows go, and a tombstone records it (DESIGN §8); its source file stays
        where it is, and the scan passes over it until ``add`` brings it back.

        Returns:
            False when no indexed file of that deal that the principal may see (its tenant,
            and an ACL group in common with the file's own, as search reads it) is in a
            collection the principal may write to.

        Raises:
            IndexUpdateError: the sync run failed (the deal stays withdrawn; sync again).
        """
        stones = []
        for c in self._writable_collections():
            for path, visible in self._files_of(deal_id, [c]):
                if not visible:
                    continue  # as if it were not there: it is another principal's
                doc_id = path.relative_to(c.path).as_posix()[: -len(SUFFIX)]
                stones.append(
                    {
                        "source_id": f"{c.name}/{doc_id}",
                        "collection": c.name,
                        "namespace": c.namespace,
                        "reason": WITHDRAWN,
                    }
                )
        if not stones:
            return False
        self.corpus.registry.add_tombstones(stones)
        self._update()
        return True

    def sync(self, *, retry_refused: bool = False) -> SyncOutcome:
        """Run the pipeline for every configured collection, as ``corpus sync`` does (no
        generation is promoted; ``add`` and ``remove`` promote a namespace's first one).

        Args:
            retry_refused: send again the inputs an embedder's server refused before, which
                syncs otherwise hold back unasked until their text or the model changes
                (``corpus sync --retry-refused``); the ones the server now takes are indexed
                and forgotten, the ones it refuses again stay held.

        Returns:
            What the sync did (``ok``, ``embedded``, ``to_json()`` with ``refused_inputs``
            and ``refused`` as ``corpus sync --json`` prints them).

        Raises:
            IndexUpdateError: a run of the sync failed (its failed runs are named).
        """
        report = self.runner.sync(self.settings, retry_refused=retry_refused)
        if not report.ok:
            raise IndexUpdateError(f"the index update failed: {report.failed_runs}")
        return report

    # -- helpers ---------------------------------------------------------------------------

    def _writable_collections(self) -> list[CollectionConfig]:
        groups = set(self.principal.groups)
        return [
            c
            for c in self.corpus.config.collections_in(self.namespace)
            if kind_of(c).writable
            and c.tenant == self.principal.tenant
            and groups.intersection(c.acl_groups)
        ]

    def _target_collection(self) -> CollectionConfig:
        writable = self._writable_collections()
        if self._collection is not None:
            for c in writable:
                if c.name == self._collection:
                    return c
            raise ConfigError(
                f"collection {self._collection!r} is not a uw_deals collection of namespace "
                f"{self.namespace!r} that tenant {self.principal.tenant!r} with groups "
                f"{', '.join(self.principal.groups) or '(none)'} may write to"
            )
        if len(writable) == 1:
            return writable[0]
        if not writable:
            raise ConfigError(
                f"tenant {self.principal.tenant!r} with groups "
                f"{', '.join(self.principal.groups) or '(none)'} has no uw_deals collection in "
                f"namespace {self.namespace!r} to write to"
            )
        raise ConfigError(
            f"tenant {self.principal.tenant!r} may write to {len(writable)} collections "
            f"({', '.join(c.name for c in writable)}); pass collection=..."
        )

    def _files_of(
        self, deal_id: str, collections: list[CollectionConfig]
    ) -> list[tuple[Path, bool]]:
        """Indexed files (not withdrawn) whose front-matter deal_id (or file name) is
        ``deal_id``, each with whether the principal may see it (:meth:`_may_see_file`)."""
        wanted = {deal_id, deal_id.lower(), deal_id.upper()}
        found: list[tuple[Path, bool]] = []
        for c in collections:
            if not c.path.is_dir():
                continue
            withdrawn = self.corpus.registry.tombstoned(c.name, WITHDRAWN)
            for path in sorted(c.path.rglob(f"*{SUFFIX}")):
                rel = path.relative_to(c.path).as_posix()[: -len(SUFFIX)]
                if f"{c.name}/{rel}" in withdrawn:
                    continue
                front = _front_matter(c, path)
                named = path.name[: -len(SUFFIX)] in wanted
                if named or (front is not None and str(front.get("deal_id")) in wanted):
                    found.append((path, self._may_see_file(c, path, front)))
        return found

    def _may_see_file(
        self, collection: CollectionConfig, path: Path, front: Mapping[str, Any] | None = None
    ) -> bool:
        """Whether the principal may see the deal file ``path`` of ``collection``: its tenant,
        and an ACL group in common with the file's (the collection's, narrowed by its front
        matter, as indexing reads it). A file whose scope cannot be read from it (unreadable,
        or not a valid deal file) has the scope its last good blocks were indexed with, and
        none (no one's to see) if it was never indexed."""
        if collection.tenant != self.principal.tenant:
            return False
        front = front if front is not None else _front_matter(collection, path)
        groups: tuple[str, ...] = ()
        try:
            if front is not None:
                groups, _ = narrowed_scope(str(path), collection, front, collection.tier, line=2)
        except ParseError:
            front = None
        if front is None:
            groups = self._indexed_groups(collection, path)
        return bool(set(groups) & set(self.principal.groups))

    def _indexed_groups(self, collection: CollectionConfig, path: Path) -> tuple[str, ...]:
        """The ACL groups the deal file ``path`` was last indexed with (its parsed blocks in
        the warehouse); none when it never was."""
        doc_id = path.relative_to(collection.path).as_posix()[: -len(SUFFIX)]
        source_id = f"{collection.name}/{doc_id}"
        key = partition_key(
            collection.name, shard_of(source_id, collection.shards), collection.shards
        )
        blocks = self.corpus.warehouse.read(
            "parsed_blocks",
            (key,),
            where=pc.field("source_id") == source_id,
            columns=["tenant_id", "acl_groups"],
        )
        if blocks is None or not blocks.num_rows:
            return ()
        if blocks["tenant_id"][0].as_py() != self.principal.tenant:
            return ()
        return tuple(blocks["acl_groups"][0].as_py() or ())

    def _check_sidecar(
        self, embeddings: Mapping[str, Any] | str | os.PathLike[str], deal_id: str
    ) -> dict[str, Any]:
        """The sidecar, validated, for this deal and from a model of the namespace."""
        if isinstance(embeddings, Mapping):
            source = "embeddings"
            sidecar = dict(embeddings)
            validate_sidecar(sidecar, source=source)
        else:
            source = os.fspath(embeddings)
            sidecar = read_sidecar(Path(source))
        problems = [
            embedder_mismatch(sidecar, self.corpus.spec(p.name))
            for p in self.corpus.config.profiles_in(self.namespace)
        ]
        if all(problems):
            raise IncompatibleEmbedderError(
                f"{source}: the sidecar's vectors cannot stand for namespace "
                f"{self.namespace!r}'s: {'; '.join(p for p in problems if p)}"
            )
        if str(sidecar.get("deal_id")) != deal_id:
            raise SidecarError(
                "$.deal_id",
                f"the sidecar is for deal {sidecar.get('deal_id')!r}, not {deal_id!r}",
                source=source,
            )
        return sidecar

    @property
    def runner(self) -> PipelineRunner:
        """The pipeline runner, loaded on first use."""
        if self._runner is None:
            self._runner = load_runner()
        return self._runner

    def _update(self) -> None:
        self.sync()
        if self.corpus.registry.active(self.namespace) is None:
            self._promote_first_generation()

    def _promote_first_generation(self) -> None:
        """A brand-new index has no ACTIVE generation yet: promote the one just built."""
        outcome = self.runner.promote(self.settings, self.namespace, "")
        if not outcome.success:
            raise IndexUpdateError(
                f"the first generation of namespace {self.namespace!r} was not promoted: "
                f"{outcome.error or 'see the run in the Dagster UI'}"
            )


def _read_file(file: str | os.PathLike[str] | bytes) -> tuple[bytes, str]:
    """The file's bytes and the name to store it under (``<doc>.uw.md``)."""
    if isinstance(file, bytes):
        from corpus_index.kinds import uw_deals as uw

        front, _ = uw.parse_text("<bytes>", file.decode("utf-8"))
        deal = str(front.get("deal_id") or "")
        slug = _SAFE_NAME.sub("-", deal.lower()).strip("-.")
        if not slug:
            raise ParseError("<bytes>", "front matter has no deal_id to name the file by", line=2)
        return file, f"{slug}{SUFFIX}"
    path = Path(file)
    if not path.name.endswith(SUFFIX):
        raise ParseError(str(path), f"an underwriting file must be named *{SUFFIX}")
    return path.read_bytes(), path.name


def _front_matter(collection: CollectionConfig, path: Path) -> dict[str, Any] | None:
    """A deal file's front matter, read as a scan reads the file (a FIFO never opened, a
    symlink out of the root not followed, the collection's limits, a byte order mark
    dropped); None when the file may not or cannot be read, or parsed."""
    try:
        doc = UW_DEALS.load_document(collection, path.name, str(path))
        front, _ = parse_text(doc.path, utf8_text(doc), limits=collection.limits)
    except (OSError, ParseError):
        return None
    return front


def _atomic_write(target: Path, raw: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
