"""DESIGN §1 and §12: the library stands alone, and its layers are enforced.

The contracts live in pyproject.toml (``[tool.importlinter]``); ``make lint`` runs them too.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from corpus_index.errors import ConfigError
from corpus_index.runner import ENTRY_POINT_GROUP, PipelineRunner, load_runner

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "corpus_index"
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
WIRING = ("pipelines", "assets", "definitions", "dagster")


def library_modules() -> list[str]:
    return sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in LIBRARY.rglob("*.py")
        if p.name != "__main__.py"
    )


def lint_imports(contract: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--contract", contract, "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("contract", ["wiring", "definitions-on-top", "no-dagster"])
def test_import_contract_is_kept(contract: str) -> None:
    out = lint_imports(contract)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 kept, 0 broken" in out.stdout


def test_library_layers_contract_is_kept() -> None:
    out = lint_imports("library-layers")
    assert out.returncode == 0, out.stdout + out.stderr


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of size > 1 (the import cycles)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_strongly_connected_finds_a_cycle_and_nothing_else() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert strongly_connected(graph) == [["a", "b", "c"]]


def test_library_import_graph_has_no_cycles() -> None:
    """Function-level imports count: a cycle hidden inside a function is still a cycle."""
    import grimp

    g = grimp.build_graph("corpus_index")
    graph = {m: set(g.find_modules_directly_imported_by(m)) for m in g.modules}
    assert strongly_connected(graph) == []


BLOCKED = textwrap.dedent(
    """
    import sys
    for name in {wiring!r}:
        sys.modules[name] = None  # `import name` (and name.anything) now raises ImportError
    """
).format(wiring=WIRING)


def run_blocked(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKED + textwrap.dedent(code), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(ROOT)},
    )


def test_every_library_module_imports_with_the_wiring_unimportable() -> None:
    code = "".join(f"import {m}\n" for m in library_modules()) + "print('imported')"
    out = run_blocked(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "imported"


@pytest.mark.parametrize(
    "args", [["--help"], ["sync", "--help"], ["search", "--help"], ["promote", "--help"]]
)
def test_corpus_help_runs_with_the_wiring_unimportable(args: list[str]) -> None:
    code = """
    from corpus_index.cli import main
    main(sys.argv[1:], prog_name="corpus")
    """
    out = run_blocked(code, *args)
    assert out.returncode == 0, out.stderr
    assert "Usage: corpus" in out.stdout


def test_a_command_that_needs_the_runner_says_none_is_installed(tmp_path: Path) -> None:
    """Without the pipeline (blocked here), `corpus sync` is a clean error, not a traceback."""
    (tmp_path / "corpus.yaml").write_text("collections: {}\nprofiles: {}\n")
    code = """
    from corpus_index.cli import main
    main(sys.argv[1:], prog_name="corpus")
    """
    out = run_blocked(code, "--config", str(tmp_path / "corpus.yaml"), "sync")
    assert out.returncode == 2, out.stderr
    assert "error:" in out.stderr and "Traceback" not in out.stderr
    assert "runner" in out.stderr


def test_the_declared_entry_point_is_the_dagster_runner() -> None:
    """pyproject.toml declares the runner; its target imports and satisfies the protocol
    (the installed metadata only has it after `pip install -e .`)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    targets = project["entry-points"][ENTRY_POINT_GROUP]
    assert set(targets) == {"dagster"}
    runner = load_runner(target=targets["dagster"])
    assert isinstance(runner, PipelineRunner)
    assert type(runner).__module__ == "pipelines.runner"


def test_load_runner_reads_the_installed_entry_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A distribution on sys.path declaring a runner is found through real metadata."""
    (tmp_path / "fake_runner_pkg.py").write_text(
        textwrap.dedent(
            """
            class FakeRunner:
                def sync(self, settings, *, progress=None, retry_refused=False): ...
                def promote(self, settings, namespace, generation): ...
                def rollback(self, settings, namespace): ...
                def retire(self, settings, generation): ...
                def compact(self, settings, retention_hours): ...
                def eval_report(self, settings): ...
                def reprocess(self, settings, now, *, collection=""): ...
            """
        )
    )
    info = tmp_path / "fake_runner_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-runner-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nfake = fake_runner_pkg:FakeRunner\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    runner = load_runner("fake")
    assert type(runner).__name__ == "FakeRunner"
    with pytest.raises(ConfigError, match="no pipeline runner 'nope'.*fake"):
        load_runner("nope")


def test_load_runner_refuses_what_is_not_a_runner() -> None:
    with pytest.raises(ConfigError, match="not a pipeline runner"):
        load_runner(target="collections:OrderedDict")
    with pytest.raises(ConfigError, match="expected module:attribute"):
        load_runner(target="pipelines.runner")
    with pytest.raises(ConfigError, match="cannot be loaded"):
        load_runner(target="no_such_module_here:Runner")
