"""Moving a home's stores to an object store: ``corpus storage copy --to s3://bucket/prefix``.

The warehouse, the LanceDB tables (their files as they are: a table's manifest names its files
relative to the table), the exports and the deletion receipts are copied file by file, under
the home's lock so no sync writes meanwhile; then the copy is compared with the source, file by
file and byte count by byte count. The home then serves from the copy once ``CORPUS_STORAGE``
names it; what is per-machine (the registry, the lock, Dagster's folder, alerts, reports)
stays in the home folder. Receipts that tombstones name by their old path are found by name
among the copied ones (``receipt_location``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corpus_index.config import Settings
from corpus_index.errors import ConfigError
from corpus_index.homelock import home_lock_of
from corpus_index.storage import Location, copy_tree, parse_storage_uri

STORES = ("warehouse", "lance", "exports", "receipts")


@dataclass(slots=True)
class CopyReport:
    """What was copied, per store: files and bytes."""

    source: str
    target: str
    stores: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "stores": self.stores}


def copy_stores(settings: Settings, target: str, *, wait_s: float = 0.0) -> CopyReport:
    """Copy the stores of ``settings`` under ``target`` (``s3://bucket/prefix``) and check the
    copy against them.

    Raises:
        ConfigError: ``target`` is not an object-store URI, is where the stores are already,
            or already holds stores (named; copy to an empty prefix); a store holds a symbolic
            link (named; nothing is copied).
        HomeBusyError: a sync or promotion holds the home longer than ``wait_s``.
        OSError: the copy differs from its source (the file named) or cannot be written.
    """
    uri = parse_storage_uri(target, key="--to")
    destination = Location.of(uri)
    if destination == settings.stores:
        raise ConfigError(f"--to {uri}: the stores already live there")
    held = [name for name in STORES if (destination / name).walk()]
    if held:
        raise ConfigError(
            f"--to {uri}: already holds {', '.join(held)}; copy to an empty prefix "
            "(a copy never merges into or overwrites another home's stores)"
        )
    report = CopyReport(source=str(settings.stores), target=uri)
    with home_lock_of(settings, f"storage copy to {uri}", wait_s=wait_s):
        for name in STORES:
            # a listing never follows a link, so a copy would leave out what one points to
            # and its check, which compares the same listings, would pass
            links = (settings.stores / name).links()
            if links:
                raise ConfigError(
                    f"{links[0]}: a symbolic link in the {name} store ({len(links)} in all), "
                    "which a copy does not follow; put what it points to in its place, then "
                    "copy again"
                )
        for name in STORES:
            source = settings.stores / name
            written = copy_tree(source, destination / name)
            report.stores[name] = {
                "files": len(written),
                "bytes": _check(source, destination / name),
            }
    return report


def _check(source: Location, copy: Location) -> int:
    """The bytes under ``source``, once every file is found under ``copy`` with its size."""
    sizes = {str(f.relative_to(copy)): f.size() for f in copy.walk()}
    total = 0
    for f in source.walk():
        name = str(f.relative_to(source))
        if sizes.get(name) != f.size():
            raise OSError(f"{copy / name}: the copy differs from {f} (size {sizes.get(name)})")
        total += f.size()
    return total


def receipt_location(settings: Settings, recorded: str) -> Location:
    """The receipt a tombstone names: where it was written, or (the stores moved since) the
    receipt of the same name among the stores' receipts."""
    where = Location.of(recorded)
    if where.is_file():
        return where
    return settings.receipts / where.name
