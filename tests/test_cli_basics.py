"""The CLI's contract that needs no model: help on every command, clean errors, exit codes."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from corpus_index.cli import main
from corpus_index.config import Settings

COMMANDS = sorted(main.commands)
README = Path(__file__).resolve().parents[1] / "README.md"


def missing_help(group: click.Group) -> list[str]:
    """Commands of ``group`` without help text, and their options without help (by name)."""
    missing = []
    for name, command in sorted(group.commands.items()):
        if not (command.help or "").strip():
            missing.append(name)
        for param in command.params:
            undocumented = isinstance(param, click.Option) and not (param.help or "").strip()
            if undocumented and param.name != "help":
                missing.append(f"{name} {param.opts[0]}")
    return missing


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str) -> None:
    assert missing_help(click.Group(commands={command: main.commands[command]})) == []
    result = CliRunner().invoke(main, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert main.commands[command].help.split("\n")[0].strip()[:40] in " ".join(
        result.output.split()
    )


def test_the_help_check_reports_a_command_without_help() -> None:
    group = click.Group("copy", commands=dict(main.commands))

    @group.command("bare")
    @click.option("--quiet", is_flag=True)
    def bare(quiet: bool) -> None:
        pass

    assert missing_help(group) == ["bare", "bare --quiet"]
    assert "bare" not in main.commands  # the copy, not the real group, got the command


def test_bad_config_names_the_key(tmp_path: Path) -> None:
    config = tmp_path / "corpus.yaml"
    config.write_text(
        "collections:\n  x:\n    kind: uw_deals\n    path: .\n    tenant: t\n    acl_groups: [g]\n    tier: secret\nprofiles: {}\n"
    )
    result = CliRunner().invoke(
        main, ["--config", str(config), "--home", str(tmp_path / "h"), "sync"]
    )
    assert result.exit_code == 2
    assert "collections.x.tier" in result.output


ENV_ERRORS: list[tuple[str, list[str], dict[str, str], str]] = [
    # (case, options, environment, the error line)
    (
        "executor",
        [],
        {"CORPUS_EXECUTOR": "threads"},
        "Error: CORPUS_EXECUTOR='threads' is not an executor",
    ),
    (
        "storage",
        [],
        {"CORPUS_STORAGE": "ftp://host/x"},
        "Error: CORPUS_STORAGE='ftp://host/x': not an object-store URI",
    ),
    (
        "registry variable",
        [],
        {"CORPUS_REGISTRY": "mysql://h/db"},
        "Error: CORPUS_REGISTRY: 'mysql://h/db' is not a PostgreSQL URL",
    ),
    (
        "registry option",
        ["--registry", "mysql://h/db"],
        {},
        "Error: --registry: 'mysql://h/db' is not a PostgreSQL URL",
    ),
]


@pytest.mark.parametrize(
    ("case", "options", "env", "line"), ENV_ERRORS, ids=[c[0] for c in ENV_ERRORS]
)
def test_a_bad_setting_is_named_as_given(
    tmp_path: Path, case: str, options: list[str], env: dict[str, str], line: str
) -> None:
    result = CliRunner().invoke(
        main, ["--home", str(tmp_path / "h"), *options, "generations"], env=env
    )
    assert result.exit_code == 2, result.output
    assert line in result.output and "Traceback" not in result.output
    if case != "registry option":  # each names the variable that is wrong, no other
        assert "--registry" not in result.output


def test_a_home_that_is_a_file_is_named(tmp_path: Path) -> None:
    taken = tmp_path / "home"
    taken.write_text("not a folder\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["generations"], env={"CORPUS_HOME": str(taken)})
    assert result.exit_code == 2, result.output
    assert f"Error: CORPUS_HOME: {taken} is not a folder" in result.output
    assert "Traceback" not in result.output
    assert taken.read_text(encoding="utf-8") == "not a folder\n"


def test_search_without_a_generation_is_a_clean_error(home: Settings) -> None:
    result = CliRunner().invoke(
        main,
        [
            "--config",
            str(home.config_path),
            "--home",
            str(home.home),
            "search",
            "q",
            "--tenant",
            "alpha",
        ],
    )
    assert result.exit_code == 2
    assert "no ACTIVE generation" in result.output and "Traceback" not in result.output


def test_sync_promote_search_with_the_hash_embedder(home: Settings) -> None:
    runner = CliRunner()
    base = ["--config", str(home.config_path), "--home", str(home.home)]
    first = runner.invoke(main, [*base, "sync", "--json"])
    assert first.exit_code == 0, first.output
    summary = json.loads(first.stdout)
    assert summary["documents"] == 6 and summary["embedded"] > 0
    assert runner.invoke(main, [*base, "promote"]).exit_code == 0
    again = json.loads(runner.invoke(main, [*base, "sync", "--json"]).stdout)
    assert again["embedded"] == 0
    out = runner.invoke(
        main,
        [
            *base,
            "search",
            "anchor tenant lease",
            "--tenant",
            "beta",
            "--group",
            "beta-team",
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    hits = json.loads(out.stdout)["hits"]
    assert hits and {h["tenant_id"] for h in hits} == {"beta"}
    gens = json.loads(runner.invoke(main, [*base, "generations", "--json"]).stdout)["generations"]
    assert [g["status"] for g in gens] == ["ACTIVE"]
    assert again["stale"] == []

    # a deal that stops parsing is reported stale, serving its last good version
    deal = home.config_path.parent / "sources" / "beta" / "deal-beta-000.uw.md"
    deal.write_text(
        deal.read_text().replace(
            "## market_analysis\n```yaml\n", "## market_analysis\n```yaml\n: [\n"
        )
    )
    broken = runner.invoke(main, [*base, "sync"])
    assert broken.exit_code == 0, broken.output
    assert "STALE beta-deals/deal-beta-000: serving its last good version" in broken.output
    (stale,) = json.loads(runner.invoke(main, [*base, "sync", "--json"]).stdout)["stale"]
    assert (
        stale["source_id"] == "beta-deals/deal-beta-000" and "deal-beta-000.uw.md" in stale["error"]
    )


def test_promote_without_a_ready_generation_is_refused(home: Settings) -> None:
    base = ["--config", str(home.config_path), "--home", str(home.home)]
    result = CliRunner().invoke(main, [*base, "promote"])
    assert result.exit_code == 1
    assert "has no READY generation" in result.output
    rollback = CliRunner().invoke(main, [*base, "rollback"])
    assert rollback.exit_code == 1 and "no namespace has a previous generation" in rollback.output


def test_an_output_path_that_cannot_be_written_is_named(home: Settings, tmp_path: Path) -> None:
    """A path given to write to that cannot be written (here a file where its folder should
    be) is bad input: exit 2, naming the path and why, not a traceback."""
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    base = ["--config", str(home.config_path), "--home", str(home.home)]
    result = CliRunner().invoke(main, [*base, "openapi", str(blocked / "openapi.json")])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(
        f"error: cannot write the OpenAPI document to {blocked / 'openapi.json'} ("
    ), result.stderr
    assert "Not a directory" in result.stderr


def leaf_commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    """Every command under ``group`` that runs (its subgroups' commands), by its full name."""
    found: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found |= leaf_commands(command, f"{prefix}{name} ")
        else:
            found[f"{prefix}{name}"] = command
    return found


def readme_usages() -> list[str]:
    """The usage of each row of README's "Command reference", after ``corpus ``."""
    section = README.read_text(encoding="utf-8").split("\n## Command reference\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    return re.findall(r"^\| `corpus ([^`]+)`", section, flags=re.MULTILINE)


def test_readme_command_reference_shows_what_each_command_requires() -> None:
    """Each command has a row in README's "Command reference"; each row shows its command's
    required options and as many bare positional words as the command requires, and no option
    the command does not have (a row that leaves one out gives a newcomer a command that stops
    with 'Missing option')."""
    commands = leaf_commands(main)
    rows: dict[str, str] = {}
    for usage in readme_usages():
        name = next(
            (n for n in sorted(commands, key=len, reverse=True) if f"{usage} ".startswith(f"{n} ")),
            None,
        )
        assert name is not None, f"README names no command of the CLI: corpus {usage}"
        rows[name] = usage[len(name) :]
    assert sorted(set(commands) - set(rows)) == [], "commands without a README row"
    for name, rest in rows.items():
        params = commands[name].params
        words = shlex.split(rest.replace("\\|", "|"))
        shown = {w.strip("[]") for w in words if w.strip("[]").startswith("-")}
        options = {o for p in params if isinstance(p, click.Option) for o in p.opts}
        assert shown <= options, f"corpus {name}: README shows {shown - options}"
        required = {p.opts[0] for p in params if isinstance(p, click.Option) and p.required}
        bare, depth = set(), 0  # the options shown outside brackets
        for w in words:
            if depth == 0 and w.startswith("-"):
                bare.add(w)
            depth += w.count("[") - w.count("]")
        assert required <= bare, f"corpus {name}: README leaves out {required - bare}"
        leading = len(words[: next((i for i, w in enumerate(words) if w[0] in "[-"), len(words))])
        wanted = sum(p.nargs for p in params if isinstance(p, click.Argument) and p.required)
        assert leading == wanted, f"corpus {name}: README shows {leading} arguments, not {wanted}"
