"""Giving freed memory back between pipeline steps (corpus_index.memory)."""

from __future__ import annotations

import inspect
import os
import sys

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


def test_configure_bounds_the_fts_build_buffer_and_is_idempotent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LANCE_FTS_PARTITION_SIZE", raising=False)
    memory.configure.cache_clear()
    first = memory.configure()
    assert os.environ["LANCE_FTS_PARTITION_SIZE"] == memory.FTS_PARTITION_MIB
    assert memory.configure() is first  # once per process
    monkeypatch.setenv("LANCE_FTS_PARTITION_SIZE", "512")
    memory.configure.cache_clear()
    memory.configure()
    assert os.environ["LANCE_FTS_PARTITION_SIZE"] == "512"  # the operator's setting wins


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
