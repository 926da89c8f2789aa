"""Inputs an embedder's server refused: found by splitting the refused batch, and recorded per
profile × collection, so that the documents that hold them are held back and named.

A server that refuses a request for what it holds (``RefusedInputError``: HTTP 400, 413 or
422, an input too long or invalid for the model) refuses the whole batch for one input. The
batch is split in halves, each embedded again, and a refused half split again, down to the
inputs refused alone: the others' vectors are kept. One refused input in a batch of n costs
at most 2·ceil(log2 n) requests more than the batch did. At most :func:`refusals_allowed`
inputs of one step may be refused (10, or 1% of the inputs it embeds where that is more): one
more fails the step with the server's message, as any refused request did before, since a
server that refuses that many refuses the requests (a wrong model or option), not the inputs.
A server that refuses everything is thus asked about twice that many requests, not one per
input. Other failures (401, 429, 5xx, timeouts) are never split: they end the step, or are
retried, as before. An input refused alone is remembered for its model
(``corpus_index.refusal_memo``), so later runs hold it back without asking again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from corpus_index.embedders import Embedder
from corpus_index.errors import EmbedderError, RefusedInputError
from corpus_index.records import REFUSAL_SCHEMA
from corpus_index.warehouse import Warehouse

REFUSED_AT_LEAST = 10  # inputs a step may set aside, whatever its size...
REFUSED_SHARE = 0.01  # ...or this share of the inputs it embeds, where that is more
REFUSALS = "embedding_refusals"  # the warehouse asset: one partition per profile × collection


def refusals_allowed(inputs: int) -> int:
    """How many of ``inputs`` to embed a step may set aside as refused."""
    return max(REFUSED_AT_LEAST, math.ceil(inputs * REFUSED_SHARE))


@dataclass(slots=True)
class Refusals:
    """The inputs refused so far in one step, against how many it may set aside."""

    at_most: int
    count: int = 0
    requests: int = 0  # requests made to find them, beyond the one per batch
    first: str = ""

    def add(self, exc: RefusedInputError) -> None:
        """Count one input refused alone.

        Raises:
            EmbedderError: more inputs were refused than the step may set aside.
        """
        self.count += 1
        self.first = self.first or str(exc)
        if self.count > self.at_most:
            raise EmbedderError(
                f"{exc}; {self.count} inputs were refused, more than the {self.at_most} a step "
                f"sets aside ({REFUSED_AT_LEAST}, or {REFUSED_SHARE:.0%} of its inputs): a "
                "server that refuses this many refuses the requests, not the inputs. Check the "
                "profile's model, dimensions and base_url"
            ) from exc


@dataclass(slots=True)
class Split:
    """What :func:`embed_splitting` returns: a vector for each position embedded, and why
    each refused position was refused."""

    vectors: dict[int, npt.NDArray[np.float32]] = field(default_factory=dict)
    refused: dict[int, str] = field(default_factory=dict)


def embed_splitting(embedder: Embedder, texts: Sequence[str], refusals: Refusals | None) -> Split:
    """``texts`` embedded; with ``refusals``, a refused batch is split in halves until the
    refused inputs stand alone (see the module's docstring).

    An answer of another shape than asked stands as NaN rows, which the vector checks fail.

    Raises:
        EmbedderError: as ``embedder.embed`` (a refusal, without ``refusals``); or more inputs
            refused than ``refusals`` allows.
    """
    split = Split()
    _embed_into(split, embedder, list(texts), 0, refusals)
    return split


def _embed_into(
    split: Split, embedder: Embedder, texts: list[str], offset: int, refusals: Refusals | None
) -> None:
    try:
        vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
    except RefusedInputError as exc:
        if refusals is None:
            raise
        if len(texts) == 1:
            refusals.add(exc)
            split.refused[offset] = str(exc)
            return
        refusals.requests += 2
        half = len(texts) // 2
        _embed_into(split, embedder, texts[:half], offset, refusals)
        _embed_into(split, embedder, texts[half:], offset + half, refusals)
        return
    if vectors.ndim != 2 or vectors.shape[0] != len(texts):
        width = max(1, vectors.shape[-1] if vectors.ndim else 1)
        vectors = np.full((len(texts), width), np.nan, np.float32)
    for i, vector in enumerate(vectors):
        split.vectors[offset + i] = vector


def refusal_rows(
    inputs: pa.Table, refused: Mapping[str, str], *, collection: str, paths: Mapping[str, str]
) -> pa.Table:
    """The record of the refused inputs: one row per refused input of each document that holds
    it (``inputs``: embedding_inputs rows with ``input_hash``, ``source_id``, ``doc_id`` and
    ``block_key``; ``paths``: each doc_id's file), each naming the file, the block and why."""
    mine = inputs.filter(pc.is_in(inputs["input_hash"], pa.array(list(refused), pa.string())))
    rows = []
    seen: set[tuple[str, str]] = set()
    for r in mine.select(["input_hash", "source_id", "doc_id", "block_key"]).to_pylist():
        if (r["source_id"], r["input_hash"]) in seen:  # one input under two formats
            continue
        seen.add((r["source_id"], r["input_hash"]))
        path = paths.get(r["doc_id"], r["source_id"])
        rows.append(
            {
                "collection": collection,
                "doc_id": r["doc_id"],
                "source_id": r["source_id"],
                "path": path,
                "block_key": r["block_key"],
                "input_hash": r["input_hash"],
                "error": f"{path}: block {r['block_key']!r}: the embedder refused its input: "
                f"{refused[r['input_hash']]}",
            }
        )
    rows.sort(key=lambda r: (r["source_id"], r["block_key"]))
    return pa.Table.from_pylist(rows, schema=REFUSAL_SCHEMA)


def read_refusals(warehouse: Warehouse, profile: str, collection: str) -> pa.Table:
    """The refused inputs the last ``embeddings`` run of ``profile`` × ``collection`` recorded
    (none when it recorded none)."""
    table = warehouse.read(REFUSALS, (profile, collection), REFUSAL_SCHEMA)
    return table if table is not None else REFUSAL_SCHEMA.empty_table()


def held_sources(warehouse: Warehouse, profile: str, collection: str) -> pa.Array:
    """The sources with a refused input: their rows in the generation stay as they were (a
    last good version keeps serving; a new document is not indexed until its inputs are
    embedded)."""
    return pc.unique(read_refusals(warehouse, profile, collection)["source_id"])
