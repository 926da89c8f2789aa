"""A DuckDB registry read that finds the file short: run again while another process puts the
file back, reported damaged (naming the file) when it stays short."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from corpus_index.errors import DamagedRegistryError
from corpus_index.registry import Registry
from corpus_index.registry_sql import SHORT_READ_TRIES
from tests.test_registry import SPEC, ready


def _registry(tmp_path: Path) -> tuple[Registry, str]:
    reg = Registry(tmp_path / "home" / "registry.duckdb", lock_timeout_s=5.0)
    generation = ready(reg, SPEC)
    reg.promote(generation)
    return reg, generation


def _short(reg: Registry, keep: Path) -> None:
    """The registry file cut to half, its whole copy at ``keep``."""
    assert reg.path is not None
    shutil.copy(reg.path, keep)
    os.truncate(reg.path, reg.path.stat().st_size // 2)


def test_a_truncated_registry_is_reported_damaged_naming_the_file(tmp_path: Path) -> None:
    reg, _ = _registry(tmp_path)
    _short(reg, tmp_path / "whole")
    with pytest.raises(DamagedRegistryError) as raised:
        reg.generations()
    message = str(raised.value)
    assert str(reg.path) in message and "Could not read enough bytes" in message
    assert "corpus doctor --repair" in message


def test_a_short_read_while_the_file_is_put_back_is_run_again(tmp_path: Path) -> None:
    reg, generation = _registry(tmp_path)
    assert reg.path is not None
    whole = tmp_path / "whole"
    _short(reg, whole)

    def put_back() -> None:  # as another process finishing with the file would
        time.sleep(0.12)
        shutil.copy(whole, reg.path)

    writer = threading.Thread(target=put_back)
    writer.start()
    try:
        found = reg.generations()
    finally:
        writer.join()
    assert [g.id for g in found] == [generation]
    assert SHORT_READ_TRIES >= 3  # the put-back lands between the first tries
