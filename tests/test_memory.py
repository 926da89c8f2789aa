"""Giving freed memory back between pipeline steps (corpus_index.memory)."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap

import pytest

from corpus_index import memory

linux_glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or memory._libc() is None, reason="glibc only"
)


def rss_anon_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no RssAnon in /proc/self/status")


@linux_glibc
def test_release_gives_freed_fragmented_heap_back() -> None:
    # 2 KiB objects come from malloc (pymalloc serves only up to 512 bytes); keeping one in 64
    # alive pins the heap's top, so free() alone cannot shrink it
    blocks = [bytearray(2048) for _ in range(100_000)]
    kept = blocks[::64]
    before = rss_anon_mib()
    del blocks
    after_free = rss_anon_mib()
    memory.release()
    after_release = rss_anon_mib()
    assert before - after_free < 50, "free() alone already returned it: the test proves nothing"
    assert after_free - after_release > 100, (before, after_free, after_release)
    assert len(kept) == 1563


# In a fresh process: free one 4 MiB block (glibc then raises its mmap threshold to 4 MiB),
# then allocate and touch 64 blocks of 2 MiB, and free every other one (the ones kept pin the
# heap around each hole). Prints how much resident memory free() alone gave back.
_FREED_LARGE_BLOCKS = textwrap.dedent(
    """
    import ctypes, sys
    from corpus_index import memory
    if sys.argv[1] == "configured":
        memory.configure()
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    def rss():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) / 1024 for l in f if l.startswith("RssAnon"))
    libc.free(libc.malloc(4 << 20))
    blocks = [libc.malloc(2 << 20) for _ in range(64)]
    for p in blocks:
        ctypes.memset(p, 1, 2 << 20)
    before = rss()
    for p in blocks[::2]:
        libc.free(p)
    print(before - rss())
    """
)


@linux_glibc
def test_configure_returns_freed_large_blocks_without_a_trim() -> None:
    def given_back(mode: str) -> float:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
        out = subprocess.run(
            [sys.executable, "-c", _FREED_LARGE_BLOCKS, mode],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
        return float(out.stdout.strip())

    # glibc's own behaviour: the freed 2 MiB blocks stay resident (else the test proves nothing)
    assert given_back("default") < 16
    assert given_back("configured") > 48  # 64 MiB freed, unmapped at once


def test_the_environment_bounds_the_fts_build_buffer_and_configure_is_idempotent() -> None:
    from corpus_index.environment import configure_environment

    environ: dict[str, str] = {}
    configure_environment(environ)
    assert environ["LANCE_FTS_PARTITION_SIZE"] == memory.FTS_PARTITION_MIB
    environ = {"LANCE_FTS_PARTITION_SIZE": "512"}
    configure_environment(environ)
    assert environ["LANCE_FTS_PARTITION_SIZE"] == "512"  # the operator's setting wins
    memory.configure.cache_clear()
    first = memory.configure()
    assert memory.configure() is first  # once per process


@linux_glibc
def test_configure_points_arrow_at_malloc_unless_the_environment_chose(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pyarrow as pa

    try:
        monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
        pa.set_memory_pool(pa.mimalloc_memory_pool())
        memory.configure.cache_clear()
        memory.configure()
        assert pa.default_memory_pool().backend_name == "system"

        monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "mimalloc")
        pa.set_memory_pool(pa.mimalloc_memory_pool())
        memory.configure.cache_clear()
        memory.configure()
        assert pa.default_memory_pool().backend_name == "mimalloc"  # the operator's choice
    finally:
        monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
        memory.configure.cache_clear()
        memory.configure()


def test_releasing_keeps_the_signature_and_releases_on_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(memory, "release", lambda: calls.append("release"))

    @memory.releasing
    def step(context: object, corpus: object, *, n: int = 1) -> int:
        calls.append("step")
        if n < 0:
            raise ValueError("bad n")
        return n * 2

    # Dagster injects context and resources by parameter name: the signature must show through
    assert list(inspect.signature(step).parameters) == ["context", "corpus", "n"]
    assert step(None, None, n=3) == 6
    with pytest.raises(ValueError, match="bad n"):
        step(None, None, n=-1)
    assert calls == ["step", "release", "step", "release"]
