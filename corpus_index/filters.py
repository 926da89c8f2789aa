"""Structured search filters: RFC 0013 ``CorpusFilter`` plus generic column conditions.

Everything a user can filter on becomes a list of :class:`Condition` and then one predicate,
built by :func:`compile_filter` through :mod:`corpus_index.predicates` (the one place values
become predicate text). Keys are checked against the columns of the table being searched, and
every value is coerced to that column's type before it is quoted, so ``units>=abc`` or
``colour=red`` fail with a message instead of reaching the engine.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import pyarrow as pa

from corpus_index import predicates
from corpus_index.errors import InvalidFilterError

OPS = ("=", "!=", "<", "<=", ">", ">=", "in", "not in")
#: RFC 0013 spellings and friendly names for columns of the generation table.
ALIASES = {"geo.state": "state", "geo.metro": "metro", "date": "deal_date"}
#: Columns no filter may name: vectors, the ACL list (the eligibility prefilter owns it), JSON
#: and free text (use the query for text).
NOT_FILTERABLE = frozenset({"vector", "acl_groups", "metadata", "text"})
DATE_COLUMNS = frozenset({"deal_date", "event_date", "event_date_end"})
#: A deal's date (``date_range``, ``date``), read on a row that has none (a message, a group of
#: messages) as the row's own days: from its first (``event_date``) to its last
#: (``event_date_end``; one day for a message), or its first alone in a table made before it
#: had a last (see :func:`_span`).
DEAL_DATE, OWN_DATE, OWN_END = "deal_date", "event_date", "event_date_end"
MAX_VALUES = 1000  # an ``in`` list longer than this is almost certainly a mistake

_EXPRESSION = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(>=|<=|!=|=|>|<)(.*)$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Condition:
    """One generic condition: ``key op value`` (``value`` is a tuple for ``in``/``not in``)."""

    key: str
    op: str
    value: Any

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise InvalidFilterError(
                f"unsupported filter operator {self.op!r} (use one of {', '.join(OPS)})"
            )
        if self.op in ("in", "not in"):
            if isinstance(self.value, str | bytes) or not isinstance(self.value, Iterable):
                raise InvalidFilterError(
                    f"filter {self.key} {self.op} needs a list of values (got {self.value!r})"
                )
            values = tuple(self.value)
            if len(values) > MAX_VALUES:
                raise InvalidFilterError(
                    f"filter {self.key} {self.op} lists {len(values)} values (at most {MAX_VALUES})"
                )
            object.__setattr__(self, "value", values)

    def to_json(self) -> dict[str, Any]:
        value = list(self.value) if isinstance(self.value, tuple) else self.value
        return {"key": self.key, "op": self.op, "value": value}


@dataclass(frozen=True, slots=True)
class Geo:
    """RFC 0013 ``geo``: a state and/or a metro."""

    state: str | None = None
    metro: str | None = None


@dataclass(frozen=True, slots=True)
class CorpusFilter:
    """RFC 0013 ``CorpusFilter`` plus ``where``: generic conditions on any filterable column.

    ``size_units_range`` and ``date_range`` are inclusive at both ends.
    """

    asset_class: str | tuple[str, ...] | None = None
    geo: Geo | None = None
    size_units_range: tuple[int, int] | None = None
    date_range: tuple[str, str] | None = None
    where: tuple[Condition, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.asset_class is not None and not isinstance(self.asset_class, str):
            # a mapping would become its keys ({"!=": "office"} as "asset_class IN ('!=')")
            if isinstance(self.asset_class, bytes | Mapping) or not isinstance(
                self.asset_class, Iterable
            ):
                raise InvalidFilterError(
                    f"asset_class must be a string or a list of strings (got {self.asset_class!r})"
                )
            object.__setattr__(self, "asset_class", tuple(self.asset_class))
        if self.size_units_range is not None:
            lo, hi = _pair(self.size_units_range, "size_units_range")
            if _number(lo) > _number(hi):
                raise InvalidFilterError(f"size_units_range [{lo}, {hi}] is empty (low > high)")
            object.__setattr__(self, "size_units_range", (lo, hi))
        if self.date_range is not None:
            start, end = _pair(self.date_range, "date_range")
            if _iso_date(start, "date_range") > _iso_date(end, "date_range"):
                raise InvalidFilterError(f"date_range [{start}, {end}] is empty (start > end)")
            object.__setattr__(self, "date_range", (start, end))
        object.__setattr__(self, "where", tuple(self.where))

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> CorpusFilter:
        """A filter from its JSON shape: RFC keys, plus ``column: value`` (a list means ``in``)
        or ``column: {op: value}`` for any other filterable column (and ``asset_class``).

        Raises:
            InvalidFilterError: a key or value has the wrong shape.
        """
        if not isinstance(doc, Mapping):
            raise InvalidFilterError(f"a filter must be a mapping (got {type(doc).__name__})")
        geo = doc.get("geo")
        if geo is not None:
            if not isinstance(geo, Mapping) or set(geo) - {"state", "metro"}:
                raise InvalidFilterError(f"filter 'geo' takes only state and metro (got {geo!r})")
            geo = Geo(state=geo.get("state"), metro=geo.get("metro"))
        where: list[Condition] = []
        for key, value in doc.items():
            if key in ("geo", "size_units_range", "date_range"):
                continue
            if key == "asset_class" and not isinstance(value, Mapping):
                continue  # a class or a list of them: the RFC field
            if isinstance(value, Mapping):  # ``column: {op: value}``, asset_class's too
                where.extend(Condition(str(key), str(op), v) for op, v in value.items())
            elif isinstance(value, list | tuple):
                where.append(Condition(str(key), "in", tuple(value)))
            else:
                where.append(Condition(str(key), "=", value))
        asset_class = doc.get("asset_class")
        return cls(
            asset_class=None if isinstance(asset_class, Mapping) else asset_class,
            geo=geo,
            # checked as pairs by the constructor (a number or a mapping is no range)
            size_units_range=doc.get("size_units_range"),
            date_range=doc.get("date_range"),
            where=tuple(where),
        )

    def with_conditions(self, *conditions: Condition) -> CorpusFilter:
        """This filter with more conditions ANDed on."""
        return CorpusFilter(
            asset_class=self.asset_class,
            geo=self.geo,
            size_units_range=self.size_units_range,
            date_range=self.date_range,
            where=(*self.where, *conditions),
        )

    def conditions(self) -> list[Condition]:
        """Every part of the filter as generic conditions (all of them must hold)."""
        out: list[Condition] = []
        if isinstance(self.asset_class, str):
            out.append(Condition("asset_class", "=", self.asset_class))
        elif self.asset_class is not None:
            out.append(Condition("asset_class", "in", self.asset_class))
        if self.geo is not None:
            if self.geo.state is not None:
                out.append(Condition("state", "=", self.geo.state))
            if self.geo.metro is not None:
                out.append(Condition("metro", "=", self.geo.metro))
        if self.size_units_range is not None:
            lo, hi = self.size_units_range
            out += [Condition("units", ">=", lo), Condition("units", "<=", hi)]
        if self.date_range is not None:
            start, end = self.date_range
            out += [Condition("deal_date", ">=", start), Condition("deal_date", "<=", end)]
        out.extend(self.where)
        return out

    def is_empty(self) -> bool:
        return not self.conditions()

    def to_json(self) -> dict[str, Any]:
        return {"conditions": [c.to_json() for c in self.conditions()]}


#: What a search accepts as ``filters``.
FilterSpec: TypeAlias = CorpusFilter | Mapping[str, Any] | Sequence[Condition] | None


def as_filter(spec: FilterSpec) -> CorpusFilter:
    """Normalize any accepted filter spelling to a :class:`CorpusFilter`."""
    if spec is None:
        return CorpusFilter()
    if isinstance(spec, CorpusFilter):
        return spec
    if isinstance(spec, Mapping):
        return CorpusFilter.from_json(spec)
    conditions = list(spec)
    bad = [c for c in conditions if not isinstance(c, Condition)]
    if bad:
        raise InvalidFilterError(f"filters must be Condition objects (got {bad[0]!r})")
    return CorpusFilter(where=tuple(conditions))


def parse_expression(text: str) -> list[Condition]:
    """Conditions from one CLI ``--filter``: ``key=value``, ``key>=value``, ``key=a,b`` (in),
    ``key!=a,b`` (not in), ``size_units_range=lo,hi``, ``date_range=start,end``.

    Values are split on commas CSV-style, so ``metro="Washington, DC"`` is one value.

    Raises:
        InvalidFilterError: the expression has no operator or the wrong number of values.
    """
    m = _EXPRESSION.match(text)
    if not m:
        raise InvalidFilterError(
            f"cannot read filter {text!r}: use key=value, key>=value or key=a,b"
        )
    key, op, raw = m.group(1), m.group(2), m.group(3)
    values = _split_values(raw)
    if key in ("size_units_range", "date_range"):
        if op != "=" or len(values) != 2:
            raise InvalidFilterError(
                f"filter {key} takes two values: {key}=low,high (got {text!r})"
            )
        column = "units" if key == "size_units_range" else "deal_date"
        return [Condition(column, ">=", values[0]), Condition(column, "<=", values[1])]
    if len(values) > 1:
        if op not in ("=", "!="):
            raise InvalidFilterError(
                f"filter {text!r}: a list of values needs = or != (in / not in)"
            )
        return [Condition(key, "in" if op == "=" else "not in", tuple(values))]
    return [Condition(key, op, values[0] if values else "")]


def parse_expressions(texts: Iterable[str]) -> CorpusFilter:
    """A filter from repeated CLI ``--filter`` options (all must hold)."""
    conditions: list[Condition] = []
    for text in texts:
        conditions.extend(parse_expression(text))
    return CorpusFilter(where=tuple(conditions))


def filterable_columns(schema: pa.Schema) -> dict[str, type]:
    """Column name -> Python type of every scalar column of ``schema`` a filter may name."""
    out: dict[str, type] = {}
    for f in schema:
        if f.name in NOT_FILTERABLE or f.name.startswith("_"):
            continue
        t = f.type
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            out[f.name] = str
        elif pa.types.is_boolean(t):
            out[f.name] = bool
        elif pa.types.is_integer(t):
            out[f.name] = int
        elif pa.types.is_floating(t):
            out[f.name] = float
    return out


def compile_filter(spec: FilterSpec, columns: Mapping[str, type]) -> str:
    """The predicate for ``spec`` over a table with ``columns`` ('' when there is nothing to filter).

    Args:
        spec: the filter, in any accepted spelling.
        columns: filterable column -> Python type (see :func:`filterable_columns`).

    Raises:
        InvalidFilterError: an unknown key, an unsupported operator, or a value that is not of
            the column's type.
    """
    parts = [_compile(c, columns) for c in as_filter(spec).conditions()]
    return predicates.all_of(parts) if parts else ""


def _compile(cond: Condition, columns: Mapping[str, type]) -> str:
    name = ALIASES.get(cond.key, cond.key)
    if name not in columns:
        err = InvalidFilterError(f"unknown filter key {cond.key!r}")
        err.add_note(f"filterable keys: {', '.join(sorted(columns))}")
        raise err
    if name == DEAL_DATE and OWN_DATE in columns:
        # a message has no deal_date (a deal's event_date is its deal_date): a deal's date
        # read alone would match no message and say nothing
        own = (
            _span(cond, columns)
            if OWN_END in columns
            else _condition(cond, OWN_DATE, columns[OWN_DATE])
        )
        return predicates.any_of(
            [
                _condition(cond, name, columns[name]),
                predicates.all_of([predicates.is_null(DEAL_DATE), own]),
            ]
        )
    return _condition(cond, name, columns[name])


def _span(cond: Condition, columns: Mapping[str, type]) -> str:
    """A deal's date condition on a row's span of days, from ``event_date`` to
    ``event_date_end``: a bound holds where the span reaches it (``>=``/``>`` on the last day,
    ``<=``/``<`` on the first), so a range holds where it overlaps the span; a day (``=``,
    ``in``) holds where it falls inside the span, and ``!=``/``not in`` where none does."""
    first, last = OWN_DATE, OWN_END
    if cond.op in (">=", ">"):
        return predicates.compare(last, cond.op, _coerce(last, str, cond.value))
    if cond.op in ("<=", "<"):
        return predicates.compare(first, cond.op, _coerce(first, str, cond.value))
    days = (cond.value,) if cond.op in ("=", "!=") else cond.value
    days = tuple(_coerce(first, str, d) for d in days)
    if cond.op in ("=", "in"):
        return predicates.any_of(
            predicates.all_of(
                [predicates.compare(first, "<=", d), predicates.compare(last, ">=", d)]
            )
            for d in days
        )
    if not days:  # ``not in []``: every row that has days, as on one column
        return predicates.not_in(first, [])
    return predicates.all_of(
        predicates.any_of([predicates.compare(first, ">", d), predicates.compare(last, "<", d)])
        for d in days
    )


def _condition(cond: Condition, name: str, kind: type) -> str:
    if cond.op in ("in", "not in"):
        values = [_coerce(name, kind, v) for v in cond.value]
        return (predicates.is_in if cond.op == "in" else predicates.not_in)(name, values)
    value = _coerce(name, kind, cond.value)
    if cond.op == "=":
        return predicates.eq(name, value)
    return predicates.compare(name, cond.op, value)


def _coerce(name: str, kind: type, value: Any) -> Any:
    """``value`` as the column's type (CLI values arrive as strings)."""
    if value is None:
        raise InvalidFilterError(f"filter {name}: a value is required (got null)")
    if kind is int:
        number = _integer(name, value)
        if not predicates.INT64_MIN <= number <= predicates.INT64_MAX:
            raise InvalidFilterError(f"filter {name} is out of range (got {value!r})")
        return number
    if kind is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            result = float(value)
        elif isinstance(value, str):
            try:
                result = float(value.strip())
            except ValueError:
                raise InvalidFilterError(
                    f"filter {name} expects a number (got {value!r})"
                ) from None
        else:
            raise InvalidFilterError(f"filter {name} expects a number (got {value!r})")
        if not math.isfinite(result):
            raise InvalidFilterError(f"filter {name} must be finite (got {value!r})")
        return result
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise InvalidFilterError(f"filter {name} expects true or false (got {value!r})")
    # string columns
    if isinstance(value, dt.date | dt.datetime):
        value = value.isoformat()
    elif isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise InvalidFilterError(f"filter {name} expects text (got {type(value).__name__})")
    if name in DATE_COLUMNS:
        return _iso_date(value, name).isoformat()
    return value


def _integer(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise InvalidFilterError(f"filter {name} expects an integer (got {value!r})")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise InvalidFilterError(f"filter {name} expects an integer (got {value!r})")


def _iso_date(value: Any, name: str) -> dt.date:
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(str(value).strip())
    except ValueError:
        raise InvalidFilterError(
            f"filter {name} expects an ISO date YYYY-MM-DD (got {value!r})"
        ) from None


def _pair(value: Any, name: str) -> tuple[Any, Any]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence) or len(value) != 2:
        raise InvalidFilterError(f"{name} must be a pair [low, high] (got {value!r})")
    return value[0], value[1]


def _number(value: Any) -> float:
    if isinstance(value, bool):
        raise InvalidFilterError(f"size_units_range bounds must be integers (got {value!r})")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InvalidFilterError(
            f"size_units_range bounds must be integers (got {value!r})"
        ) from None


def _split_values(raw: str) -> list[str]:
    if raw.strip() == "":
        return [""]
    if "," not in raw and '"' not in raw:
        return [raw.strip()]
    try:
        rows = list(csv.reader([raw], skipinitialspace=True, strict=True))
    except csv.Error as exc:
        raise InvalidFilterError(f"cannot split filter values {raw!r}: {exc}") from None
    return [v.strip() for v in rows[0]] if rows else [""]
