"""A configured collection: its root, kind, owner and limits.

Apart from ``config`` (which loads and validates it, and re-exports it) so that the collection
kinds, which read collections, sit below the configuration that names them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from corpus_index.limits import Limits


@dataclass(frozen=True, slots=True)
class CollectionConfig:
    """A configured source root of one kind, owned by one tenant."""

    name: str
    kind: str
    path: Path
    tenant: str
    acl_groups: tuple[str, ...]
    tier: str = "restricted"
    namespace: str = "default"
    limits: Limits = Limits()
    # a symlinked document whose target lies outside ``path`` is refused unless this is on
    follow_symlinks_outside_root: bool = False
