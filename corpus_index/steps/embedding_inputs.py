"""The ``embedding_inputs`` step: canonical input text and input_hash per embeddable block."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from corpus_index.embedding import INPUT_RULE_KEY, build_inputs_into, input_rule
from corpus_index.group_records import (
    GROUP_INPUT_FORMAT,
    GROUP_SCHEMA,
    group_inputs,
    merged_by_doc,
)
from corpus_index.home import Home
from corpus_index.records import BLOCK_SCHEMA, INPUT_SCHEMA


@dataclass(frozen=True, slots=True)
class InputsSummary:
    """What the ``embedding_inputs`` step wrote for one collection."""

    rows: int
    formats: list[str]
    distinct_hashes: int


def run(home: Home, collection: str) -> InputsSummary:
    """Rewrite the collection's inputs a range of documents at a time, reusing the rows of
    unchanged blocks from the partition it replaces (only when built under the same rule).

    A grouped collection's inputs also hold one ``group-v1`` input per indexed group of its
    ``linked_groups`` partition, in ``doc_id`` (group id) order among its units' inputs; its
    units' inputs are then collected before they are written.

    Returns:
        The rows written, their input formats and how many distinct input hashes they hold.
    """
    blocks = ("parsed_blocks", (collection,))
    home.require(*blocks)
    key = ("embedding_inputs", (collection,))
    formats = home.input_formats()
    rule = input_rule(home.config.sections, formats)
    previous_rule = (home.warehouse.metadata(*key) or {}).get(INPUT_RULE_KEY)
    groups = home.warehouse.read("linked_groups", (collection,), GROUP_SCHEMA)
    grouped = groups is not None and groups.num_rows > 0
    previous = home.warehouse.batches(*key) if previous_rule == rule else None
    if previous is not None:  # a group's input is rebuilt from its group, never carried
        previous = (_without_group_inputs(b) for b in previous)
    with home.warehouse.writer(*key, INPUT_SCHEMA.with_metadata({INPUT_RULE_KEY: rule})) as out:
        units: list[pa.Table] = []
        build_inputs_into(
            units.append if grouped else out.write,
            home.warehouse.batches(*blocks, BLOCK_SCHEMA),
            sections=home.config.sections,
            input_formats=formats,
            previous=previous,
            previous_rule=previous_rule,
            what=f"embedding_inputs of {collection}",
        )
        if groups is not None and grouped:
            parts = [t.cast(INPUT_SCHEMA) for t in units]
            out.write(merged_by_doc([*parts, group_inputs(groups)]))
        out.commit()
    keys = home.read(*key, columns=["input_format", "input_hash"])
    return InputsSummary(
        rows=keys.num_rows,
        formats=sorted(pc.unique(keys["input_format"]).to_pylist()),
        distinct_hashes=int(pc.count_distinct(keys["input_hash"]).as_py()),
    )


def _without_group_inputs(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` less its ``group-v1`` inputs; a batch that has none passes as it is (a
    filter would copy every column, texts included, of every batch carried forward)."""
    keep = pc.not_equal(batch["input_format"], GROUP_INPUT_FORMAT)
    return batch if pc.all(keep, skip_nulls=False).as_py() else batch.filter(keep)
