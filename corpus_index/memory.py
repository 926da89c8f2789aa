"""Keeping a long pipeline process's memory bounded: allocator settings and giving freed memory
back to the operating system between steps.

LanceDB's engine allocates through glibc's ``malloc`` on many worker threads. glibc gives each
thread that contends its own arena (up to 8 per core) and keeps what a thread freed in that arena,
so a process that writes 40,000 rows to LanceDB holds on to most of the memory the write used,
long after it was freed (measured: 225 MiB still resident after four 10,000-row ``add`` calls,
50 MiB with two arenas and a trim). Worse, glibc raises its ``mmap`` threshold to the size of
the largest block freed so far (up to 32 MiB), so after the first large Arrow buffer is freed,
every later one of that size lands in an arena and stays resident after ``free``, until a
trim: a step that decodes a Parquet row group after another held each one's freed pages, and
peaked higher the more row groups it read. Arrow's own pool (mimalloc) keeps freed pages the
same way. ``configure()`` caps the arenas at two, fixes the ``mmap`` threshold at 1 MiB (a
larger block is mapped on its own and unmapped when freed) and points Arrow at ``malloc``;
``release()``
returns Arrow's unused pool memory and trims the ``malloc`` heap, in about a millisecond. It
runs no garbage collection: Arrow buffers are freed by reference counting, and a full
collection costs 0.45 s in a process with Dagster loaded. Both do nothing where glibc is not
the C library.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

M_ARENA_MAX = -8  # glibc's mallopt parameter number for the arena cap
ARENA_MAX = 2
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number for the mmap threshold
# blocks of this size and up get their own mapping, returned to the system by free(); setting
# it also stops glibc from raising it (and the trim threshold) as large blocks are freed
MMAP_THRESHOLD = 1 << 20
# LanceDB's full-text index builder buffers up to this many MiB per worker before it spills a
# part to disk (read once per process, from the environment, at the first index build; set by
# corpus_index.environment)
FTS_PARTITION_MIB = "64"

F = TypeVar("F", bound=Callable[..., Any])


@functools.cache
def _libc() -> Any | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    if not hasattr(libc, "malloc_trim") or not hasattr(libc, "mallopt"):
        return None  # not glibc (musl, macOS)
    return libc


@functools.cache
def configure() -> bool:
    """Cap glibc's malloc arenas, fix its ``mmap`` threshold, allocate Arrow buffers with
    ``malloc``, and bound LanceDB's FTS build buffer, once per process. Returns whether the
    arena cap was set. ``MALLOC_ARENA_MAX``, ``MALLOC_MMAP_THRESHOLD_`` and
    ``ARROW_DEFAULT_MEMORY_POOL`` in the environment win.

    Measured at 20,000 and 40,000 generated deals, one step in a fresh process: the fixed
    threshold took ``index_rows``'s peak from 759 / 912 MiB to 702 / 769 MiB, and an IVF_PQ
    build over 80,000 / 160,000 vectors from a rise of 346 / 401 MiB to 318 / 324 MiB, in
    the same time. (``LANCE_FTS_PARTITION_SIZE`` is one of the process defaults that
    ``corpus_index.environment.configure_environment`` sets.)"""
    libc = _libc()
    if libc is None:
        return False
    if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:
        _use_system_arrow_pool()
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    return bool(libc.mallopt(M_ARENA_MAX, ARENA_MAX))


def _use_system_arrow_pool() -> None:
    """Arrow's bundled mimalloc pool keeps the pages a step freed: after a 20,000-deal
    ``index_rows`` it held 150 MiB more than ``malloc`` does once trimmed, with nothing
    allocated, and the step peaked 120 MiB higher. Where glibc's ``malloc`` is the C library,
    Arrow allocates through it, so ``release()`` gives everything back."""
    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        return
    pa.set_memory_pool(pa.system_memory_pool())


def release() -> None:
    """Give memory already freed by Python, Arrow and native code back to the operating system."""
    try:
        import pyarrow as pa

        pa.default_memory_pool().release_unused()
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        pass
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


def releasing(fn: F) -> F:
    """Decorate an asset's compute function: whatever its step allocated and freed is released
    when it returns (by then the step's tables, held until the function's metadata was built,
    are freed too)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            release()

    return wrapper  # type: ignore[return-value]
