"""The one place where values become predicate text (LanceDB/DataFusion SQL).

Nothing else in corpus-index pastes a value into a predicate: every literal passes through
``literal()``, which quotes strings and rejects what it cannot represent safely.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

from corpus_index.errors import InvalidFilterError

_COLUMN = re.compile(r"^[a-z_][a-z0-9_]{0,63}$")


def column(name: str) -> str:
    """A column name, checked against a strict pattern (names are never quoted user text)."""
    if not _COLUMN.fullmatch(name):  # fullmatch: "$" would also accept a trailing newline
        raise InvalidFilterError(f"invalid column name {name!r}")
    return name


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # the widest integer column the engine compares


def literal(value: Any) -> str:
    """A SQL literal for ``value``: strings single-quoted with quotes doubled.

    Raises:
        InvalidFilterError: the value has a type or content that cannot be a literal.
    """
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise InvalidFilterError(f"filter value {value} is outside the 64-bit integer range")
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidFilterError(f"filter value must be finite (got {value!r})")
        return repr(value)
    if isinstance(value, dt.date | dt.datetime):
        value = value.isoformat()
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidFilterError("filter value contains a NUL character")
        return "'" + value.replace("'", "''") + "'"
    raise InvalidFilterError(f"unsupported filter value type {type(value).__name__}")


def eq(name: str, value: Any) -> str:
    return f"{column(name)} = {literal(value)}"


def is_in(name: str, values: Sequence[Any]) -> str:
    if not values:
        return "FALSE"
    return f"{column(name)} IN ({', '.join(literal(v) for v in values)})"


def not_in(name: str, values: Sequence[Any]) -> str:
    """True where the column holds none of ``values`` (SQL semantics: a NULL never matches)."""
    if not values:
        return f"{column(name)} IS NOT NULL"
    return f"{column(name)} NOT IN ({', '.join(literal(v) for v in values)})"


def is_null(name: str) -> str:
    return f"{column(name)} IS NULL"


def compare(name: str, op: str, value: Any) -> str:
    if op not in ("=", "!=", "<", "<=", ">", ">="):
        raise InvalidFilterError(f"unsupported comparison {op!r}")
    return f"{column(name)} {op} {literal(value)}"


def list_overlaps(name: str, values: Sequence[str]) -> str:
    """True where the list column shares at least one element with ``values``."""
    if not values:
        return "FALSE"
    return f"array_has_any({column(name)}, [{', '.join(literal(v) for v in values)}])"


def in_hash_shard(name: str, shard: int, shards: int) -> str:
    """True where the string column's value belongs to hash shard ``shard`` of ``shards``:
    the first 8 bytes of the sha256 of its UTF-8 bytes, read as a big-endian integer, mod
    ``shards`` (``corpus_index.shards.shard_of``), computed by LanceDB in its scan.

    The integer is the first 16 hex digits of the digest, so it is the sum of each digit
    times 16 to the power of its place; each power is taken mod ``shards`` here, and the
    sum (at most 16 x 15 x ``shards``) mod ``shards`` in the predicate.

    Raises:
        InvalidFilterError: ``shards`` is below 1, or ``shard`` is not one of its shards.
    """
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise InvalidFilterError(f"shard count must be an integer of at least 1 (got {shards!r})")
    if isinstance(shard, bool) or not isinstance(shard, int) or not 0 <= shard < shards:
        raise InvalidFilterError(f"shard must be an integer in 0..{shards - 1} (got {shard!r})")
    if shards == 1:
        return "TRUE"
    digits = f"encode(sha256({column(name)}), 'hex')"
    terms = []
    for place in range(16):
        weight = pow(16, 15 - place, shards)
        if weight:
            digit = f"(strpos('0123456789abcdef', substr({digits}, {place + 1}, 1)) - 1)"
            terms.append(digit if weight == 1 else f"{digit} * {weight}")
    return f"(({' + '.join(terms)}) % {shards}) = {shard}"


def all_of(parts: Iterable[str]) -> str:
    parts = [p for p in parts if p]
    if not parts:
        return "TRUE"
    return " AND ".join(f"({p})" for p in parts)


def any_of(parts: Iterable[str]) -> str:
    """Predicates (each built by this module) joined with OR; none is FALSE."""
    parts = [p for p in parts if p]
    if not parts:
        return "FALSE"
    return " OR ".join(f"({p})" for p in parts)
