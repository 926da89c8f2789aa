"""The ``sidecars`` step: RFC 0013 sidecars, one per document and profile, and the machinery
that decides which are due (pins recorded per document in ``sidecar_pins``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from corpus_index import memory
from corpus_index.embedding import vector_matrix
from corpus_index.errors import SidecarError
from corpus_index.hashing import canonical_json, sha256_hex
from corpus_index.home import Home
from corpus_index.kinds import kind_of
from corpus_index.ordered import DocCursor, whole_documents
from corpus_index.records import BLOCK_SCHEMA, INPUT_SCHEMA
from corpus_index.refusals import read_refusals
from corpus_index.registry import GenerationSpec
from corpus_index.sidecar_places import sidecar_folder
from corpus_index.sidecars import (
    SIDECAR_PINS_SCHEMA,
    SIDECAR_SUFFIX,
    SidecarEntry,
    build_sidecar,
    read_sidecar,
    write_sidecar,
)
from corpus_index.storage import FileStat, Location
from corpus_index.warehouse import KeyedReader

# ``sidecars`` checks, builds and records the sidecars of this many inputs' documents at a time
# (the due ones among them take one filtered read of the vectors per range)
SIDECAR_ROWS = 16384
# what ``sidecars`` reads of embedding_inputs: a document's pins and its sections
SIDECAR_INPUT_COLUMNS = [
    "doc_id",
    "section",
    "block_key",
    "content_hash",
    "input_format",
    "input_hash",
]
SIDECAR_INPUT_SCHEMA = pa.schema([INPUT_SCHEMA.field(c) for c in SIDECAR_INPUT_COLUMNS])
# what ``sidecars`` reads of parsed_blocks: each document's metadata, and where each block is
BLOCK_META_SCHEMA = pa.schema(
    [BLOCK_SCHEMA.field(c) for c in ("doc_id", "block_key", "line", "metadata")]
)


@dataclass(slots=True)
class SidecarsOutcome:
    """What the ``sidecars`` step wrote for one profile × collection."""

    covered: bool
    written: int = 0
    unchanged: int = 0
    removed: int = 0
    folder: str = ""


def run(home: Home, profile: str, collection: str) -> SidecarsOutcome:
    """RFC 0013 sidecars, one per document: written when their entries changed, removed with
    their document.

    The inputs are read in ``doc_id`` order, SIDECAR_ROWS rows of whole documents at a
    time, beside the pins recorded by the last run (``sidecar_pins``, in the same order):
    the step holds one range of documents, never the collection's keys.
    """
    if (
        not home.config.profile_covers(profile, collection)
        or not kind_of(home.collection(collection)).sidecars
    ):
        return SidecarsOutcome(covered=False)
    spec = home.spec(profile)
    config = home.collection(collection)
    folder = sidecar_folder(home.settings, home.config, profile, config)
    # beside the sources, files this step did not record are the user's: never swept
    beside = folder == Location.local(config.path)
    inputs_key = ("embedding_inputs", (collection,))
    pins_key = ("sidecar_pins", (profile, collection))
    home.require(*inputs_key)
    ranges = whole_documents(
        home.warehouse.batches(*inputs_key, SIDECAR_INPUT_SCHEMA, columns=SIDECAR_INPUT_COLUMNS),
        SIDECAR_INPUT_SCHEMA,
        SIDECAR_ROWS,
        what=str(home.warehouse.path("embedding_inputs", collection)),
    )
    # with no record of what was written (a home from before sidecar_pins), every file in
    # the folder is checked at the end against the documents seen
    pins_path = home.warehouse.path("sidecar_pins", profile, collection)
    recorded = pins_path.is_file()
    pins = DocCursor(
        home.warehouse.batches(*pins_key, SIDECAR_PINS_SCHEMA),
        SIDECAR_PINS_SCHEMA,
        what=str(pins_path),
    )
    work = _SidecarWork(home, spec, profile, collection, folder)
    seen: set[str] = set()
    # a document with an input the embedder refused has no vector for it: its sidecar (of its
    # last good version, if any) and pin are left as they are
    held = pc.unique(read_refusals(home.warehouse, profile, collection)["doc_id"])
    with home.warehouse.writer(*pins_key, SIDECAR_PINS_SCHEMA) as out:
        for table in ranges:
            last = table["doc_id"][-1].as_py()
            mine = table.filter(pc.equal(table["input_format"], spec.input_format))
            previous = pins.through(last)
            if len(held):
                kept = pc.is_in(previous["doc_id"], held)
                written = work.range(
                    mine.filter(pc.invert(pc.is_in(mine["doc_id"], held))),
                    previous.filter(pc.invert(kept)),
                )
                out.write(pa.concat_tables([written, previous.filter(kept)]).sort_by("doc_id"))
            else:
                out.write(work.range(mine, previous))
            if not recorded:
                seen.update(pc.unique(mine["doc_id"]).to_pylist())
            memory.release()
        work.remove_gone(pins.rest())
        if not recorded and not beside and folder.is_dir():
            for path in folder.rglob(f"*{SIDECAR_SUFFIX}"):
                doc_id = path.relative_to(folder).as_posix()[: -len(SIDECAR_SUFFIX)]
                # another shard's documents share the folder: they are that shard's to sweep
                if doc_id not in seen and config.owns(doc_id):
                    path.unlink()
                    work.removed += 1
        out.commit()
    return SidecarsOutcome(
        covered=True,
        written=work.written,
        unchanged=work.unchanged,
        removed=work.removed,
        folder=str(folder),
    )


PIN_SEP = "\x1f"  # between the block_key, content_hash and input_hash of a sidecar entry's pin
# how the entries are laid out, part of what a sidecar is written from: a sidecar written in
# another order (block_key order, before) is due once, and rewritten where its order differs
ENTRY_ORDER = "document"


class _SidecarWork:
    """The sidecars of one range of documents at a time: which are due, building them,
    removing those of documents gone, and the pins to record (see ``run``)."""

    def __init__(
        self, home: Home, spec: GenerationSpec, profile: str, collection: str, folder: Location
    ) -> None:
        self.home, self.spec, self.profile, self.collection = home, spec, profile, collection
        self.name = home.collection(collection).name  # the collection a shard's key names
        self.folder = folder
        identity = [
            spec.backend_spec,
            spec.model_revision,
            spec.input_format,
            spec.normalized,
            ENTRY_ORDER,
        ]
        self._identity = canonical_json(identity) + "\n"
        self.written = self.unchanged = self.removed = 0
        self._metadata: DocCursor | None = None  # parsed_blocks' metadata, opened when first due
        self._vectors: KeyedReader | None = None  # the embeddings by hash, opened when first due

    def path(self, doc_id: str) -> Location:
        """The document's sidecar file."""
        return self.folder / f"{doc_id}{SIDECAR_SUFFIX}"

    def digest(self, pins: list[str]) -> str:
        """What a sidecar is written from: the embedder's identity, the entries' order and
        their pins (each ``block_key``, ``content_hash`` and ``input_hash`` joined by PIN_SEP)."""
        return sha256_hex(self._identity + "\x1e".join(pins))

    def range(self, inputs: pa.Table, previous: pa.Table) -> pa.Table:
        """Bring the sidecars of ``inputs``' documents up to date; the pins to record for them.
        ``previous`` holds the pins recorded last time for the same range of doc_ids."""
        # each input's pin (block_key, content_hash, input_hash) joined in Arrow, then each
        # document's pins (its rows are contiguous: the range is in doc_id order) in Python
        pin_text = pc.binary_join_element_wise(
            inputs["block_key"], inputs["content_hash"], inputs["input_hash"], PIN_SEP
        ).to_pylist()
        spans: dict[str, tuple[int, int]] = {}
        doc_ids = inputs["doc_id"].to_pylist()
        start = 0
        for end in range(1, len(doc_ids) + 1):
            if end == len(doc_ids) or doc_ids[end] != doc_ids[start]:
                spans[doc_ids[start]] = (start, end)
                start = end
        # what each sidecar was written from, and its file's size and mtime then: an unchanged
        # document whose file nobody touched is skipped without opening it
        digests = {
            doc_id: self.digest(pin_text[start:end]) for doc_id, (start, end) in spans.items()
        }
        known = dict(
            zip(
                previous["doc_id"].to_pylist(),
                zip(
                    previous["digest"].to_pylist(),
                    previous["size"].to_pylist(),
                    previous["mtime_ns"].to_pylist(),
                    strict=True,
                ),
                strict=True,
            )
        )
        self.remove_gone(previous.filter(pc.invert(pc.is_in(previous["doc_id"], inputs["doc_id"]))))
        # which sidecars are due: missing, touched, or written from other pins; a file touched
        # or never recorded is built again and kept only when it holds the same
        stats: dict[str, FileStat | None] = {}
        due: list[str] = []
        order = sorted(spans)
        for doc_id in order:
            st = stats[doc_id] = self.path(doc_id).file_stat()
            if st is None or known.get(doc_id) != (digests[doc_id], st.st_size, st.st_mtime_ns):
                due.append(doc_id)
        written = 0
        if due:
            written = self._build(due, inputs, existing={d for d in due if stats[d] is not None})
            stats.update((doc_id, self.path(doc_id).file_stat()) for doc_id in due)
        self.written += written
        self.unchanged += len(spans) - written
        sizes, mtimes = [], []
        for doc_id in order:
            st = stats[doc_id]
            assert st is not None
            sizes.append(st.st_size)
            mtimes.append(st.st_mtime_ns)
        return pa.table(
            {
                "source_id": [f"{self.name}/{doc_id}" for doc_id in order],
                "doc_id": order,
                "digest": [digests[doc_id] for doc_id in order],
                "size": sizes,
                "mtime_ns": mtimes,
            },
            schema=SIDECAR_PINS_SCHEMA,
        )

    def _build(self, due: list[str], inputs: pa.Table, *, existing: set[str]) -> int:
        """Write the due sidecars: one filtered read of the vectors for all of them, and the
        documents' metadata read forward from parsed_blocks. Of ``existing`` (documents with
        a file already), a file that holds the sidecar as built is left as it is. Returns how
        many were written."""
        spec = self.spec
        rows_by_doc: dict[str, list[dict[str, Any]]] = {}
        for row in inputs.filter(
            pc.is_in(inputs["doc_id"], pa.array(due, pa.string()))
        ).to_pylist():
            rows_by_doc.setdefault(row["doc_id"], []).append(row)
        hashes = pc.unique(
            pa.array([r["input_hash"] for d in due for r in rows_by_doc[d]], pa.string())
        )
        if self._vectors is None:
            self._vectors = self.home.keyed("embeddings", (self.profile, self.collection))
        vectors = self._vectors.lookup(hashes)
        vec_index = {h: i for i, h in enumerate(vectors["input_hash"].to_pylist())}
        matrix = vector_matrix(vectors, spec.dim)
        if self._metadata is None:
            warehouse = self.home.warehouse
            self._metadata = DocCursor(
                warehouse.batches(
                    "parsed_blocks",
                    (self.collection,),
                    BLOCK_META_SCHEMA,
                    columns=BLOCK_META_SCHEMA.names,
                ),
                BLOCK_META_SCHEMA,
                what=str(warehouse.path("parsed_blocks", self.collection)),
            )
        blocks = self._metadata.through(due[-1])
        blocks = blocks.filter(pc.is_in(blocks["doc_id"], pa.array(due, pa.string())))
        meta_by_doc: dict[str, dict[str, Any]] = {}
        lines: dict[tuple[str, str], int] = {}  # (doc_id, block_key) -> the block's first line
        for row in blocks.to_pylist():
            meta_by_doc.setdefault(row["doc_id"], json.loads(row["metadata"] or "{}"))
            lines[(row["doc_id"], row["block_key"])] = row["line"] or 0
        written = 0
        for doc_id in due:
            meta = meta_by_doc.get(doc_id, {})
            sidecar = build_sidecar(
                uw_version=str(meta.get("uw_version", "1.1")),
                deal_id=str(meta.get("deal_id", doc_id)),
                backend_spec=spec.backend_spec,
                dim=spec.dim,
                input_format=spec.input_format,
                entries=[
                    SidecarEntry(
                        section=r["section"],
                        block_key=r["block_key"],
                        content_hash=r["content_hash"],
                        vector=matrix[vec_index[r["input_hash"]]].tolist(),
                        input_hash=r["input_hash"],
                    )
                    for r in sorted(rows_by_doc[doc_id], key=lambda r: _position(r, lines))
                ],
                revision=spec.model_revision,
                normalized=spec.normalized,
            )
            if doc_id in existing and self._holds(doc_id, sidecar):
                continue
            write_sidecar(self.path(doc_id), sidecar, validate=False)  # build_sidecar validated it
            written += 1
        return written

    def _holds(self, doc_id: str, sidecar: dict[str, Any]) -> bool:
        """Whether the document's file is conformant and holds ``sidecar`` but for when it was
        written: the same embedder (model, revision, dim, input format, normalized), entries,
        pins and vectors. Pins alone do not tell: a vector torn or edited by hand, or a new
        revision of the model, leaves every pin as it was."""
        try:
            old = read_sidecar(self.path(doc_id))
        except (SidecarError, OSError):  # torn, foreign or gone meanwhile: written again
            return False
        return {**old, "generated_at": None} == {**sidecar, "generated_at": None}

    def remove_gone(self, pins: pa.Table) -> None:
        """Remove the sidecars of documents whose pins were recorded but that have no inputs."""
        for doc_id in pins["doc_id"].to_pylist():
            path = self.path(doc_id)
            if path.is_file():
                path.unlink()
                self.removed += 1


def _position(row: dict[str, Any], lines: dict[tuple[str, str], int]) -> tuple[int, int, int]:
    """Where an input's block sits in its document (its line, then its number in its section,
    then the paragraph's number), for the sidecar's entries in document order: the inputs come
    in ``block_key`` order, where ``risk_assessment/10`` is before ``risk_assessment/2``."""
    key, _, paragraph = row["block_key"].partition("#p")
    n = key.rpartition("/")[2]
    return (
        lines.get((row["doc_id"], key), 0),
        int(n) if n.isdigit() else 0,
        int(paragraph) if paragraph.isdigit() else -1,
    )
