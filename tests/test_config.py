"""``corpus.yaml`` loading: a valid file, and every invalid key named in its error."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from corpus_index.config import DEFAULT_SECTIONS, load_config, settings_from_env
from corpus_index.errors import ConfigError
from corpus_index.identity_store import recorded_merges_path

VALID: dict[str, Any] = {
    "collections": {
        "alpha-deals": {
            "kind": "uw_deals",
            "path": "sources/alpha",
            "tenant": "alpha",
            "acl_groups": ["alpha-uw", "alpha-credit"],
            "namespace": "deals",
        },
        "eval_set": {
            "kind": "beir",
            "path": "../shared/beir",
            "tenant": "lab",
            "acl_groups": "lab-all",
            "tier": "public",
            "namespace": "eval",
        },
    },
    "profiles": {
        "main": {"embedder": "hash:v1-64", "namespace": "deals"},
        "remote": {
            "embedder": "openai:text-embedding-3-small",
            "namespace": "deals",
            "base_url": "http://127.0.0.1:9/v1",
            "dimensions": 256,
            "batch_size": 16,
            "max_batch_tokens": 2000,
            "price_per_million_tokens": 0.02,
            "normalized": True,
        },
        "lab": {"embedder": "hash:v1-8", "namespace": "eval"},
    },
    "namespaces": {
        "deals": {
            "golden_set": "golden/deals.jsonl",
            "eval_tolerance": 0.05,
            "retire_after_hours": 1,
        },
        "eval": None,
    },
    "sections": {"debt_terms": {"granularity": "paragraph"}, "property": False},
}


def write(tmp_path: Path, raw: Any) -> Path:
    folder = tmp_path / "conf"
    folder.mkdir(exist_ok=True)
    path = folder / "corpus.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


def test_valid_config_loads_with_paths_relative_to_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, VALID)
    config = load_config(path)
    conf_dir = (tmp_path / "conf").resolve()

    alpha = config.collections["alpha-deals"]
    assert alpha.path == conf_dir / "sources" / "alpha"
    assert (alpha.kind, alpha.tenant, alpha.acl_groups, alpha.tier, alpha.namespace) == (
        "uw_deals",
        "alpha",
        ("alpha-uw", "alpha-credit"),
        "restricted",  # the default tier is the safe one
        "deals",
    )
    evals = config.collections["eval_set"]
    assert evals.path == (tmp_path / "shared" / "beir").resolve()
    assert (evals.acl_groups, evals.tier) == (("lab-all",), "public")

    main = config.profiles["main"]
    assert (main.embedder, main.input_format, main.chunking, main.batch_size, main.normalized) == (
        "hash:v1-64",
        "default-v1",
        "sections-v1",
        64,
        None,
    )
    remote = config.profiles["remote"]
    assert (remote.base_url, remote.dimensions, remote.batch_size, remote.max_batch_tokens) == (
        "http://127.0.0.1:9/v1",
        256,
        16,
        2000,
    )
    assert (remote.price_per_million_tokens, remote.normalized, remote.api_key_env) == (
        0.02,
        True,
        "OPENAI_API_KEY",
    )

    deals = config.namespaces["deals"]
    assert deals.golden_set == conf_dir / "golden" / "deals.jsonl"
    assert (deals.eval_tolerance, deals.retire_after_hours) == (0.05, 1.0)
    assert config.namespaces["eval"].golden_set is None

    expected_sections = {k: v for k, v in DEFAULT_SECTIONS.items() if k != "property"}
    expected_sections["debt_terms"] = "paragraph"
    assert config.sections == expected_sections
    assert config.path == path


def test_config_helpers_follow_namespaces(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, VALID))
    assert [c.name for c in config.collections_in("deals")] == ["alpha-deals"]
    assert [p.name for p in config.profiles_in("deals")] == ["main", "remote"]
    assert config.profile_covers("main", "alpha-deals")
    assert not config.profile_covers("main", "eval_set")
    assert not config.profile_covers("nope", "alpha-deals")


def test_namespaces_used_but_not_declared_get_defaults(tmp_path: Path) -> None:
    raw = copy.deepcopy(VALID)
    del raw["namespaces"]
    config = load_config(write(tmp_path, raw))
    assert sorted(config.namespaces) == ["deals", "eval"]
    assert config.namespaces["deals"].eval_tolerance == 0.02
    assert config.namespaces["eval"].golden_set is None


def _set(raw: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node = raw
    for part in parents:
        node = node[part]
    node[last] = value


def _delete(raw: dict[str, Any], dotted: str) -> None:
    *parents, last = dotted.split(".")
    node = raw
    for part in parents:
        node = node[part]
    del node[last]


_DELETE = object()

INVALID: list[tuple[str, str, Any, str]] = [
    # (case, dotted key: changed, and named in the error; new value or _DELETE; problem fragment)
    ("unknown top-level key", "extras", 1, "unknown key"),
    ("unknown collection key", "collections.alpha-deals.colour", "red", "unknown key"),
    ("bad kind", "collections.alpha-deals.kind", "pdfs", "must be one of uw_deals, beir"),
    ("bad tier", "collections.alpha-deals.tier", "secret", "must be one of public, restricted"),
    ("missing tenant", "collections.alpha-deals.tenant", _DELETE, "is required"),
    ("blank tenant", "collections.alpha-deals.tenant", "  ", "is required"),
    ("missing path", "collections.alpha-deals.path", _DELETE, "is required"),
    ("empty acl_groups", "collections.alpha-deals.acl_groups", [], "at least one"),
    ("missing acl_groups", "collections.alpha-deals.acl_groups", _DELETE, "at least one"),
    (
        "acl_groups not strings",
        "collections.alpha-deals.acl_groups",
        ["a", 3],
        "list of non-empty strings",
    ),
    ("collection not a mapping", "collections.alpha-deals", "uw_deals", "expected a mapping"),
    ("bad collection name", "collections.Alpha Deals", {"kind": "beir"}, "not a valid name"),
    ("name with a trailing newline", "collections.beta\n", {"kind": "beir"}, "not a valid name"),
    ("bad collection namespace", "collections.alpha-deals.namespace", "Deals!", "not a valid name"),
    ("collections missing", "collections", _DELETE, "is required"),
    ("collections not a mapping", "collections", ["a"], "expected a mapping"),
    ("profiles missing", "profiles", _DELETE, "is required"),
    (
        "bad profile name",
        "profiles.Main",
        {"embedder": "hash:v1-8", "namespace": "deals"},
        "not a valid name",
    ),
    ("unknown profile key", "profiles.main.model", "x", "unknown key"),
    ("missing embedder", "profiles.main.embedder", _DELETE, "is required"),
    ("unknown backend", "profiles.main.embedder", "bert:base", "unknown backend 'bert:base'"),
    ("hash dim zero", "profiles.main.embedder", "hash:v1-0", "hash dimension must be 1..8192"),
    (
        "unknown st model",
        "profiles.main.embedder",
        "st:nope",
        "unknown sentence-transformers model",
    ),
    ("openai without model", "profiles.main.embedder", "openai:", "needs a model name"),
    (
        "unknown input_format",
        "profiles.main.input_format",
        "default-v9",
        "unknown format 'default-v9'",
    ),
    (
        "profile namespace without collections",
        "profiles.main.namespace",
        "lonely",
        "no collection is in namespace 'lonely'",
    ),
    ("zero batch_size", "profiles.main.batch_size", 0, "positive integer"),
    ("boolean batch_size", "profiles.main.batch_size", True, "positive integer"),
    ("string dimensions", "profiles.main.dimensions", "256", "positive integer"),
    ("negative price", "profiles.main.price_per_million_tokens", -1, "non-negative number"),
    ("normalized not a bool", "profiles.main.normalized", "yes", "true or false"),
    ("blank base_url", "profiles.main.base_url", "", "is required"),
    ("unknown namespace key", "namespaces.deals.owner", "me", "unknown key"),
    ("negative eval_tolerance", "namespaces.deals.eval_tolerance", -0.1, "non-negative"),
    ("bad namespace name", "namespaces.Bad", {}, "not a valid name"),
    (
        # a misspelt namespace: its settings (here its safety window) would never apply
        "namespace without collections",
        "namespaces.deal",
        {"retire_after_hours": 720},
        "no collection is in namespace 'deal' (collections' namespaces: deals, eval)",
    ),
    (
        "bad granularity",
        "sections.debt_terms.granularity",
        "sentence",
        "must be one of block, paragraph",
    ),
    ("unknown section key", "sections.debt_terms.weight", 2, "unknown key"),
    ("section not a mapping", "sections.debt_terms", "block", "expected a mapping"),
]


@pytest.mark.parametrize(("case", "key", "value", "fragment"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_config_names_the_exact_key(
    tmp_path: Path, case: str, key: str, value: Any, fragment: str
) -> None:
    raw = copy.deepcopy(VALID)
    if value is _DELETE:
        _delete(raw, key)
    else:
        _set(raw, key, value)
    path = write(tmp_path, raw)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: {key}: "), message
    assert fragment in message


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, ["collections"])
    with pytest.raises(ConfigError, match=r": \(top level\): expected a mapping, got list"):
        load_config(path)


def test_empty_file_reports_missing_collections(tmp_path: Path) -> None:
    path = tmp_path / "corpus.yaml"
    path.write_text("", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: collections: is required"


def test_non_yaml_file_names_the_line(tmp_path: Path) -> None:
    text = "collections:\n  alpha: {kind: beir}\nprofiles: {}\n  main: x\n"
    path = tmp_path / "corpus.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}:4: not valid YAML")


def test_missing_file_says_how_to_point_at_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"configuration file not found \(set CORPUS_CONFIG\)"):
        load_config(tmp_path / "absent.yaml")


def _alias_bomb() -> str:
    """Nine levels of nine aliases each: 387 million strings once expanded."""
    lines = ["l0: &l0 [" + ", ".join(["lol"] * 9) + "]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return "\n".join(lines) + "\n"


UNREADABLE: list[tuple[str, bytes | None, str]] = [
    # (case, file content, or None for a folder in its place; the message after the path)
    ("a folder", None, ": configuration file is not a regular file"),
    (
        "not UTF-8",
        "collections:\n  café: {}\n".encode("latin-1"),
        ": configuration file is not UTF-8",
    ),
    (
        "over the size limit",
        b"#" * (8 * 1024 * 1024 + 1),
        ": configuration file is 8,388,609 bytes",
    ),
    ("nested too deeply", b"collections: " + b"[" * 5000 + b"]" * 5000, ":1: nested deeper than"),
    ("an alias bomb", _alias_bomb().encode(), ":6: expands (aliases included) to more than"),
]


def refused_naming(load: Callable[[Path], object], path: Path, content: Any, problem: str) -> None:
    """``load`` refuses ``path`` holding ``content`` (an UNREADABLE case's; None: a folder in
    its place) with a ConfigError that starts with the path and then ``problem``."""
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        load(path)
    assert str(info.value).startswith(f"{path}{problem}"), str(info.value)


@pytest.mark.parametrize(("case", "content", "problem"), UNREADABLE, ids=[c[0] for c in UNREADABLE])
def test_a_config_that_cannot_be_read_is_named(
    tmp_path: Path, case: str, content: bytes | None, problem: str
) -> None:
    refused_naming(load_config, tmp_path / "corpus.yaml", content, problem)


DUPLICATED: list[tuple[str, str, str]] = [
    # (case, the text after a valid first collection, the message after the path)
    (
        "a collection",
        "  alpha:\n    kind: beir\n    path: b\n    tenant: u\n    acl_groups: [h]\n",
        ":7: collections.alpha: given twice in one mapping (also on line 2)",
    ),
    ("a collection's key", "    tenant: u\n", ":7: collections.alpha.tenant: given twice"),
    (
        "in a flow mapping",
        "  beta: {kind: beir, kind: documents}\n",
        ":7: collections.beta.kind: given twice in one mapping (also on line 7)",
    ),
]


@pytest.mark.parametrize(("case", "more", "problem"), DUPLICATED, ids=[c[0] for c in DUPLICATED])
def test_a_key_given_twice_is_refused(tmp_path: Path, case: str, more: str, problem: str) -> None:
    # YAML keeps the last of two equal keys: the first collection (its tenant, its ACL)
    # would be replaced without a word
    first = "  alpha:\n    kind: beir\n    path: a\n    tenant: t\n    acl_groups: [g]\n"
    text = f"collections:\n{first}{more}profiles:\n  p: {{embedder: 'hash:v1-8'}}\n"
    path = tmp_path / "corpus.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}{problem}"), str(info.value)


def test_a_merged_key_may_be_given_again(tmp_path: Path) -> None:
    # YAML's merge key: a key given beside `<<` overrides the merged one, as it should
    text = (
        "collections:\n"
        "  alpha: &base {kind: beir, path: a, tenant: t, acl_groups: [g]}\n"
        "  beta: {<<: *base, path: b, tenant: u}\n"
        "profiles:\n  p: {embedder: 'hash:v1-8'}\n"
    )
    path = tmp_path / "corpus.yaml"
    path.write_text(text, encoding="utf-8")
    beta = load_config(path).collections["beta"]
    assert (beta.tenant, beta.path.name, beta.acl_groups) == ("u", "b", ("g",))


def test_a_linked_config_is_read_through_its_link(tmp_path: Path) -> None:
    # a Kubernetes ConfigMap mounts corpus.yaml as a symbolic link
    link = tmp_path / "corpus.yaml"
    link.symlink_to(write(tmp_path, VALID))
    assert sorted(load_config(link).collections) == ["alpha-deals", "eval_set"]


@pytest.mark.parametrize(
    "tenant", ["x/../beta", "..", ".", "x\\beta", "be\x00ta", "be\tta", " beta", "beta\n"]
)
def test_a_tenant_that_is_not_one_folder_name_is_refused(tmp_path: Path, tenant: str) -> None:
    # the tenant names its folder in the home (identities/<tenant>/merges.yaml): "x/../beta"
    # read and wrote the merges recorded for tenant beta
    raw = copy.deepcopy(VALID)
    raw["collections"]["alpha-deals"]["tenant"] = tenant
    path = write(tmp_path, raw)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: collections.alpha-deals.tenant: {tenant!r} ")
    with pytest.raises(ConfigError, match="its merges have no folder of their own"):
        recorded_merges_path(tmp_path, tenant)  # nor is it trusted where it becomes a path


def test_a_tenant_may_be_any_one_folder_name(tmp_path: Path) -> None:
    raw = copy.deepcopy(VALID)
    raw["collections"]["alpha-deals"]["tenant"] = "Alpha Capital v2.0"
    assert load_config(write(tmp_path, raw)).collections["alpha-deals"].tenant == (
        "Alpha Capital v2.0"
    )
    assert recorded_merges_path(tmp_path, "Alpha Capital v2.0").parent.parent == (
        tmp_path / "identities"
    )


# -- settings from the environment ----------------------------------------------------------

ENV_CASES: list[tuple[str, dict[str, str], str, str]] = [
    # (case, environment, expected config relative to tmp, expected home relative to tmp)
    ("defaults", {}, "work/corpus.yaml", "work/.corpus"),
    (
        "empty values fall back to defaults",
        {"CORPUS_CONFIG": "", "CORPUS_HOME": ""},
        "work/corpus.yaml",
        "work/.corpus",
    ),
    (
        "absolute overrides",
        {"CORPUS_CONFIG": "{tmp}/etc/c.yaml", "CORPUS_HOME": "{tmp}/data"},
        "etc/c.yaml",
        "data",
    ),
    (
        "relative overrides resolve against cwd",
        {"CORPUS_CONFIG": "conf/c.yaml", "CORPUS_HOME": "h"},
        "work/conf/c.yaml",
        "work/h",
    ),
    ("dot-dot is normalized", {"CORPUS_HOME": "{tmp}/work/../data"}, "work/corpus.yaml", "data"),
]


@pytest.mark.parametrize(
    ("case", "env", "config", "home"), ENV_CASES, ids=[c[0] for c in ENV_CASES]
)
def test_settings_from_env(
    tmp_path: Path, case: str, env: dict[str, str], config: str, home: str
) -> None:
    tmp = tmp_path.resolve()
    cwd = tmp / "work"
    environ = {k: v.format(tmp=tmp) for k, v in env.items()}
    settings = settings_from_env(environ, cwd=cwd)
    assert settings.config_path == tmp / config
    assert settings.home == tmp / home
    assert settings.registry_path == tmp / home / "registry.duckdb"
    assert settings.lance_uri == str(tmp / home / "lance")
    assert settings.warehouse == tmp / home / "warehouse"
    assert settings.exports == tmp / home / "exports"
    assert settings.dagster_home == tmp / home / "dagster"


def test_settings_load_reads_the_configured_file(tmp_path: Path) -> None:
    path = write(tmp_path, VALID)
    settings = settings_from_env({"CORPUS_CONFIG": str(path), "CORPUS_HOME": str(tmp_path / "h")})
    assert sorted(settings.load().collections) == ["alpha-deals", "eval_set"]


def test_settings_from_process_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORPUS_CONFIG", str(tmp_path / "x.yaml"))
    monkeypatch.setenv("CORPUS_HOME", str(tmp_path / "home"))
    settings = settings_from_env()
    assert settings.config_path == (tmp_path / "x.yaml").resolve()
    assert settings.home == (tmp_path / "home").resolve()


PROFILE = {"profiles": {"hash": {"embedder": "hash:v1-8"}}}


@pytest.mark.parametrize(
    ("people", "error"),
    [
        ("people.yaml", None),
        # missing now, there later: asked as the file is read, failing that collection only
        ("absent.yaml", None),
        ("sub/../people.yaml", None),
        ("../people.yaml", "collections.care.people: '../people.yaml' is not a file inside"),
        (".", "collections.care.people: '.' is not a file inside"),
        (["people.yaml"], "collections.care.people"),
    ],
)
def test_people_file_is_named_inside_the_collection(
    tmp_path: Path, people: Any, error: str | None
) -> None:
    root = tmp_path / "conf" / "care"
    root.mkdir(parents=True)
    (root / "people.yaml").write_text("people: []\n", encoding="utf-8")
    (root.parent / "people.yaml").write_text("people: []\n", encoding="utf-8")
    care = {"kind": "messages", "path": "care", "tenant": "t", "acl_groups": ["g"]}
    path = write(tmp_path, {"collections": {"care": {**care, "people": people}}, **PROFILE})
    if error is None:
        named = load_config(path).collections["care"].people
        assert named == root.resolve() / Path(people).name
        return
    with pytest.raises(ConfigError, match=re.escape(error)):
        load_config(path)


def test_people_file_is_optional(tmp_path: Path) -> None:
    (tmp_path / "conf" / "care").mkdir(parents=True)
    care = {"kind": "messages", "path": "care", "tenant": "t", "acl_groups": ["g"]}
    assert (
        load_config(write(tmp_path, {"collections": {"care": care}, **PROFILE}))
        .collections["care"]
        .people
        is None
    )


def _care(tmp_path: Path, kind: str, keys: dict[str, Any]) -> Path:
    """The configuration of one collection ``care`` of ``kind`` (its folder made) with
    ``keys`` beside its own."""
    (tmp_path / "conf" / "care").mkdir(parents=True)
    care = {"kind": kind, "path": "care", "tenant": "t", "acl_groups": ["g"], **keys}
    return write(tmp_path, {"collections": {"care": care}, **PROFILE})


@pytest.mark.parametrize(
    ("kind", "grouping", "error"),
    [
        ("messages", None, None),
        ("messages", False, None),
        ("messages", True, None),
        ("messages", "no", "collections.care.grouping: must be true or false (got 'no')"),
        ("documents", False, "collections.care.grouping: the documents kind's units are never"),
    ],
)
def test_grouping_is_a_switch_of_grouped_kinds(
    tmp_path: Path, kind: str, grouping: Any, error: str | None
) -> None:
    path = _care(tmp_path, kind, {} if grouping is None else {"grouping": grouping})
    if error is None:
        assert load_config(path).collections["care"].grouping is (grouping is not False)
        return
    with pytest.raises(ConfigError, match=re.escape(error)):
        load_config(path)


@pytest.mark.parametrize(
    ("kind", "timezone", "error"),
    [
        ("messages", None, None),
        ("messages", "Australia/Sydney", None),
        ("messages", "UTC", None),
        ("messages", "Mars/Olympus", "collections.care.timezone: unknown time zone 'Mars/Olympus'"),
        (
            "messages",
            "australia/sydney",
            "collections.care.timezone: unknown time zone 'australia/",
        ),
        ("messages", "Australia", "collections.care.timezone: unknown time zone 'Australia'"),
        ("messages", "../etc/passwd", "collections.care.timezone: unknown time zone '../etc"),
        ("messages", "/etc/localtime", "collections.care.timezone: unknown time zone '/etc/"),
        ("messages", "localtime", "collections.care.timezone: 'localtime' is this machine's own"),
        ("messages", "", "collections.care.timezone: is required and must be a non-empty"),
        ("messages", 10, "collections.care.timezone: is required and must be a non-empty"),
        ("documents", "UTC", "collections.care.timezone: the documents kind's units have no"),
    ],
)
def test_timezone_names_an_iana_zone_of_a_grouped_kind(
    tmp_path: Path, kind: str, timezone: Any, error: str | None
) -> None:
    path = _care(tmp_path, kind, {} if timezone is None else {"timezone": timezone})
    if error is None:
        assert load_config(path).collections["care"].timezone == (timezone or "")
        return
    with pytest.raises(ConfigError, match=f"^{re.escape(f'{path}: {error}')}"):
        load_config(path)


_VERIFIER = "collections.care.answer_verifier"


@pytest.mark.parametrize(
    ("kind", "extra", "error"),
    [
        ("messages", {"model": "m"}, None),
        ("messages", {"model": "m", "base_url": "http://127.0.0.1:9/v1"}, None),
        ("messages", {"model": "m", "api_key_env": "CARE_LLM_KEY"}, None),
        ("messages", "gpt", f"{_VERIFIER}: expected a mapping, got str"),
        ("messages", {}, f"{_VERIFIER}.model: is required and must be a non-empty string"),
        ("messages", {"model": "m", "temperature": 0, "max_tokens": 8}, None),
        ("messages", {"model": "m", "temperature": 2.5}, f"{_VERIFIER}.temperature: must be at"),
        ("messages", {"model": "m", "temperature": "low"}, f"{_VERIFIER}.temperature: must be a"),
        ("messages", {"model": "m", "max_tokens": 0}, f"{_VERIFIER}.max_tokens: must be a pos"),
        ("messages", {"model": "m", "top_p": 1}, f"{_VERIFIER}.top_p: unknown key"),
        ("messages", {"model": "m", "api_key": "sk-1"}, f"{_VERIFIER}.api_key: the key is never"),
        ("messages", {"model": "m", "api_key_env": "sk-1"}, f"{_VERIFIER}.api_key_env: 'sk-1' is"),
        ("messages", {"model": "m", "base_url": "localhost:8000"}, f"{_VERIFIER}.base_url: 'loc"),
        ("documents", {"model": "m"}, f"{_VERIFIER}: the documents kind's units are never grouped"),
    ],
)
def test_an_answer_verifier_names_a_model_and_the_variable_of_its_key(
    tmp_path: Path, kind: str, extra: Any, error: str | None
) -> None:
    path = _care(tmp_path, kind, {"answer_verifier": extra})
    if error is None:
        got = load_config(path).collections["care"].answer_verifier
        assert got is not None and got.model == "m"
        assert got.base_url == extra.get("base_url")
        assert got.api_key_env == extra.get("api_key_env", "OPENAI_API_KEY")
        assert (got.temperature, got.max_tokens) == (
            extra.get("temperature"),
            extra.get("max_tokens"),
        )
        return
    with pytest.raises(ConfigError, match=f"^{re.escape(f'{path}: {error}')}") as caught:
        load_config(path)
    if "api_key" in extra:  # a key written in the file is never echoed
        assert "sk-1" not in str(caught.value)


def test_no_answer_verifier_by_default_nor_with_grouping_off(tmp_path: Path) -> None:
    (tmp_path / "conf" / "care").mkdir(parents=True)
    care: dict[str, Any] = {"kind": "messages", "path": "care", "tenant": "t", "acl_groups": ["g"]}
    path = write(tmp_path, {"collections": {"care": care}, **PROFILE})
    assert load_config(path).collections["care"].answer_verifier is None
    care |= {"grouping": False, "answer_verifier": {"model": "m"}}
    path = write(tmp_path, {"collections": {"care": care}, **PROFILE})
    with pytest.raises(ConfigError, match=re.escape(f"{_VERIFIER}: grouping is off")):
        load_config(path)
