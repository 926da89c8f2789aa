"""API keys -> principals, from a file (or environment variable) of key hashes.

The file holds no key, only each key's sha256 with the principal it stands for::

    keys:
      - name: meridian-analyst          # for logs and revocation; never a secret
        sha256: 9f86d081884c7d65...     # hex sha256 of the key (``corpus api-key`` prints it)
        tenant: meridian
        groups: [uw-team]
      - name: prometheus                # reads /metrics only: no tenant, no group
        sha256: 60303ae22b998861...
        scopes: [metrics]

What a key may do is its ``scopes``: ``search`` (the ``/v1`` routes, as its tenant and
groups; the default, so an entry without ``scopes`` searches) and ``metrics`` (``GET
/metrics``, the operator's figures of every namespace). A key whose scopes hold ``search``
names its tenant; one for ``metrics`` alone names none.

The file is re-read whenever it changes (size, mtime or inode), checked on every request, so a
key removed from it stops working with the next request. Keys are random 256-bit tokens, so a
plain sha256 is not open to guessing; comparison is constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import stat
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from corpus_index.eligibility import Principal
from corpus_index.errors import ConfigError
from corpus_index.identities import read_small_file, yaml_of
from corpus_index.limits import Limits
from corpus_index.serve_config import ServeConfig

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
KEY_PREFIX = "ck_"
KEYS_FILE_MODE = 0o600  # a keys file write_keys makes: the owner's alone, whatever the umask
SEARCH, METRICS = "search", "metrics"
SCOPES = (SEARCH, METRICS)


def new_key() -> str:
    """A fresh API key: ``ck_`` and 43 URL-safe characters (256 random bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_hash(key: str) -> str:
    """The hex sha256 the keys file records for ``key``."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """One accepted key: its name, hash, principal (None for a key that may not search) and
    what it may do (:data:`SCOPES`)."""

    name: str
    sha256: str
    principal: Principal | None
    scopes: frozenset[str] = frozenset({SEARCH})


def parse_keys(doc: Any, *, source: str) -> list[KeyEntry]:
    """The entries of a keys document.

    Raises:
        ConfigError: naming ``source`` and the entry at fault.
    """
    if doc is None:
        return []
    if not isinstance(doc, Mapping) or not isinstance(doc.get("keys", []), list):
        raise ConfigError(f"{source}: expected a mapping with a list under 'keys'")
    entries: list[KeyEntry] = []
    for i, item in enumerate(doc.get("keys") or []):
        where = f"{source}: keys[{i}]"
        if not isinstance(item, Mapping):
            raise ConfigError(f"{where}: expected a mapping with name, sha256, tenant, groups")
        unknown = sorted(set(item) - {"name", "sha256", "tenant", "groups", "scopes"})
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(map(str, unknown))}")
        digest = str(item.get("sha256", "")).lower()
        if not _HEX64.match(digest):
            raise ConfigError(f"{where}.sha256: expected 64 hex digits (the key's sha256)")
        scopes = _scopes(item.get("scopes", [SEARCH]), where)
        if SEARCH not in scopes and ("tenant" in item or "groups" in item):
            raise ConfigError(
                f"{where}: a tenant and groups are for a key that may search; this one's scopes "
                f"are {sorted(scopes)} (add {SEARCH} to them, or leave tenant and groups out)"
            )
        entries.append(
            KeyEntry(
                name=str(item.get("name") or f"key-{i}"),
                sha256=digest,
                principal=_principal(item, where) if SEARCH in scopes else None,
                scopes=scopes,
            )
        )
    return entries


def _scopes(value: Any, where: str) -> frozenset[str]:
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(s, str) and s in SCOPES for s in value)
    ):
        raise ConfigError(
            f"{where}.scopes: expected a list of {' and '.join(SCOPES)} (got {value!r})"
        )
    return frozenset(value)


def _principal(item: Mapping[str, Any], where: str) -> Principal:
    """The principal of an entry whose key searches."""
    tenant = item.get("tenant")
    if not isinstance(tenant, str) or not tenant:
        raise ConfigError(
            f"{where}.tenant: expected a tenant id (a key that may search acts for one)"
        )
    groups = item.get("groups", [])
    if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
        raise ConfigError(f"{where}.groups: expected a list of group names")
    return Principal(tenant, tuple(groups))


def read_keys_file(path: Path) -> Any:
    """The keys document of the file ``path`` (None when it holds none), read within the
    default :class:`~corpus_index.limits.Limits` (its size, YAML aliases, nodes and nesting
    depth), as ``corpus.yaml`` is; a symbolic link (a mounted secret) is read through.

    Raises:
        ConfigError: it is not a regular file, unreadable, over a limit, not UTF-8 or not
            YAML; the message names the file.
    """
    return _load(read_small_file(path, Limits(), "keys file", follow_links=True), path)


class KeyStore:
    """The accepted keys, re-read from their file when it changes."""

    def __init__(self, serve: ServeConfig, *, environ: Mapping[str, str] | None = None) -> None:
        self._file = serve.api_keys_file
        self._lock = threading.Lock()
        self._state: tuple[int, ...] | None = None
        self._entries: list[KeyEntry] = []
        if serve.api_keys_env:
            env = os.environ if environ is None else environ
            source = f"environment variable {serve.api_keys_env}"
            text = env.get(serve.api_keys_env, "")
            self._entries = parse_keys(_load(text, source), source=source)

    def principal(self, key: str) -> tuple[str, Principal] | None:
        """The name and principal of ``key``, or None when no entry has its hash or its entry
        may not search."""
        found = self.entry(key)
        if found is None or found.principal is None:
            return None
        return found.name, found.principal

    def entry(self, key: str) -> KeyEntry | None:
        """The entry of ``key``, or None when no entry has its hash."""
        digest = key_hash(key)
        found = None
        for entry in self._current():
            # compare every entry, so timing says nothing about which hash is near
            if hmac.compare_digest(entry.sha256, digest):
                found = entry
        return found

    def _current(self) -> list[KeyEntry]:
        if self._file is None:
            return self._entries
        try:
            st = self._file.stat()
            state: tuple[int, ...] = (st.st_ino, st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            state = ()
        except OSError as exc:
            raise ConfigError(f"{self._file}: cannot be read: {exc.strerror or exc}") from None
        with self._lock:
            if state != self._state:
                doc = read_keys_file(self._file) if state else None
                self._entries = parse_keys(doc, source=str(self._file))
                self._state = state
            return self._entries


def write_keys(path: Path, doc: Any) -> None:
    """Replace the keys file ``path`` with ``doc``: written to a file beside it, synced and
    renamed over it, so a server reading it meanwhile sees the old keys or the new ones, never
    an empty or partial file; the file keeps its permissions, and a new one is the owner's
    alone (0600: the hashes it holds are what a server trusts a key by).

    Raises:
        ConfigError: it cannot be written (the file is then unchanged).
    """
    target = path.resolve()  # a link to the keys file stays a link
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
    try:
        mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else None
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            # set, not left to the umask (which could also narrow 0600 past the owner's use)
            os.fchmod(out.fileno(), KEYS_FILE_MODE if mode is None else mode)
            yaml.safe_dump(doc, out, sort_keys=False)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot be written: {exc.strerror or exc} (it is unchanged)"
        ) from None
    finally:
        tmp.unlink(missing_ok=True)


def _load(text: str, source: Path | str) -> Any:
    return yaml_of(source, text, Limits()) if text.strip() else None
