"""Moving a home's stores to an object store: ``corpus storage copy --to s3://bucket/prefix``.

The warehouse, the LanceDB tables (their files as they are: a table's manifest names its files
relative to the table), the exports and the deletion receipts are copied file by file, under
the home's lock so no sync writes meanwhile; then the copy is compared with the source, file by
file and byte count by byte count. A marker under the target names the source while the copy
runs, so a copy of the same home run again after one was cut short clears what it left and
starts over, where a prefix holding other stores is refused; no home serves from a prefix
where it is still there (``storage.finished_stores``). The home then serves from the copy once
``CORPUS_STORAGE`` names it; what is per-machine (the registry, the lock, Dagster's folder, alerts, reports)
stays in the home folder. Receipts that tombstones name by their old path are found by name
among the copied ones (``receipt_location``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from corpus_index.config import Settings
from corpus_index.errors import ConfigError
from corpus_index.homelock import home_lock_of
from corpus_index.storage import UNFINISHED_COPY, Location, copy_tree, parse_storage_uri

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
            lies inside one of them or holds one (both named),
            or already holds stores (named; copy to an empty prefix) other than what a copy
            of this home cut short left; a store holds a symbolic link (named; nothing is
            copied).
        HomeBusyError: a sync or promotion holds the home longer than ``wait_s``.
        OSError: the copy differs from its source (the file named) or cannot be written.
    """
    uri = parse_storage_uri(target, key="--to")
    destination = Location.of(uri)
    if destination == settings.stores:
        raise ConfigError(f"--to {uri}: the stores already live there")
    _refuse_overlap(uri, settings.stores, destination)
    # under the target while the copy runs, naming its source: a copy of the same home run
    # again after one was cut short clears what it left and starts over, and no home serves
    # from what it left (``finished_stores``)
    marker = destination / UNFINISHED_COPY
    report = CopyReport(source=str(settings.stores), target=uri)
    with home_lock_of(settings, f"storage copy to {uri}", wait_s=wait_s):
        held = [name for name in STORES if (destination / name).walk()]
        if held and _unfinished_from(marker) == report.source:
            # what a copy of this home cut short left: cleared, not merged into (a file the
            # home has removed since, a deleted source's partition say, would stay there)
            for name in held:
                (destination / name).rmtree()
        elif held:
            raise ConfigError(
                f"--to {uri}: already holds {', '.join(held)}; copy to an empty prefix "
                "(a copy never merges into or overwrites another home's stores)"
            )
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
        marker.write_text(json.dumps({"source": report.source}) + "\n")
        for name in STORES:
            source = settings.stores / name
            written = copy_tree(source, destination / name)
            report.stores[name] = {
                "files": len(written),
                "bytes": _check(source, destination / name),
            }
        marker.unlink(missing_ok=True)
    return report


def _refuse_overlap(uri: str, stores: Location, destination: Location) -> None:
    """Refuse a target whose stores would lie inside the home's own, or hold them: the copy
    would write into its own source (and copy what it wrote), or clear it as left over."""
    for name in STORES:
        source = stores / name
        for copied in (destination / n for n in STORES):
            if copied.is_relative_to(source):
                raise ConfigError(
                    f"--to {uri}: the copy's {copied.name} store {copied} would be inside "
                    f"the home's {name} store {source}; copy to a prefix outside {stores}"
                )
            if source.is_relative_to(copied):
                raise ConfigError(
                    f"--to {uri}: the copy's {copied.name} store {copied} would hold the "
                    f"home's {name} store {source} (the stores live inside {uri}); copy to a "
                    "prefix that neither is inside the stores nor holds them"
                )


def _unfinished_from(marker: Location) -> str | None:
    """The stores a copy that did not finish was copying from, as its marker names them."""
    try:
        return str(json.loads(marker.read_text(encoding="utf-8"))["source"])
    except FileNotFoundError:
        return None
    except (ValueError, TypeError, KeyError):
        return ""  # unreadable: not known to be this home's


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
