"""Where a document's RFC 0013 sidecar lives, per profile.

By default every profile's sidecars sit under the home:
``exports/sidecars/<profile>/<collection>/<doc_id>.embeddings.json``. A collection configured
with ``sidecars: beside`` gets the sidecars of its namespace's first profile (configuration
order) next to each source file instead, ``<doc_id>.embeddings.json`` beside
``<doc_id>.uw.md``, as the RFC draws it, so the vectors travel with the folder; the other
profiles of the namespace (a model being migrated to) stay under the home, as one file name
beside a document can hold one model only.
"""

from __future__ import annotations

from pathlib import Path

from corpus_index.collection import CollectionConfig
from corpus_index.config import CorpusConfig, Settings
from corpus_index.sidecars import SIDECAR_SUFFIX
from corpus_index.storage import Location


def beside_profile(config: CorpusConfig, collection: CollectionConfig) -> str | None:
    """The profile whose sidecars sit beside the collection's source files, if any."""
    if collection.sidecars != "beside":
        return None
    profiles = config.profiles_in(collection.namespace)
    return profiles[0].name if profiles else None


def sidecar_folder(
    settings: Settings, config: CorpusConfig, profile: str, collection: CollectionConfig
) -> Location:
    """The folder that holds ``profile``'s sidecars of ``collection`` (doc_ids below it)."""
    if beside_profile(config, collection) == profile:
        return Location.local(collection.path)
    return home_sidecar_folder(settings, profile, collection.name)


def home_sidecar_folder(settings: Settings, profile: str, collection: str) -> Location:
    """Where ``profile``'s sidecars of ``collection`` sit with the stores (the home folder or
    the object store)."""
    return settings.exports / "sidecars" / profile / collection


def beside_source(collection: CollectionConfig, doc_id: str) -> Path:
    """The sidecar a document carries next to its source file (whoever wrote it)."""
    return collection.path / f"{doc_id}{SIDECAR_SUFFIX}"
