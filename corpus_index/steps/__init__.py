"""One module per asset step, named after its asset; each has one entry function, ``run``.

A step reads its inputs from the warehouse, does its work, writes its output, and returns its
outcome record (counts, check outcomes) for the caller to report. The Dagster assets in
``assets/graph.py`` are thin calls to these.
"""

from corpus_index.steps import (
    embedding_inputs,
    embeddings,
    flat_exports,
    index_generation,
    index_rows,
    linked_groups,
    parsed_blocks,
    sidecars,
    source_manifest,
)

__all__ = [
    "embedding_inputs",
    "embeddings",
    "flat_exports",
    "index_generation",
    "index_rows",
    "linked_groups",
    "parsed_blocks",
    "sidecars",
    "source_manifest",
]
