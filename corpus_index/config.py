"""Loading and validating ``corpus.yaml``.

The configuration declares collections (source roots), embedding profiles, namespaces and
overrides of the embeddable-section registry. Every problem is reported with the key that
holds it, so ``collections.harbor-deals.tier: must be one of public, restricted`` tells the
user exactly what to fix.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from corpus_index.backend_specs import validate_backend_spec

# re-exported: callers name CollectionConfig with the rest of the configuration
from corpus_index.collection import CollectionConfig as CollectionConfig
from corpus_index.collection import VerifierConfig, tenant_problem, timezone_problem
from corpus_index.errors import ConfigError
from corpus_index.identities import read_small_file
from corpus_index.inputs import INPUT_FORMATS
from corpus_index.kinds import KINDS, bounded_yaml
from corpus_index.kinds.bounded_yaml import YamlDuplicateKeyError, YamlLimitError
from corpus_index.limits import LIMIT_KEYS, Limits
from corpus_index.registry_sql import POSTGRES_SCHEMES, redact
from corpus_index.retrieval_settings import (
    DEFAULT_RETRIEVAL,
    RETRIEVAL_KEYS,
    RetrievalSettings,
    retrieval_settings,
)
from corpus_index.serve_config import ServeConfig, parse_serve
from corpus_index.shards import split_key
from corpus_index.storage import Location, finished_stores, parse_storage_uri

TIERS = ("public", "restricted")
GRANULARITIES = ("block", "paragraph")
SIDECAR_PLACES = ("home", "beside")
MAX_SHARDS = 256
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")

DEFAULT_SECTIONS: dict[str, str] = {
    "market_analysis": "block",
    "risk_assessment": "block",
    "borrower_sponsor": "block",
    "property": "block",
}


@dataclass(frozen=True, slots=True)
class ProfileConfig:
    """An embedding profile: embedder backend_spec + input format + chunking profile."""

    name: str
    embedder: str
    input_format: str = "default-v1"
    chunking: str = "sections-v1"
    namespace: str = "default"
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    dimensions: int | None = None
    batch_size: int = 64
    max_batch_tokens: int = 8000
    price_per_million_tokens: float | None = None
    normalized: bool | None = None


@dataclass(frozen=True, slots=True)
class NamespaceConfig:
    """A set of collections served together, with its evaluation settings."""

    name: str
    golden_set: Path | None = None
    eval_tolerance: float = 0.02
    retire_after_hours: float = 24.0
    # off: promotion does not require the eval gate (a namespace with no golden set must say
    # so explicitly; otherwise its promotion is refused)
    eval_gate: bool = True
    # how hybrid search fuses: the one default unless corpus.yaml declares an override
    retrieval: RetrievalSettings = DEFAULT_RETRIEVAL
    retrieval_declared: bool = False


@dataclass(frozen=True, slots=True)
class CorpusConfig:
    """The whole validated configuration."""

    path: Path
    collections: dict[str, CollectionConfig]
    profiles: dict[str, ProfileConfig]
    namespaces: dict[str, NamespaceConfig]
    sections: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_SECTIONS))
    serve: ServeConfig = field(default_factory=ServeConfig)

    def collections_in(self, namespace: str) -> list[CollectionConfig]:
        """Collections served by ``namespace``, in configuration order."""
        return [c for c in self.collections.values() if c.namespace == namespace]

    def profiles_in(self, namespace: str) -> list[ProfileConfig]:
        """Profiles that build generations for ``namespace``, in configuration order."""
        return [p for p in self.profiles.values() if p.namespace == namespace]

    def profile_covers(self, profile: str, collection: str) -> bool:
        """Whether ``profile`` embeds ``collection`` (they share a namespace); ``collection``
        may be one of its partition keys."""
        p = self.profiles.get(profile)
        c = self.collections.get(split_key(collection).collection)
        return p is not None and c is not None and p.namespace == c.namespace


@dataclass(frozen=True, slots=True)
class Settings:
    """Where things live: the configuration, the home folder, and the stores.

    The stores (warehouse, LanceDB tables, exports, deletion receipts) live under the home
    folder, or under ``storage`` (``s3://bucket/prefix``) when it is set; what belongs to this
    machine (the lock, the Dagster home, the DuckDB registry, alerts, reports) stays in the home.
    """

    config_path: Path
    home: Path
    # the registry's PostgreSQL database (CORPUS_REGISTRY); None: <home>/registry.duckdb
    registry_url: str | None = None
    storage: str | None = None  # CORPUS_STORAGE: s3://bucket/prefix

    def __post_init__(self) -> None:
        if self.storage is not None:  # checked and normalized however the settings were made
            object.__setattr__(self, "storage", parse_storage_uri(self.storage))

    @property
    def stores(self) -> Location:
        """The root the stores live under: ``storage``, or the home folder.

        Raises:
            ConfigError: ``storage`` holds what a ``corpus storage copy`` cut short left.
        """
        return finished_stores(self.storage) if self.storage else Location.local(self.home)

    @property
    def warehouse(self) -> Location:
        return self.stores / "warehouse"

    @property
    def lance_uri(self) -> str:
        return str(self.stores / "lance")

    @property
    def exports(self) -> Location:
        return self.stores / "exports"

    @property
    def receipts(self) -> Location:
        return self.stores / "receipts"

    @property
    def roots(self) -> list[Location]:
        """Every root that holds files of this home: the home folder, and the object-store
        prefix when the stores live there (what a scan of the home's bytes must cover)."""
        here = Location.local(self.home)
        return [here] if self.stores == here else [here, self.stores]

    @property
    def registry_path(self) -> Path:
        return self.home / "registry.duckdb"

    @property
    def dagster_home(self) -> Path:
        return self.home / "dagster"

    @property
    def reports(self) -> Path:
        return self.home / "reports"

    def load(self) -> CorpusConfig:
        """Load and validate the configuration file."""
        return load_config(self.config_path)


def home_of_its_own(home: Path, config: Mapping[str, Any]) -> Settings:
    """Settings for a home an evaluation keeps apart from the user's (``corpus eval``,
    ``corpus eval-grouping``): ``config`` written as ``home/corpus.yaml``, rewritten only when
    it changed (so a second run finds the same file and syncs only what changed)."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / "corpus.yaml"
    text = yaml.safe_dump(dict(config), sort_keys=False)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return Settings(config_path=path, home=home)


def settings_from_env(
    environ: Mapping[str, str] | None = None, *, cwd: Path | None = None
) -> Settings:
    """Read ``CORPUS_CONFIG`` (default ``./corpus.yaml``), ``CORPUS_HOME`` (``./.corpus``),
    ``CORPUS_REGISTRY`` (unset: the registry is ``<home>/registry.duckdb``) and ``CORPUS_STORAGE``
    (unset: the stores stay in the home folder).

    Relative values are taken relative to ``cwd`` (default: the process's working directory).

    Raises:
        ConfigError: ``CORPUS_HOME`` is there but not a folder, ``CORPUS_REGISTRY`` is not a
            ``postgresql://`` URL, or ``CORPUS_STORAGE`` is not an ``s3://bucket/prefix`` URI.
    """
    env = os.environ if environ is None else environ
    base = cwd or Path.cwd()
    config = base / (env.get("CORPUS_CONFIG") or "corpus.yaml")  # an absolute value replaces base
    home = base / (env.get("CORPUS_HOME") or ".corpus")
    storage = env.get("CORPUS_STORAGE") or None
    if home.exists() and not home.is_dir():  # every command would fail making its folders
        raise ConfigError(
            f"CORPUS_HOME: {home.resolve()} is not a folder; name a folder (made if missing)"
        )
    return Settings(
        config_path=config.resolve(),
        home=home.resolve(),
        registry_url=registry_url(registry) if (registry := env.get("CORPUS_REGISTRY")) else None,
        storage=parse_storage_uri(storage) if storage else None,
    )


def registry_url(value: str, *, setting: str = "CORPUS_REGISTRY") -> str:
    """``value`` if it names a PostgreSQL database (``postgresql://user@host:port/db``).

    Raises:
        ConfigError: anything else, naming ``setting``.
    """
    parts = urlsplit(value)
    if parts.scheme not in POSTGRES_SCHEMES or not parts.hostname:
        raise ConfigError(
            f"{setting}: {redact(value)!r} is not a PostgreSQL URL: give postgresql://user@host:port/"
            "database, or leave it unset for <home>/registry.duckdb"
        )
    if not parts.path.strip("/"):
        raise ConfigError(f"{setting}: the URL names no database (postgresql://host:port/DATABASE)")
    return value


def load_config(path: Path | str) -> CorpusConfig:
    """Load ``corpus.yaml`` and validate it.

    The file is read within the default :class:`~corpus_index.limits.Limits` (its size, YAML
    aliases, nodes and nesting depth), whatever its own ``limits`` section says.

    Raises:
        ConfigError: the file is missing, unreadable, over a limit, not UTF-8, not YAML, gives
            a key twice in one mapping, or a key is invalid (named in the message).
    """
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: configuration file not found (set CORPUS_CONFIG)")
    # the file's own `limits` bound what it names; the file itself is read within the defaults
    limits = Limits()
    text = read_small_file(path, limits, "configuration file", follow_links=True)
    try:
        raw = bounded_yaml.load(text, limits, unique_keys=True) or {}
    except (YamlLimitError, YamlDuplicateKeyError) as exc:
        raise ConfigError(f"{path}:{exc.line + 1}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{line}: not valid YAML: {exc}") from None
    return parse_config(raw, path=path)


def parse_config(raw: Any, *, path: Path) -> CorpusConfig:
    """Validate an already-loaded configuration mapping."""
    base = path.parent
    _require_mapping(raw, "(top level)", path)
    top = {"collections", "profiles", "namespaces", "sections", "limits", "serve"}
    _no_unknown(raw, top, "", path)
    limits = _limits(raw.get("limits"), Limits(), "limits", path)

    collections: dict[str, CollectionConfig] = {}
    for name, spec in _mapping(raw.get("collections"), "collections", path, required=True).items():
        key = f"collections.{name}"
        _check_name(name, key, path)
        _require_mapping(spec, key, path)
        allowed = {"kind", "path", "tenant", "acl_groups", "tier", "namespace"}
        extra = {"limits", "follow_symlinks_outside_root", "format", "processing", "people"}
        extra |= {"merges", "sidecars", "grouping", "timezone", "shards", "answer_verifier"}
        _no_unknown(spec, allowed | extra, key, path)
        kind = _choice(spec.get("kind"), tuple(KINDS), f"{key}.kind", path)
        src = _string(spec.get("path"), f"{key}.path", path)
        tenant = _string(spec.get("tenant"), f"{key}.tenant", path)
        if problem := tenant_problem(tenant):  # it names the tenant's folder in the home
            raise _fail(path, f"{key}.tenant", problem)
        groups = _string_list(spec.get("acl_groups"), f"{key}.acl_groups", path)
        if not groups:
            raise ConfigError(f"{path}: {key}.acl_groups: at least one ACL group is required")
        tier = _choice(spec.get("tier", "restricted"), TIERS, f"{key}.tier", path)
        ns = _string(spec.get("namespace", "default"), f"{key}.namespace", path)
        _check_name(ns, f"{key}.namespace", path)
        root = (base / src).resolve()
        collections[name] = CollectionConfig(
            name=name,
            kind=kind,
            path=root,
            tenant=tenant,
            acl_groups=tuple(groups),
            tier=tier,
            namespace=ns,
            limits=_limits(spec.get("limits"), limits, f"{key}.limits", path),
            follow_symlinks_outside_root=bool(
                _opt_bool(
                    spec.get("follow_symlinks_outside_root"),
                    f"{key}.follow_symlinks_outside_root",
                    path,
                )
            ),
            format=_string(spec["format"], f"{key}.format", path) if "format" in spec else "",
            processing=_mapping(spec.get("processing"), f"{key}.processing", path),
            people=_collection_file(spec, "people", root, f"{key}.people", path),
            merges=_collection_file(spec, "merges", root, f"{key}.merges", path),
            sidecars=_choice(spec.get("sidecars", "home"), SIDECAR_PLACES, f"{key}.sidecars", path),
            grouping=_opt_bool(spec.get("grouping"), f"{key}.grouping", path) is not False,
            timezone=_timezone(spec, f"{key}.timezone", path),
            answer_verifier=_answer_verifier(spec, f"{key}.answer_verifier", path),
            shards=_int(spec.get("shards", 1), f"{key}.shards", path),
        )
        for option, why in _GROUPED_ONLY:
            if option in spec and not KINDS[kind].grouped:
                raise _fail(path, f"{key}.{option}", f"the {kind} kind's {why}")
        if "answer_verifier" in spec and not collections[name].grouping:
            raise _fail(
                path,
                f"{key}.answer_verifier",
                "grouping is off for this collection, so no answer is ever verified; remove "
                "one of them",
            )
        if collections[name].shards > MAX_SHARDS:
            raise _fail(path, f"{key}.shards", f"at most {MAX_SHARDS} (got {spec['shards']!r})")
        if collections[name].shards > 1 and not KINDS[kind].shardable:
            raise _fail(
                path,
                f"{key}.shards",
                f"collection {name!r} is of kind {kind}, which cannot be split into shards "
                f"({KINDS[kind].unshardable_why}); remove `shards` or set it to 1",
            )
        if collections[name].sidecars != "home" and not KINDS[kind].sidecars:
            raise _fail(path, f"{key}.sidecars", f"the {kind} kind writes no sidecars")
        try:
            KINDS[kind].check_options(collections[name], key=key)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None

    profiles: dict[str, ProfileConfig] = {}
    allowed_profile = {
        "embedder",
        "input_format",
        "chunking",
        "namespace",
        "base_url",
        "api_key_env",
        "dimensions",
        "batch_size",
        "max_batch_tokens",
        "price_per_million_tokens",
        "normalized",
    }
    for name, spec in _mapping(raw.get("profiles"), "profiles", path, required=True).items():
        key = f"profiles.{name}"
        _check_name(name, key, path)
        _require_mapping(spec, key, path)
        _no_unknown(spec, allowed_profile, key, path)
        embedder = _string(spec.get("embedder"), f"{key}.embedder", path)
        problem = validate_backend_spec(embedder)
        if problem:
            raise ConfigError(f"{path}: {key}.embedder: {problem}")
        fmt = _string(spec.get("input_format", "default-v1"), f"{key}.input_format", path)
        if fmt not in INPUT_FORMATS:
            known = ", ".join(sorted(INPUT_FORMATS))
            raise ConfigError(
                f"{path}: {key}.input_format: unknown format {fmt!r} (known: {known})"
            )
        ns = _string(spec.get("namespace", "default"), f"{key}.namespace", path)
        profiles[name] = ProfileConfig(
            name=name,
            embedder=embedder,
            input_format=fmt,
            chunking=_string(spec.get("chunking", "sections-v1"), f"{key}.chunking", path),
            namespace=ns,
            base_url=_opt_string(spec.get("base_url"), f"{key}.base_url", path),
            api_key_env=_string(
                spec.get("api_key_env", "OPENAI_API_KEY"), f"{key}.api_key_env", path
            ),
            dimensions=_opt_int(spec.get("dimensions"), f"{key}.dimensions", path),
            batch_size=_int(spec.get("batch_size", 64), f"{key}.batch_size", path),
            max_batch_tokens=_int(
                spec.get("max_batch_tokens", 8000), f"{key}.max_batch_tokens", path
            ),
            price_per_million_tokens=_opt_float(
                spec.get("price_per_million_tokens"), f"{key}.price_per_million_tokens", path
            ),
            normalized=_opt_bool(spec.get("normalized"), f"{key}.normalized", path),
        )

    namespaces: dict[str, NamespaceConfig] = {}
    for name, spec in _mapping(raw.get("namespaces"), "namespaces", path).items():
        key = f"namespaces.{name}"
        _check_name(name, key, path)
        spec = spec or {}
        _require_mapping(spec, key, path)
        _no_unknown(
            spec,
            {"golden_set", "eval_tolerance", "retire_after_hours", "eval_gate", "retrieval"},
            key,
            path,
        )
        golden = _opt_string(spec.get("golden_set"), f"{key}.golden_set", path)
        namespaces[name] = NamespaceConfig(
            name=name,
            golden_set=(base / golden).resolve() if golden else None,
            eval_tolerance=_float(
                spec.get("eval_tolerance", 0.02), f"{key}.eval_tolerance", path, most=1.0
            ),
            retire_after_hours=_float(
                spec.get("retire_after_hours", 24.0), f"{key}.retire_after_hours", path
            ),
            eval_gate=_on_off(spec.get("eval_gate", "on"), f"{key}.eval_gate", path),
            retrieval=_retrieval(spec.get("retrieval"), f"{key}.retrieval", path),
            retrieval_declared=spec.get("retrieval") is not None,
        )
    served = {c.namespace for c in collections.values()}
    for ns in sorted(namespaces.keys() - served):  # misspelt: its settings would never apply
        raise _fail(
            path,
            f"namespaces.{ns}",
            f"no collection is in namespace {ns!r} (collections' namespaces: "
            f"{', '.join(sorted(served))})",
        )
    used = served | {p.namespace for p in profiles.values()}
    for ns in sorted(used - namespaces.keys()):
        namespaces[ns] = NamespaceConfig(name=ns)
    for p in profiles.values():
        if not any(c.namespace == p.namespace for c in collections.values()):
            raise ConfigError(
                f"{path}: profiles.{p.name}.namespace: no collection is in namespace {p.namespace!r}"
            )

    sections = dict(DEFAULT_SECTIONS)
    for name, spec in _mapping(raw.get("sections"), "sections", path).items():
        key = f"sections.{name}"
        if spec is False or spec is None:
            sections.pop(name, None)
            continue
        _require_mapping(spec, key, path)
        _no_unknown(spec, {"granularity"}, key, path)
        sections[name] = _choice(
            spec.get("granularity", "block"), GRANULARITIES, f"{key}.granularity", path
        )

    return CorpusConfig(
        path=path,
        collections=collections,
        profiles=profiles,
        namespaces=namespaces,
        sections=sections,
        serve=parse_serve(raw.get("serve"), path=path),
    )


# -- small validators: each names the key it checks -------------------------------------------


def _fail(path: Path, key: str, problem: str) -> ConfigError:
    return ConfigError(f"{path}: {key}: {problem}")


# a collection's options that only a grouped kind reads, each with why another kind refuses it
_GROUPED_ONLY = (
    ("grouping", "units are never grouped"),
    ("timezone", "units have no time of day to count their days from"),
    ("answer_verifier", "units are never grouped, so no answer is ever verified"),
)


def _timezone(spec: Mapping[str, Any], key: str, path: Path) -> str:
    """A collection's ``timezone``: an IANA zone name (see
    :func:`~corpus_index.collection.timezone_problem`), or "" where it sets none."""
    if "timezone" not in spec:
        return ""
    name = _string(spec["timezone"], key, path)
    if problem := timezone_problem(name):
        raise _fail(path, key, problem)
    return name


# an environment variable's name, as a shell writes one
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _answer_verifier(spec: Mapping[str, Any], key: str, path: Path) -> VerifierConfig | None:
    """A collection's ``answer_verifier``: ``{model: NAME, base_url: URL, api_key_env: NAME,
    temperature: T, max_tokens: N}`` (the model required; the API root an http(s) URL,
    OpenAI's by default; the key read from the variable named, ``OPENAI_API_KEY`` by default,
    when the ``linked_groups`` step starts; a temperature from 0 to 2 and a positive
    ``max_tokens`` sent with each request when given), or None where it sets none. A key written in the file is refused: it would travel with
    every copy of the configuration."""
    if "answer_verifier" not in spec:
        return None
    given = spec["answer_verifier"]
    _require_mapping(given, key, path)
    if "api_key" in given:
        raise _fail(
            path,
            f"{key}.api_key",
            "the key is never written in the configuration: put it in an environment "
            "variable and name it with api_key_env",
        )
    _no_unknown(given, {"model", "base_url", "api_key_env", "temperature", "max_tokens"}, key, path)
    model = _string(given.get("model"), f"{key}.model", path)
    base_url = _opt_string(given.get("base_url"), f"{key}.base_url", path)
    if base_url is not None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise _fail(
                path,
                f"{key}.base_url",
                f"{base_url!r} is not an http(s) URL; give the API root, such as "
                "http://localhost:8000/v1",
            )
    env = _string(given.get("api_key_env", "OPENAI_API_KEY"), f"{key}.api_key_env", path)
    if not _ENV_NAME.fullmatch(env):
        raise _fail(
            path,
            f"{key}.api_key_env",
            f"{env!r} is not an environment variable's name (letters, digits and _, not "
            "starting with a digit); name the variable that holds the key, not the key",
        )
    temperature = given.get("temperature")
    return VerifierConfig(
        model=model,
        base_url=base_url,
        api_key_env=env,
        temperature=None
        if temperature is None
        else _float(temperature, f"{key}.temperature", path, most=2.0),
        max_tokens=_opt_int(given.get("max_tokens"), f"{key}.max_tokens", path),
    )


def _limits(value: Any, base: Limits, key: str, path: Path) -> Limits:
    """``base`` with the limits that ``value`` (a mapping of positive integers) sets."""
    spec = _mapping(value, key, path)
    _no_unknown(spec, set(LIMIT_KEYS), key, path)
    return replace(base, **{k: _int(v, f"{key}.{k}", path) for k, v in spec.items()})


def _retrieval(value: Any, key: str, path: Path) -> RetrievalSettings:
    """A namespace's declared retrieval override: the default with the keys it sets."""
    spec = _mapping(value, key, path)
    _no_unknown(spec, set(RETRIEVAL_KEYS), key, path)
    try:
        return retrieval_settings(spec)
    except ValueError as exc:
        raise _fail(path, key, str(exc)) from None


def _require_mapping(value: Any, key: str, path: Path) -> None:
    if not isinstance(value, dict):
        raise _fail(path, key, f"expected a mapping, got {type(value).__name__}")


def _mapping(value: Any, key: str, path: Path, *, required: bool = False) -> dict[str, Any]:
    if value is None:
        if required:
            raise _fail(path, key, "is required")
        return {}
    _require_mapping(value, key, path)
    return {str(k): v for k, v in value.items()}


def _collection_file(
    spec: dict[str, Any], name: str, root: Path, key: str, path: Path
) -> Path | None:
    """The collection's ``name`` file (``people``, ``merges``), relative to its root, which
    must hold it by name. Whether it is there, a regular file and readable is asked as it is
    read (:func:`~corpus_index.identities.read_small_file`): a file missing or broken fails
    that collection's work then, never the configuration of every collection."""
    if name not in spec:
        return None
    rel = _string(spec[name], key, path)
    found = Path(os.path.normpath(root / rel))
    if not found.is_relative_to(root) or found == root:
        raise ConfigError(
            f"{path}: {key}: {rel!r} is not a file inside the collection's path {root}; "
            f"name the {name} file relative to the collection's path"
        )
    return found


def _no_unknown(spec: dict[str, Any], allowed: set[str], key: str, path: Path) -> None:
    for k in spec:
        if k not in allowed:
            where = f"{key}.{k}" if key else str(k)
            raise _fail(path, where, f"unknown key (allowed: {', '.join(sorted(allowed))})")


def _check_name(name: str, key: str, path: Path) -> None:
    if not _NAME.fullmatch(name):  # fullmatch: "$" would also accept a trailing newline
        raise _fail(path, key, f"{name!r} is not a valid name (lowercase letters, digits, - and _)")


def _string(value: Any, key: str, path: Path) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(path, key, "is required and must be a non-empty string")
    return value


def _opt_string(value: Any, key: str, path: Path) -> str | None:
    return None if value is None else _string(value, key, path)


def _string_list(value: Any, key: str, path: Path) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _fail(path, key, "must be a list of non-empty strings")
    return list(value)


def _choice(value: Any, choices: tuple[str, ...], key: str, path: Path) -> str:
    if value not in choices:
        raise _fail(path, key, f"must be one of {', '.join(choices)} (got {value!r})")
    return str(value)


def _int(value: Any, key: str, path: Path) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise _fail(path, key, f"must be a positive integer (got {value!r})")
    return value


def _opt_int(value: Any, key: str, path: Path) -> int | None:
    return None if value is None else _int(value, key, path)


def _float(value: Any, key: str, path: Path, *, most: float | None = None) -> float:
    """A finite number of at least 0 (and at most ``most``): YAML's ``.nan`` and ``.inf``
    are numbers no comparison can hold to."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise _fail(path, key, f"must be a finite non-negative number (got {value!r})")
    if most is not None and value > most:
        raise _fail(path, key, f"must be at most {most} (got {value!r})")
    return float(value)


def _opt_float(value: Any, key: str, path: Path) -> float | None:
    return None if value is None else _float(value, key, path)


def _on_off(value: Any, key: str, path: Path) -> bool:
    # YAML 1.1 reads a bare on/off as a boolean; quoted, it is a string: both mean the same
    if isinstance(value, bool):
        return value
    return _choice(value, ("on", "off"), key, path) == "on"


def _opt_bool(value: Any, key: str, path: Path) -> bool | None:
    if value is None:
        return None
    if not isinstance(value, bool):
        raise _fail(path, key, f"must be true or false (got {value!r})")
    return value
