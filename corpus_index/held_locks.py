"""The locks a thread holds that can be lost while held, confirmed before it publishes.

A lock in the registry's PostgreSQL database (``corpus_index.homelock``'s advisory locks)
lives as long as the database session that took it: a restart of the database, or the
session ended by an administrator, lets it go without a word to its holder, and a holder on
another machine may take it meanwhile. Code about to publish what it wrote (put a warehouse
partition in place, commit a generation's rows) calls :func:`confirm_held` first, so a step
that lost its lock fails before its writes are seen, rather than publishing beside another
writer.

Holds are kept per thread, as the locks themselves are (``homelock``'s reentrancy): a lock
guards the writes of the thread that took it, a step's, and a step publishes on its own
thread (``warehouse.Background`` writes on workers and puts the files in place on the
caller's). Where another thread finishes the write (LanceDB reads a stream of rows on threads
of its own, and commits once it has read the end), the holder takes :func:`held` and that
thread confirms those. A thread that holds no such lock confirms nothing, at no cost.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from typing import Protocol


class LosableLock(Protocol):
    """A held lock that can end without its holder letting it go."""

    def confirm(self) -> None:
        """Return if the lock is still held.

        Raises:
            LockLostError: it is not; the message names what it locked.
        """


# thread -> the losable locks it holds, in the order taken
_HELD: dict[int, list[LosableLock]] = {}


@contextlib.contextmanager
def holding(lock: LosableLock) -> Iterator[None]:
    """Record ``lock`` as held by this thread while the block runs (:func:`confirm_held`
    confirms it)."""
    thread = threading.get_ident()
    mine = _HELD.setdefault(thread, [])
    mine.append(lock)
    try:
        yield
    finally:
        mine[:] = [other for other in mine if other is not lock]
        if not mine:
            _HELD.pop(thread, None)


def held() -> tuple[LosableLock, ...]:
    """The losable locks this thread holds, for another thread that finishes its write to
    confirm (:func:`confirm_held`)."""
    return tuple(_HELD.get(threading.get_ident(), ()))


def confirm_held(locks: Iterable[LosableLock] | None = None) -> None:
    """Confirm that every losable lock this thread holds (or ``locks``, which another
    thread's :func:`held` gave) is held still: one query of the registry's database per lock,
    nothing when there is none.

    Raises:
        LockLostError: one was lost; the message names it and says that nothing was published.
    """
    for lock in held() if locks is None else tuple(locks):
        lock.confirm()
