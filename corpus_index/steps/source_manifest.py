"""The ``source_manifest`` step: scan a collection; a removed document leaves every store."""

from __future__ import annotations

from dataclasses import dataclass

from corpus_index.deletion import WITHDRAWN, delete_removed
from corpus_index.embedding import config_input_rule
from corpus_index.home import Home
from corpus_index.identity_store import source_fingerprint
from corpus_index.sources import ManifestResult, scan_manifest


@dataclass(frozen=True, slots=True)
class ManifestOutcome:
    """The scan of one collection, and the deletion receipt of what it found removed."""

    manifest: ManifestResult
    receipt: str | None  # the receipt file's path; None when nothing was removed
    # the collection's fingerprint (``kinds.fingerprint``) taken before the scan: a watcher
    # that sees this value has nothing newer to ingest
    fingerprint: str = ""


def run(home: Home, collection: str) -> ManifestOutcome:
    """Scan the collection (``collection`` is its partition key: a shard scans only the
    documents it owns); a removed document is deleted from every store at once.

    Returns:
        The manifest's counts, and the path of the deletion receipt when documents went.
    """
    config = home.collection(collection)
    before = source_fingerprint(home.settings.home, config, rule=config_input_rule(home.config))
    previous = home.warehouse.read("source_manifest", (collection,))
    withdrawn = home.registry.tombstoned(config.name, WITHDRAWN)
    prefix = f"{config.name}/"
    result = scan_manifest(
        config,
        previous,
        withdrawn={s.removeprefix(prefix) for s in withdrawn},
    )
    changes = result.table.select(["source_id", "change"]).to_pylist()
    removed = [r["source_id"] for r in changes if r["change"] == "removed"]
    added = [r["source_id"] for r in changes if r["change"] == "added"]
    home.registry.lift_tombstones(added)
    receipt = delete_removed(
        home,
        config.name,
        removed,
        namespace=config.namespace,
        partition=collection,
        withdrawn=withdrawn,
    )
    home.warehouse.write("source_manifest", (collection,), result.table)
    return ManifestOutcome(
        manifest=result,
        receipt=receipt.path if receipt is not None else None,
        fingerprint=before,
    )


def withdrawals_pending(home: Home, collection: str) -> bool:
    """Whether a source withdrawn from the index (``CorpusIndex.remove``: its file stays, so
    the files' fingerprint does not change) is still live in the partition's last scan: its
    next ``source_manifest`` has a deletion to carry out."""
    config = home.collection(collection)
    withdrawn = {
        s
        for s in home.registry.tombstoned(config.name, WITHDRAWN)
        if config.owns(s.removeprefix(f"{config.name}/"))
    }
    if not withdrawn:
        return False
    manifest = home.warehouse.read(
        "source_manifest", (collection,), columns=["source_id", "change"]
    )
    if manifest is None:
        return True
    return any(
        s in withdrawn and change != "removed"
        for s, change in zip(
            manifest["source_id"].to_pylist(), manifest["change"].to_pylist(), strict=True
        )
    )
