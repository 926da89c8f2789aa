"""Hash shards of a collection: which shard a source belongs to, and the partition keys.

A collection with ``shards: N`` (N > 1) is N Dagster partitions, ``<collection>~<nn>``; a
source belongs to shard ``sha256(source_id) mod N``, a hash that does not change between
processes or versions. With one shard (the default) the partition key is the collection's
name, as it always was. Every partition key is read here and nowhere else.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

SEPARATOR = "~"


class ShardKey(NamedTuple):
    """A partition key read back: the collection, and its shard (None: not sharded)."""

    collection: str
    shard: int | None


def shard_of(source_id: str, shards: int) -> int:
    """The shard of ``source_id`` among ``shards``: sha256 of its UTF-8 bytes, mod ``shards``."""
    if shards <= 1:
        return 0
    digest = hashlib.sha256(source_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % shards


def partition_key(collection: str, shard: int | None, shards: int) -> str:
    """The partition key of ``shard`` of ``collection`` (its name when it is not sharded)."""
    if shard is None or shards <= 1:
        return collection
    return f"{collection}{SEPARATOR}{shard:0{_width(shards)}d}"


def partition_keys(collection: str, shards: int) -> tuple[str, ...]:
    """Every partition key of ``collection`` split into ``shards``, in shard order."""
    if shards <= 1:
        return (collection,)
    return tuple(partition_key(collection, n, shards) for n in range(shards))


def split_key(key: str) -> ShardKey:
    """The collection and shard a partition key names (``deals~03`` -> ``deals``, 3).

    Raises:
        ValueError: the part after the separator is not a shard number.
    """
    name, sep, shard = key.partition(SEPARATOR)
    if not sep:
        return ShardKey(key, None)
    if not shard.isdigit() or not name:
        raise ValueError(f"partition key {key!r}: expected <collection>{SEPARATOR}<shard number>")
    return ShardKey(name, int(shard))


def _width(shards: int) -> int:
    return max(2, len(str(shards - 1)))
