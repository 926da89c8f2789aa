"""Canonical inputs for a collection, and embedding them through the content-addressed cache."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from corpus_index.cache import EmbeddingCache
from corpus_index.embedders import Embedder
from corpus_index.inputs import input_units
from corpus_index.records import INPUT_SCHEMA, embedding_schema


def build_inputs(
    blocks: pa.Table, *, sections: Mapping[str, str], input_formats: Iterable[str]
) -> pa.Table:
    """Embedder inputs for every embeddable block, under each input format in use.

    A block is embeddable when its section is in the registry (``sections``: name ->
    granularity) or it is a passage record. Paragraph granularity yields one input per
    paragraph, addressed ``<chunk_ref>#p<n>``.
    """
    formats = sorted(set(input_formats))
    rows: list[dict[str, object]] = []
    for block in blocks.to_pylist():
        section = str(block["section"])
        source_type = str(block["source_type"])
        if source_type != "passage" and section not in sections:
            continue
        content = json.loads(str(block["content"]))
        document = json.loads(str(block.get("metadata") or "{}"))
        granularity = sections.get(section, "block")
        for fmt in formats:
            for unit in input_units(
                fmt,
                section=section,
                content=content,
                source_type=source_type,
                granularity=granularity,
                document=document,
            ):
                rows.append(
                    {
                        "chunk_ref": f"{block['chunk_ref']}{unit.suffix}",
                        "source_id": block["source_id"],
                        "doc_id": block["doc_id"],
                        "section": section,
                        "block_key": f"{block['block_key']}{unit.suffix}",
                        "content_hash": block["content_hash"],
                        "input_format": fmt,
                        "input_hash": unit.input_hash,
                        "text": unit.text,
                    }
                )
    return pa.Table.from_pylist(rows, schema=INPUT_SCHEMA)


@dataclass(slots=True)
class EmbedResult:
    """Vectors for every distinct input hash of a partition, with cache accounting."""

    hashes: list[str]
    vectors: npt.NDArray[np.float32]
    embedded: int
    cache_hits: int
    tokens: int = 0
    cost_usd: float = 0.0
    fresh_hashes: list[str] = field(default_factory=list)

    def to_table(self, dim: int) -> pa.Table:
        flat = pa.array(np.ascontiguousarray(self.vectors, dtype=np.float32).ravel(), pa.float32())
        return pa.table(
            {
                "input_hash": pa.array(self.hashes, pa.string()),
                "vector": pa.FixedSizeListArray.from_arrays(flat, dim),
            },
            schema=embedding_schema(dim),
        )


def embed_with_cache(
    texts_by_hash: Mapping[str, str],
    embedder: Embedder,
    cache: EmbeddingCache | None,
    *,
    batch_size: int = 256,
    progress: Callable[[int, int], None] | None = None,
) -> EmbedResult:
    """Vectors for every input hash: cached ones are read, only misses reach the embedder.

    New vectors are NOT written to the cache here: the caller stores them after the blocking
    checks passed, so a broken embedder never poisons the cache.
    """
    hashes = sorted(texts_by_hash)
    found = cache.lookup(hashes) if cache is not None else {}
    misses = [h for h in hashes if h not in found]
    tokens_before, cost_before = embedder.stats.tokens, embedder.stats.cost_usd
    fresh: dict[str, npt.NDArray[np.float32]] = {}
    for start in range(0, len(misses), batch_size):
        chunk = misses[start : start + batch_size]
        vectors = np.asarray(embedder.embed([texts_by_hash[h] for h in chunk]), dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(chunk):
            vectors = np.full(
                (len(chunk), max(1, vectors.shape[-1] if vectors.ndim else 1)), np.nan, np.float32
            )
        for h, vec in zip(chunk, vectors, strict=True):
            fresh[h] = vec
        if progress is not None:
            progress(min(start + batch_size, len(misses)), len(misses))
    dims = {v.shape[0] for v in [*found.values(), *fresh.values()]}
    dim = dims.pop() if len(dims) == 1 else embedder.dim
    matrix = np.zeros((len(hashes), dim), dtype=np.float32)
    for i, h in enumerate(hashes):
        vec = found.get(h)
        if vec is None:
            vec = fresh[h]
        if vec.shape[0] != dim:  # mixed dimensions: keep the partition's shape, flag as non-finite
            matrix[i] = np.nan
        else:
            matrix[i] = vec
    return EmbedResult(
        hashes=hashes,
        vectors=matrix,
        embedded=len(misses),
        cache_hits=len(hashes) - len(misses),
        tokens=embedder.stats.tokens - tokens_before,
        cost_usd=embedder.stats.cost_usd - cost_before,
        fresh_hashes=misses,
    )
