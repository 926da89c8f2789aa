"""A configured collection: its root, kind, owner and limits.

Apart from ``config`` (which loads and validates it, and re-exports it) so that the collection
kinds, which read collections, sit below the configuration that names them.
"""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from corpus_index import shards as _shards
from corpus_index.hashing import canonical_json, sha256_hex
from corpus_index.limits import Limits

# a control character (NUL among them): no name, id or path part may hold one
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True, slots=True)
class VerifierConfig:
    """The chat model that judges a question's chosen answer (``answer_verifier:``, see
    :mod:`corpus_index.answer_verifier`): its name, the OpenAI-compatible API root (None:
    OpenAI's), the environment variable its key is read from (never the key itself), and the
    sampling options each request carries."""

    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    # sent with each request when set (None: the server's default, which a reasoning model
    # may insist on: it refuses any other temperature, and max_tokens)
    temperature: float | None = None
    max_tokens: int | None = None


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
    # kind-specific settings, validated by the kind (``messages``: the layout, ``jsonl`` or
    # ``irc``, and overrides of its processing profiles, source -> field -> value)
    format: str = ""
    processing: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, hash=False)
    # the people file that seeds the tenant's identity registry (``people:`` in the config,
    # relative to ``path``; checked to exist), or None
    people: Path | None = None
    # the merges file (``merges:``, relative to ``path``): identities known to be one person,
    # applied at every sync before the merges recorded in the home; or None
    merges: Path | None = None
    # where the pipeline writes this collection's RFC 0013 sidecars: ``home`` (under the
    # home's exports) or ``beside`` (``<doc>.embeddings.json`` next to each source file, so
    # the vectors travel with the folder; see ``sidecar_places``)
    sidecars: str = "home"
    # whether a grouped kind's units are linked into groups and identities at each sync
    # (``grouping: false`` leaves the group and identity partitions empty; units are still
    # indexed on their own)
    grouping: bool = True
    # the IANA time zone a grouped kind's days are counted in (``timezone: Australia/Sydney``):
    # a message's event date, and the day it is grouped by, is its local date there; "" for
    # the date in the record's own offset (see ``timezone_problem``)
    timezone: str = ""
    # the chat model that may refuse a question's chosen answer (``answer_verifier:``); None,
    # the default: answers are the scorer's alone and nothing is sent anywhere
    answer_verifier: VerifierConfig | None = None
    # hash shards: the collection runs as this many partitions (``shards.partition_keys``)
    shards: int = 1
    # the one shard this view of the collection holds (``shard_view``); None: all of it
    shard: int | None = None

    @property
    def block_scope(self) -> str:
        """A digest of what the configuration gives every block beyond its document's bytes:
        the kind and its settings (``format``, ``processing``), the tenant, the ACL groups and
        tier a document may only narrow, the limits parsing checks, and the time zone its
        units' days are counted in (where one is set: a collection without one keeps the
        digest it had before the option was known). A document's version
        is of its bytes and of this (:func:`corpus_index.sources.document_version`), so
        narrowing the collection's ACL groups in the configuration parses every document
        again and rebuilds its index rows with the narrower scope (the texts, and so the
        vectors, stay as they were)."""
        scope = {
            "kind": self.kind,
            "format": self.format,
            "processing": self.processing,
            "tenant": self.tenant,
            "acl_groups": sorted(self.acl_groups),
            "tier": self.tier,
            "limits": asdict(self.limits),
        }
        if self.timezone:
            scope["timezone"] = self.timezone
        return sha256_hex(canonical_json(scope))[:16]

    @property
    def partitions(self) -> tuple[str, ...]:
        """The collection's partition keys: its name, or one ``<name>~<nn>`` per shard."""
        return _shards.partition_keys(self.name, self.shards)

    @property
    def partition(self) -> str:
        """This view's partition key (the collection's name when it is not one shard)."""
        return _shards.partition_key(self.name, self.shard, self.shards)

    @property
    def parts(self) -> tuple[CollectionConfig, ...]:
        """One view per partition, in partition order: the collection itself, or its shards."""
        if self.shards <= 1:
            return (self,)
        return tuple(self.shard_view(n) for n in range(self.shards))

    def shard_view(self, shard: int) -> CollectionConfig:
        """The collection as its shard ``shard`` sees it: only the documents it owns."""
        return replace(self, shard=shard)

    def owns(self, doc_id: str) -> bool:
        """Whether the document ``doc_id`` belongs to this view (always, for a whole
        collection)."""
        if self.shard is None or self.shards <= 1:
            return True
        return self.shard_for(doc_id) == self.shard

    def shard_for(self, doc_id: str) -> int:
        """The shard of the collection that holds the document ``doc_id`` (0 unsharded)."""
        return _shards.shard_of(f"{self.name}/{doc_id}", self.shards) if self.shards > 1 else 0


def timezone_problem(name: str) -> str | None:
    """Why ``name`` is not an IANA time zone this machine knows (``Australia/Sydney``,
    ``UTC``), or None.

    The zones are those of the system or, where it has none, of the ``tzdata`` package;
    ``localtime`` is refused, as it names whatever zone the machine runs in, so the same
    configuration would count days differently on another machine.
    """
    hint = "give an IANA time zone name such as Australia/Sydney or UTC"
    if name == "localtime":
        return f"{name!r} is this machine's own zone, not a named one; {hint}"
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return f"unknown time zone {name!r}; {hint}"
    return None


def tenant_problem(tenant: str) -> str | None:
    """Why ``tenant`` cannot name its own folder in a home (``identities/<tenant>/``), or None.

    A tenant is one folder name: with a ``/`` or ``\\``, as ``.`` or ``..``, it would name
    another tenant's folder (``x/../beta`` is ``beta``'s) or one above it; a control character
    or surrounding blanks would name a folder no one can tell from another.
    """
    if not tenant:
        return "'' is empty"
    if tenant != tenant.strip():
        return f"{tenant!r} begins or ends with blanks"
    if CONTROL.search(tenant):
        return f"{tenant!r} holds a control character"
    if "/" in tenant or "\\" in tenant:
        return f"{tenant!r} holds a / or \\ (a tenant is one folder name)"
    if tenant in (".", ".."):
        return f"{tenant!r} names no folder of its own"
    return None
