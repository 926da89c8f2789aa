"""Vector entries: joining blocks, canonical inputs and vectors into generation-table rows."""

from __future__ import annotations

import json
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus_index.group_records import GROUP_KIND, generation_formats
from corpus_index.hashing import vector_id
from corpus_index.index_store import PROMOTED_COLUMNS, SPAN_END, vector_entry_schema
from corpus_index.kinds import kind_named
from corpus_index.registry import Generation, Registry

# a table of inputs or one of its batches: what ``generation_inputs`` filters alike
InputRows = TypeVar("InputRows", pa.Table, pa.RecordBatch)


def generation_inputs(data: InputRows, generation: Generation, dead: pa.Array) -> InputRows:
    """The inputs of ``data`` that ``generation``'s rows are built from: those in its input
    formats (its units' and the groups'), of no source in ``dead`` (the tombstoned ones, see
    :func:`tombstoned_sources`)."""
    formats = pa.array(generation_formats(generation.spec.input_format))
    mask = pc.is_in(data["input_format"], formats)
    if len(dead):
        mask = pc.and_(mask, pc.invert(pc.is_in(data["source_id"], dead)))
    return data.filter(mask)


def tombstoned_sources(registry: Registry, namespace: str, collection: str) -> pa.Array:
    """The sources of ``collection`` tombstoned in ``namespace``, sorted: a source deleted
    before a generation existed never enters it, even from stale inputs (a source that really
    comes back lifts its tombstone at scan)."""
    return pa.array(
        sorted(
            t["source_id"]
            for t in registry.tombstones(namespace=namespace)
            if t["collection"] == collection
        ),
        pa.string(),
    )


def last_day(kind: str, event_date: str | None, meta: dict[str, object]) -> str | None:
    """A row's last day: a group's ``event_date_end`` (its last member's day), never before its
    first; a unit's or a deal's own ``event_date`` (None where it has none)."""
    if not event_date or kind != GROUP_KIND:
        return event_date
    end = str(meta.get(SPAN_END) or "")[:10]
    return end if end > event_date[:10] else event_date


def build_rows(
    generation: Generation,
    *,
    blocks: pa.Table,
    inputs: pa.Table,
    vectors: pa.Table,
    run_id: str,
) -> pa.Table:
    """One row per input of the generation's input format, carrying scope, provenance and vector.

    Raises:
        KeyError: an input has no vector (the ``embeddings`` checks catch this first).
    """
    spec = generation.spec
    schema = vector_entry_schema(generation)
    inputs = inputs.filter(
        pc.is_in(inputs["input_format"], pa.array(generation_formats(spec.input_format)))
    )
    if inputs.num_rows == 0:
        return schema.empty_table()
    by_chunk = {row["chunk_ref"]: row for row in blocks.to_pylist()}
    vec_index = {h: i for i, h in enumerate(vectors.column("input_hash").to_pylist())}
    flat = vectors.column("vector").combine_chunks()
    matrix = (
        flat.values.to_numpy(zero_copy_only=False).reshape(-1, spec.dim)
        if len(flat)
        else np.zeros((0, spec.dim), np.float32)
    )

    out: dict[str, list[object]] = {name: [] for name in schema.names if name != "vector"}
    order: list[int] = []
    for inp in inputs.to_pylist():
        base_ref = str(inp["chunk_ref"]).split("#", 1)[0]
        block = by_chunk[base_ref]
        meta = json.loads(str(block["metadata"])) if block["metadata"] else {}
        kind = str(block["kind"])
        promoted = {} if kind == GROUP_KIND else kind_named(kind).promote(meta)
        order.append(vec_index[inp["input_hash"]])
        values: dict[str, object] = {
            "vector_id": vector_id(inp["chunk_ref"], spec.input_format, spec.backend_spec),
            "chunk_ref": inp["chunk_ref"],
            "source_id": block["source_id"],
            "collection": block["collection"],
            "doc_id": block["doc_id"],
            "source_version": block["source_version"],
            "kind": block["kind"],
            "source_type": block["source_type"],
            "section": inp["section"],
            "block_key": inp["block_key"],
            "content_hash": block["content_hash"],
            "input_format": inp["input_format"],
            "input_hash": inp["input_hash"],
            "text": inp["text"],
            "tenant_id": block["tenant_id"],
            "acl_groups": block["acl_groups"],
            "tier": block["tier"],
            "language": block["language"],
            "event_date": block["event_date"],
            SPAN_END: last_day(kind, block["event_date"], meta),
            "metadata": block["metadata"],
            "backend_spec": spec.backend_spec,
            "dim": spec.dim,
            "normalized": spec.normalized,
            "generation": generation.id,
            "namespace": spec.namespace,
            "run_id": run_id,
        }
        for name, _ in PROMOTED_COLUMNS:
            values[name] = promoted.get(name)
        for name in out:
            out[name].append(values[name])
    arrays = [
        pa.array(out[name], schema.field(name).type) for name in schema.names if name != "vector"
    ]
    picked = np.ascontiguousarray(matrix[np.asarray(order, dtype=np.int64)], dtype=np.float32)
    vec = pa.FixedSizeListArray.from_arrays(pa.array(picked.ravel(), pa.float32()), spec.dim)
    return pa.Table.from_arrays([*arrays, vec], schema=schema)
