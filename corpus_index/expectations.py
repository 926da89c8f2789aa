"""The one adapter between our tables and Great Expectations 1.x suites.

Suites live as JSON under ``expectations/`` (``<name>.json``, GX's own suite format), so they
can be reviewed and edited without touching code. GX validates pandas, so the adapter converts
the Arrow table at this boundary and nowhere else, and only the columns the suite's
expectations name (all but the vector column if one reads the whole table): GX hashes the
frame it is given, and the columns no expectation reads (JSON metadata, ACL lists) cost most
of that. GX is imported on first use: it takes seconds to import.

A validation costs about half a second of CPU whatever the table's size (GX resolves a metric
graph per expectation), and a sync revalidates the rows of every collection it touches, changed
or not. The answer depends only on the suite, its parameters and the checked columns' content,
so a process remembers the latest answers by a digest of those (``MEMO_SIZE`` of them): the
same rows under the same suite are not handed to GX twice.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pyarrow as pa

from corpus_index.errors import ConfigError
from corpus_index.gates import Gate
from corpus_index.kinds import registered_values

SUITE_DIR = Path(__file__).resolve().parent.parent / "expectations"
SAMPLE_LIMIT = 5
MEMO_SIZE = 256
_memo: OrderedDict[str, Gate] = OrderedDict()
_memo_lock = threading.Lock()


def suite_path(name: str) -> Path:
    return SUITE_DIR / f"{name}.json"


@functools.cache
def _load_suite(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: expectation suite not found") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    if not isinstance(data, dict) or not isinstance(data.get("expectations"), list):
        raise ConfigError(f"{path}: a suite needs a list under 'expectations'")
    return data


# the kwargs that name the columns an expectation reads
_COLUMN_KWARGS = ("column", "column_A", "column_B")


def frame_columns(table_columns: list[str], suite: dict[str, Any]) -> list[str]:
    """The columns of a table the suite's expectations read, in table order: those they name,
    or every column but ``vector`` where one checks the whole table (``expect_table_*``) or
    none names a column."""
    named: set[str] = set()
    for e in suite["expectations"]:
        kwargs = e.get("kwargs", {})
        if str(e.get("type", "")).startswith("expect_table_"):
            named.clear()
            break
        named.update(str(kwargs[k]) for k in _COLUMN_KWARGS if k in kwargs)
        named.update(str(c) for c in kwargs.get("column_list", []))
    return [c for c in table_columns if c != "vector" and (not named or c in named)]


@functools.cache
def _context() -> Any:
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    return context


def validate(table: pa.Table, suite: str, *, check_name: str | None = None) -> Gate:
    """Validate ``table`` against ``expectations/<suite>.json``; a Gate that names each failure.

    Raises:
        ConfigError: the suite file is missing or not a suite.
    """
    path = suite_path(suite)
    data = _load_suite(path)
    name = check_name or f"{suite}_pass_expectation_suite"
    columns = [c for c in table.column_names if c != "vector"]
    missing = sorted(
        {
            str(e.get("kwargs", {}).get("column"))
            for e in data["expectations"]
            if e.get("kwargs", {}).get("column") not in (None, *columns)
        }
    )
    if missing:
        return Gate(
            name,
            False,
            f"the table has every column suite {suite} checks",
            {"suite": str(path), "missing_columns": ", ".join(missing)},
        )
    checked = table.select(frame_columns(columns, data))
    parameters = registered_values()
    key = _digest(checked, path, data, parameters, name)
    with _memo_lock:
        known = _memo.get(key)
        if known is not None:
            _memo.move_to_end(key)
            return copy.deepcopy(known)
    gate = _validate(checked, suite, path, data, parameters, name)
    with _memo_lock:
        _memo[key] = copy.deepcopy(gate)
        while len(_memo) > MEMO_SIZE:
            _memo.popitem(last=False)
    return gate


def _digest(
    checked: pa.Table, path: Path, suite: dict[str, Any], parameters: Any, name: str
) -> str:
    """What a validation's answer depends on: the suite and its parameters, the check's name,
    and the checked columns (schema and values, as Arrow IPC bytes)."""
    h = hashlib.sha256()
    spec = [str(path), name, suite, parameters]
    h.update(json.dumps(spec, sort_keys=True, default=repr).encode())
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, checked.schema) as writer:
        writer.write_table(checked)
    h.update(sink.getvalue())
    return h.hexdigest()


def _validate(
    checked: pa.Table,
    suite: str,
    path: Path,
    data: dict[str, Any],
    parameters: Any,
    name: str,
) -> Gate:
    from great_expectations.core.expectation_suite import ExpectationSuite

    frame = checked.to_pandas()
    context = _context()
    gx_suite = ExpectationSuite(
        name=f"{suite}-{id(frame)}", expectations=data["expectations"], meta=data.get("meta", {})
    )
    source = context.data_sources.add_pandas(f"rows-{id(frame)}")
    try:
        batch = (
            source.add_dataframe_asset("rows")
            .add_batch_definition_whole_dataframe("all")
            .get_batch(batch_parameters={"dataframe": frame})
        )
        # suites name what the kind registry allows as parameters, never as a copied list
        result = batch.validate(gx_suite, expectation_parameters=parameters)
    finally:
        context.data_sources.delete(source.name)
    failures = []
    for r in result.results:
        if r.success:
            continue
        cfg = r.expectation_config
        column = cfg.kwargs.get("column", "")
        sample = (r.result or {}).get("partial_unexpected_list", [])[:SAMPLE_LIMIT]
        count = (r.result or {}).get("unexpected_count")
        failures.append(f"{cfg.type}({column}): {count} unexpected, e.g. {sample!r}")
    return Gate(
        name,
        bool(result.success),
        f"rows pass the Great Expectations suite {suite} ({len(data['expectations'])} expectations)",
        {
            "suite": str(path),
            "expectations": len(data["expectations"]),
            "failed_expectations": len(failures),
            "failures": "; ".join(failures),
            "rows": checked.num_rows,
        },
    )
