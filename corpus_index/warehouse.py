"""The Parquet warehouse: one file per asset and partition, written atomically."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


class Warehouse:
    """Parquet files under ``root/<asset>/<partition...>.parquet``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, asset: str, *partition: str) -> Path:
        if not partition:
            return self.root / asset / "data.parquet"
        *dirs, last = partition
        return self.root.joinpath(asset, *dirs, f"{last}.parquet")

    def write(self, asset: str, partition: tuple[str, ...], table: pa.Table) -> Path:
        """Replace one partition; readers see the old file or the new one, never half of either."""
        path = self.path(asset, *partition)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        try:
            pq.write_table(table, tmp, compression="zstd")
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    def read(
        self, asset: str, partition: tuple[str, ...], schema: pa.Schema | None = None
    ) -> pa.Table | None:
        """The partition's table, or None if it was never written."""
        path = self.path(asset, *partition)
        if not path.is_file():
            return None
        table = pq.read_table(path)
        return table.cast(schema) if schema is not None else table

    def delete(self, asset: str, partition: tuple[str, ...]) -> bool:
        path = self.path(asset, *partition)
        if path.is_file():
            path.unlink()
            return True
        return False

    def delete_collection(self, collection: str) -> list[str]:
        """Remove every partition file of ``collection`` across assets; returns what was removed."""
        removed: list[str] = []
        if not self.root.is_dir():
            return removed
        for path in sorted(self.root.rglob(f"{collection}.parquet")):
            path.unlink()
            removed.append(str(path))
        for path in sorted(self.root.rglob(collection)):
            if path.is_dir():
                shutil.rmtree(path)
                removed.append(str(path))
        return removed
