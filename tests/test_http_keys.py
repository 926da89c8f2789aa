"""API keys and the ``serve`` configuration, in-process: hashes only, re-read on change, and
errors that name the file (or variable) and the entry at fault."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from corpus_index.config import parse_config
from corpus_index.eligibility import Principal
from corpus_index.errors import ConfigError
from corpus_index.http.cursor import Cursor, CursorCodec
from corpus_index.http.keys import KeyStore, key_hash, new_key
from corpus_index.http.problems import Problem
from corpus_index.serve_config import ServeConfig, parse_serve
from tests.test_config import UNREADABLE, refused_naming


def entry(key: str, tenant: str = "alpha", groups: list[str] | None = None) -> dict[str, object]:
    return {"name": key[-6:], "sha256": key_hash(key), "tenant": tenant, "groups": groups or ["g"]}


def test_keys_file_is_reread_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    one, two = new_key(), new_key()
    assert one != two and one.startswith("ck_") and len(one) > 40
    path.write_text(yaml.safe_dump({"keys": [entry(one), entry(two, "beta", ["b1", "b2"])]}))
    store = KeyStore(ServeConfig(api_keys_file=path))
    assert store.principal(two) == (two[-6:], Principal("beta", ("b1", "b2")))
    assert store.principal("ck_wrong") is None
    assert one not in path.read_text()  # only hashes are stored
    path.write_text(yaml.safe_dump({"keys": [entry(one)]}))
    assert store.principal(two) is None and store.principal(one) is not None
    path.unlink()
    assert store.principal(one) is None  # no file: no key is accepted


def test_a_key_may_read_metrics_alone_or_beside_searching(tmp_path: Path) -> None:
    """``scopes``: an entry without them searches as its principal; ``[metrics]`` reads
    /metrics and acts for no tenant; ``[search, metrics]`` does both."""
    path = tmp_path / "keys.yaml"
    search, scraper, both = new_key(), new_key(), new_key()
    doc = {
        "keys": [
            entry(search),
            {"name": "prometheus", "sha256": key_hash(scraper), "scopes": ["metrics"]},
            {**entry(both), "scopes": ["search", "metrics"]},
        ]
    }
    path.write_text(yaml.safe_dump(doc))
    store = KeyStore(ServeConfig(api_keys_file=path))
    found = {k: store.entry(k) for k in (search, scraper, both)}
    assert {k: e.scopes if e else None for k, e in found.items()} == {
        search: {"search"},
        scraper: {"metrics"},
        both: {"search", "metrics"},
    }
    assert store.principal(scraper) is None  # a scraper's key searches nothing
    assert store.principal(both) == (both[-6:], Principal("alpha", ("g",)))


def test_keys_from_an_environment_variable() -> None:
    key = new_key()
    env = {"CORPUS_API_KEYS": yaml.safe_dump({"keys": [entry(key, "gamma")]})}
    store = KeyStore(ServeConfig(api_keys_env="CORPUS_API_KEYS"), environ=env)
    assert store.principal(key) == (key[-6:], Principal("gamma", ("g",)))
    assert KeyStore(ServeConfig(api_keys_env="UNSET"), environ={}).principal(key) is None


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"keys": [{"sha256": "abc", "tenant": "t"}]}, "keys[0].sha256: expected 64 hex"),
        ({"keys": [{"sha256": "a" * 64}]}, "keys[0].tenant"),
        ({"keys": [{"sha256": "a" * 64, "tenant": "t", "groups": "g"}]}, "keys[0].groups"),
        ({"keys": [{"sha256": "a" * 64, "tenant": "t", "key": "x"}]}, "unknown key(s) key"),
        ({"keys": [{"sha256": "a" * 64, "scopes": ["admin"]}]}, "keys[0].scopes: expected"),
        ({"keys": [{"sha256": "a" * 64, "scopes": []}]}, "keys[0].scopes: expected"),
        ({"keys": [{"sha256": "a" * 64, "scopes": ["search"]}]}, "keys[0].tenant"),
        (
            {"keys": [{"sha256": "a" * 64, "tenant": "t", "scopes": ["metrics"]}]},
            "keys[0]: a tenant and groups are for a key that may search",
        ),
        (["not", "a", "mapping"], "expected a mapping"),
    ],
)
def test_a_bad_keys_file_is_named_with_its_entry(tmp_path: Path, doc: object, message: str) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"keys\.yaml") as err:
        KeyStore(ServeConfig(api_keys_file=path)).principal("ck_x")
    assert message in str(err.value)


@pytest.mark.parametrize(("case", "content", "problem"), UNREADABLE, ids=[c[0] for c in UNREADABLE])
def test_a_keys_file_that_cannot_be_read_is_named(
    tmp_path: Path, case: str, content: bytes | None, problem: str
) -> None:
    # read as corpus.yaml is; it was read whole with yaml.safe_load: deep nesting ended in a
    # RecursionError (a 500, not keys-unavailable), and its size was not bounded
    keys = problem.replace("configuration file", "keys file")
    store = KeyStore(ServeConfig(api_keys_file=tmp_path / "keys.yaml"))
    refused_naming(lambda _: store.principal("ck_x"), tmp_path / "keys.yaml", content, keys)


def test_serve_configuration(tmp_path: Path) -> None:
    path = tmp_path / "corpus.yaml"
    serve = parse_serve({"api_keys_file": "keys.yaml", "max_k": 20}, path=path)
    assert serve.api_keys_file == tmp_path / "keys.yaml" and serve.max_k == 20
    assert serve.max_query_chars == ServeConfig().max_query_chars
    bad = [
        ({"api_keys_file": "a", "api_keys_env": "B"}, "not both"),
        ({"max_k": 0}, "serve.max_k: expected a positive integer"),
        ({"api_key": "x"}, "unknown key(s) api_key"),
        ({"api_keys_env": "NOT A NAME"}, "serve.api_keys_env"),
        ({"embedding_wait_s": -1}, "serve.embedding_wait_s"),
        ({"open_metrics": "yes"}, "serve.open_metrics: expected true or false"),
    ]
    for raw, message in bad:
        with pytest.raises(ConfigError, match="corpus.yaml") as err:
            parse_serve(raw, path=path)
        assert message in str(err.value)
    (tmp_path / "src").mkdir()
    config = {
        "collections": {
            "c": {"kind": "uw_deals", "path": "src", "tenant": "t", "acl_groups": ["g"]}
        },
        "profiles": {"p": {"embedder": "hash:v1-8"}},
        "serve": {"api_keys_env": "CORPUS_API_KEYS"},
    }
    assert parse_config(config, path=path).serve.api_keys_env == "CORPUS_API_KEYS"
    assert parse_config({**config, "serve": None}, path=path).serve == ServeConfig()


def test_serve_that_cannot_start_says_why_with_its_exit_code(tmp_path: Path) -> None:
    """Keys in the environment that are not valid, or a registry that cannot be reached, end
    ``corpus serve`` with the error and its exit code (2 configuration, 1 failed), before a
    port opens; not uvicorn's traceback and exit 3, which says the home is damaged."""
    from click.testing import CliRunner

    from corpus_index.cli import main

    (tmp_path / "src").mkdir()
    config = tmp_path / "corpus.yaml"
    doc = {
        "collections": {
            "c": {"kind": "uw_deals", "path": "src", "tenant": "t", "acl_groups": ["g"]}
        },
        "profiles": {"p": {"embedder": "hash:v1-8"}},
        "serve": {"api_keys_env": "CORPUS_API_KEYS"},
    }
    config.write_text(yaml.safe_dump(doc))
    args = ["--config", str(config), "--home", str(tmp_path / "home")]
    serve = ["serve", "--port", "1", "--no-trace"]
    bad_keys = CliRunner().invoke(main, [*args, *serve], env={"CORPUS_API_KEYS": "keys: ["})
    assert bad_keys.exit_code == 2, bad_keys.output
    assert (
        "error: environment variable CORPUS_API_KEYS:" in bad_keys.output
        and "invalid YAML" in bad_keys.output
    )
    unreachable = "postgresql://nobody@127.0.0.1:1/corpus"
    no_registry = CliRunner().invoke(
        main,
        [*args, "--registry", unreachable, *serve],
        env={"CORPUS_API_KEYS": "keys: []"},
    )
    assert no_registry.exit_code == 1, no_registry.output
    assert "error: postgresql://nobody@127.0.0.1:1/corpus: cannot reach" in no_registry.output


def test_cursors_are_signed_and_bound_to_their_request() -> None:
    codec = CursorCodec(os.urandom(32))
    token = codec.encode(Cursor("deals", "g0001", 10, 50, "fp-1"))
    assert codec.decode(token, expect="fp-1") == Cursor("deals", "g0001", 10, 50, "fp-1")
    for bad, expect in [(token, "fp-2"), (token[:-3] + "abc", "fp-1"), ("%%%", "fp-1")]:
        with pytest.raises(Problem) as err:
            codec.decode(bad, expect=expect)
        assert err.value.kind.slug == "bad-cursor"
    with pytest.raises(Problem):  # another server's secret
        CursorCodec(os.urandom(32)).decode(token, expect="fp-1")


def test_api_key_command_appends_only_the_hash(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from corpus_index.cli import main

    keys = tmp_path / "keys.yaml"
    args = ["api-key", "--tenant", "alpha", "--group", "g1", "--name", "analyst", "--file"]
    first = CliRunner().invoke(main, [*args, str(keys)])
    assert first.exit_code == 0, first.output
    key = first.stdout.strip().splitlines()[-1]
    assert key.startswith("ck_") and key not in keys.read_text()
    store = KeyStore(ServeConfig(api_keys_file=keys))
    assert store.principal(key) == ("analyst", Principal("alpha", ("g1",)))
    again = CliRunner().invoke(main, [*args, str(keys)])
    assert again.exit_code == 2 and "already has a key named 'analyst'" in again.output


def test_api_key_command_makes_a_key_for_metrics(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from corpus_index.cli import main

    keys = tmp_path / "keys.yaml"
    args = ["api-key", "--file", str(keys)]
    scraper = CliRunner().invoke(main, [*args, "--metrics", "--name", "prometheus"])
    assert scraper.exit_code == 0, scraper.output
    both = CliRunner().invoke(main, [*args, "--metrics", "--tenant", "t", "--name", "ops"])
    assert both.exit_code == 0, both.output
    store = KeyStore(ServeConfig(api_keys_file=keys))
    one, two = (r.stdout.strip().splitlines()[-1] for r in (scraper, both))
    assert store.entry(one).scopes == {"metrics"} and store.principal(one) is None  # type: ignore[union-attr]
    assert store.entry(two).scopes == {"search", "metrics"}  # type: ignore[union-attr]
    before = keys.read_text()
    for bad, message in (
        (["--name", "x"], "Missing option '--tenant'"),
        (["--metrics", "--group", "g", "--name", "x"], "give its --tenant too"),
    ):
        refused = CliRunner().invoke(main, [*args, *bad])
        assert refused.exit_code == 2 and message in refused.output, refused.output
    assert keys.read_text() == before


def test_api_key_command_never_writes_a_keys_file_the_server_refuses(tmp_path: Path) -> None:
    """An entry of an empty tenant or group would make the server refuse the whole file (every
    key in it); a file the command cannot extend is named, not a traceback."""
    from click.testing import CliRunner

    from corpus_index.cli import main

    keys = tmp_path / "keys.yaml"
    args = ["api-key", "--file", str(keys)]
    first = CliRunner().invoke(main, [*args, "--tenant", "alpha", "--group", "g1", "--name", "a"])
    assert first.exit_code == 0, first.output
    key = first.stdout.strip().splitlines()[-1]
    before = keys.read_text()
    for bad in (
        ["--tenant", "", "--group", "g1", "--name", "b"],
        ["--tenant", "alpha", "--group", "g1", "--group", " ", "--name", "b"],
        ["--tenant", "alpha", "--group", "g1", "--name", ""],
    ):
        refused = CliRunner().invoke(main, [*args, *bad])
        assert refused.exit_code == 2 and "must not be empty" in refused.output, bad
        assert keys.read_text() == before
    store = KeyStore(ServeConfig(api_keys_file=keys))
    assert store.principal(key) == ("a", Principal("alpha", ("g1",)))

    keys.write_text("keys: [\n")
    broken = CliRunner().invoke(main, [*args, "--tenant", "alpha", "--name", "b"])
    assert broken.exit_code == 2 and isinstance(broken.exception, SystemExit), broken.output
    assert f"{keys}:2: invalid YAML" in broken.output and keys.read_text() == "keys: [\n"
    keys.write_text("# no keys yet\nowner: ops\n")  # a mapping the server reads as no keys
    added = CliRunner().invoke(main, [*args, "--tenant", "alpha", "--name", "b"])
    assert added.exit_code == 0, added.output
    assert store.principal(added.stdout.strip().splitlines()[-1]) == (
        "b",
        Principal("alpha", ()),
    )


def test_api_key_command_replaces_the_keys_file_whole(tmp_path: Path) -> None:
    """A running server may read the keys file at any moment: the command writes the new file
    beside it and renames it over, so a write that fails part way (here: the process may write
    no file longer than the old one) leaves the old file, every key in it still accepted,
    and one that succeeds is a new file with the old one's permissions."""
    from click.testing import CliRunner

    from corpus_index.cli import main

    keys = tmp_path / "keys.yaml"
    args = ["api-key", "--tenant", "alpha", "--group", "g1", "--file", str(keys)]
    first = CliRunner().invoke(main, [*args, "--name", "a"])
    assert first.exit_code == 0, first.output
    key = first.stdout.strip().splitlines()[-1]
    keys.chmod(0o640)
    before, inode = keys.read_bytes(), keys.stat().st_ino
    limited = (
        "import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
        "resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]),) * 2); "
        "from corpus_index.cli import main; main(sys.argv[2:])"
    )
    failed = subprocess.run(
        [sys.executable, "-c", limited, str(len(before) + 16), *args, "--name", "b"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        timeout=120,
    )
    assert keys.read_bytes() == before and list(tmp_path.iterdir()) == [keys]
    assert failed.returncode == 2, failed.stderr
    assert f"{keys}: cannot be written: File too large (it is unchanged)" in failed.stderr
    store = KeyStore(ServeConfig(api_keys_file=keys))
    assert store.principal(key) == ("a", Principal("alpha", ("g1",)))

    added = CliRunner().invoke(main, [*args, "--name", "b"])
    assert added.exit_code == 0, added.output
    assert keys.stat().st_ino != inode and stat.S_IMODE(keys.stat().st_mode) == 0o640
    assert list(tmp_path.iterdir()) == [keys]
    assert store.principal(key) == ("a", Principal("alpha", ("g1",)))
    assert store.principal(added.stdout.strip().splitlines()[-1]) == (
        "b",
        Principal("alpha", ("g1",)),
    )


def test_api_key_makes_a_new_keys_file_the_owners_alone(tmp_path: Path) -> None:
    """A keys file holds what a server trusts a key by: a new one is 0600 whatever the umask
    (it was 0644 under the usual 022); one replaced keeps the mode it had."""
    from click.testing import CliRunner

    from corpus_index.cli import main

    keys = tmp_path / "keys.yaml"
    args = ["api-key", "--tenant", "alpha", "--group", "g1", "--file", str(keys)]
    before = os.umask(0o022)
    try:
        made = CliRunner().invoke(main, [*args, "--name", "a"])
        assert made.exit_code == 0, made.output
        assert stat.S_IMODE(keys.stat().st_mode) == 0o600
        keys.chmod(0o644)  # a mode its owner chose is theirs to keep
        added = CliRunner().invoke(main, [*args, "--name", "b"])
        assert added.exit_code == 0, added.output
        assert stat.S_IMODE(keys.stat().st_mode) == 0o644
    finally:
        os.umask(before)


@pytest.mark.parametrize(
    ("case", "content", "problem"), UNREADABLE[1:], ids=[c[0] for c in UNREADABLE[1:]]
)
def test_api_key_names_a_keys_file_it_cannot_read_and_leaves_it(
    tmp_path: Path, case: str, content: bytes, problem: str
) -> None:
    # a folder in its place is refused by --file itself; the rest were a traceback (exit 1):
    # UnicodeDecodeError, RecursionError, or yaml's error for a file that is not YAML
    from click.testing import CliRunner

    from corpus_index.cli import main

    keys = tmp_path / "keys.yaml"
    keys.write_bytes(content)
    args = ["api-key", "--tenant", "alpha", "--group", "g1", "--name", "analyst"]
    out = CliRunner().invoke(main, [*args, "--file", str(keys)])
    keys_problem = problem.replace("configuration file", "keys file")
    assert out.exit_code == 2 and f"error: {keys}{keys_problem}" in out.output, out.output
    assert keys.read_bytes() == content


def test_api_key_names_a_keys_file_that_is_not_yaml(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from corpus_index.cli import main

    keys = tmp_path / "keys.yaml"
    keys.write_text("keys: [\n")
    args = ["api-key", "--tenant", "alpha", "--name", "analyst", "--file", str(keys)]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 2 and f"error: {keys}:2: invalid YAML" in out.output, out.output
    assert keys.read_text() == "keys: [\n"
