"""DESIGN §1: the library never imports Dagster."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "corpus_index"


def test_no_dagster_import_statement_under_corpus_index() -> None:
    pattern = re.compile(r"^\s*(import dagster|from dagster)\b", re.MULTILINE)
    offenders = [
        str(p.relative_to(ROOT)) for p in LIBRARY.rglob("*.py") if pattern.search(p.read_text())
    ]
    assert offenders == []


def test_importing_every_library_module_loads_no_dagster() -> None:
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in LIBRARY.rglob("*.py")
    )
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in modules)
        + "print('dagster' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
