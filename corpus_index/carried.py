"""Records carried over from an earlier run as Arrow rows, followed by records made in this
one: a sequence that builds its Python records only when one is asked for, so a run that
passes the kept rows through (counts them, reads a column, writes them again) never decodes
them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar, overload

import pyarrow as pa

T = TypeVar("T")


class Carried(Sequence[T], Generic[T]):
    """``kept`` rows (records as a table, or none) then the records ``more``.

    Args:
        kept: the rows carried over, in order.
        more: the records made since, in order.
        decode: the records of a table of rows (``kept``'s schema).
        encode: the table of rows of some records (``kept``'s schema).
    """

    def __init__(
        self,
        kept: pa.Table | None,
        more: Sequence[T],
        *,
        decode: Callable[[pa.Table], list[T]],
        encode: Callable[[Iterable[T]], pa.Table],
    ) -> None:
        self.kept = kept
        self.more = list(more)
        self._decode, self._encode = decode, encode
        self._all: list[T] | None = None if kept is not None and kept.num_rows else self.more

    @property
    def kept_rows(self) -> int:
        """How many records are kept rows (the first ones)."""
        return self.kept.num_rows if self.kept is not None else 0

    def then(self, more: Iterable[T]) -> Carried[T]:
        """These records followed by ``more``."""
        return Carried(self.kept, [*self.more, *more], decode=self._decode, encode=self._encode)

    def table(self) -> pa.Table:
        """All the records as rows: the kept rows as they are, the others encoded."""
        more = self._encode(self.more)
        if self.kept is None or not self.kept.num_rows:
            return more
        return pa.concat_tables([self.kept.cast(more.schema), more])

    def column(self, name: str) -> list[Any]:
        """One field of every record, in order (the kept rows' column as it is)."""
        head = self.kept[name].to_pylist() if self.kept is not None else []
        return [*head, *(getattr(r, name) for r in self.more)]

    def _records(self) -> list[T]:
        if self._all is None:
            kept = self._decode(self.kept) if self.kept is not None else []
            self._all = [*kept, *self.more]
        return self._all

    def __len__(self) -> int:
        return self.kept_rows + len(self.more)

    def __iter__(self) -> Iterator[T]:
        return iter(self._records())

    @overload
    def __getitem__(self, i: int) -> T: ...

    @overload
    def __getitem__(self, i: slice) -> list[T]: ...

    def __getitem__(self, i: int | slice) -> T | list[T]:
        return self._records()[i]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Carried | list):
            return list(self) == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"Carried({self.kept_rows} kept rows, {len(self.more)} more)"
