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

A confirmation is a check before the write, not a condition of it: a holder paused between
the confirmation and its commit (SIGSTOP, a frozen VM, a long garbage collection) could commit
after its lock passed on. A registry transaction in the lock's own database closes that gap:
each lock carries a fencing token, a number every exclusive taker bumps in the database, and
the transaction checks inside itself, just before it commits, that the token is still the one
its holder took (:func:`check_fences`). LanceDB's and the warehouse's files have no such
condition to check; their writes rely on the confirmation alone.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from typing import Any, Protocol


class LosableLock(Protocol):
    """A held lock that can end without its holder letting it go."""

    def confirm(self) -> None:
        """Return if the lock is still held.

        Raises:
            LockLostError: it is not; the message names what it locked.
        """

    def check_fence(self, cursor: Any, database: str) -> None:
        """Inside the open transaction of ``cursor`` (psycopg2's, on the database at the URL
        ``database``), check that no other holder took the lock since this one did, and keep
        the next taker waiting until the transaction ends; a lock kept in another database
        checks nothing.

        Raises:
            LockLostError: another holder took the lock since; the message names it.
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


def check_fences(cursor: Any, database: str) -> None:
    """Check, inside the open transaction of ``cursor`` on the database at ``database``, the
    fencing token of every losable lock this thread holds in that database (see the module's
    docstring): the last statement before a registry transaction commits.

    Raises:
        LockLostError: another holder took one of them since this thread did.
    """
    for lock in held():
        lock.check_fence(cursor, database)
