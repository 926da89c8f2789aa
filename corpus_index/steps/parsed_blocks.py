"""The ``parsed_blocks`` step: parse what changed, carry the rest forward, quarantine failures."""

from __future__ import annotations

from corpus_index.home import Home
from corpus_index.records import BLOCK_SCHEMA, MANIFEST_SCHEMA, QUARANTINE_SCHEMA
from corpus_index.sources import ParseSummary, PreviousBlocks, parse_into


def run(home: Home, collection: str) -> ParseSummary:
    """Parse what changed; the blocks partition is rewritten a range of documents at a time,
    merging new blocks with those carried from the partition it replaces.

    Returns:
        Counts of parsed, carried and quarantined documents, the quarantine list and the
        documents now serving a stale last good version.
    """
    manifest = home.read("source_manifest", (collection,), MANIFEST_SCHEMA)
    key = ("parsed_blocks", (collection,))
    previous = None
    versions = home.warehouse.read(*key, columns=["doc_id", "source_version"])
    if versions is not None:
        previous = PreviousBlocks(
            versions=versions, batches=lambda: home.warehouse.batches(*key, BLOCK_SCHEMA)
        )
    # blocks first: a reader that sees the new quarantine list also sees the blocks it implies
    with home.warehouse.writer(*key, BLOCK_SCHEMA) as out:
        result = parse_into(
            out.write,
            home.collection(collection),
            manifest,
            previous,
            home.warehouse.read("quarantine", (collection,), QUARANTINE_SCHEMA),
        )
        out.commit()
    home.warehouse.write("quarantine", (collection,), result.quarantine)
    # a shard records its own stale sources: each partition's list is replaced whole
    home.registry.set_stale(collection, result.stale)
    return result
