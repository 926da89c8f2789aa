"""Non-finite numbers are refused where they enter: the CLI's option types and the library's
search option checks (issue 16: ``--dense-weight nan`` gave NaN scores, ``inf`` invalid JSON)."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from corpus_index import retrieval
from corpus_index.cli import main
from corpus_index.errors import InvalidQueryError

NON_FINITE = ["nan", "inf", "-inf", "NaN"]


@pytest.mark.parametrize("value", NON_FINITE)
@pytest.mark.parametrize(
    "args",
    [
        ["search", "q", "--tenant", "t", "--dense-weight"],
        ["search", "q", "--tenant", "t", "--lexical-weight"],
        ["sql", "SELECT 1", "--tenant", "t", "--timeout"],
        ["compact", "--retention-hours"],
    ],
)
def test_cli_refuses_non_finite_numbers(args: list[str], value: str) -> None:
    result = CliRunner().invoke(main, [*args, value])
    assert result.exit_code == 2, result.output
    assert "not a finite number" in result.output or "not in the range" in result.output


@pytest.mark.parametrize(
    "weights",
    [(math.nan, 1.0), (1.0, math.inf), (math.inf, math.inf), (-1.0, 1.0), (0.0, 0.0)],
)
def test_search_options_refuse_non_finite_weights(weights: tuple[float, float]) -> None:
    with pytest.raises(InvalidQueryError, match="finite, non-negative"):
        retrieval.check_options("hybrid", "weighted", None, 5, None, 0, weights, None)


def test_finite_weights_pass() -> None:
    retrieval.check_options("hybrid", "weighted", None, 5, None, 0, (0.7, 0.0), None)
