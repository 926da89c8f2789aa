"""`corpus promote/rollback --expect-active`: a retry after the move committed changes nothing
and says so; a mismatch is refused. Through the Dagster runner, as a user runs them."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from corpus_index.cli import main
from corpus_index.config import Settings
from corpus_index.registry import Registry
from tests.corpusgen import write_home


def test_rollback_and_promote_with_expect_active(tmp_path: Path) -> None:
    config = write_home(
        tmp_path,
        eval_gate="off",
        extra_profiles={"alt": {"embedder": "hash:v1-32", "namespace": "deals"}},
    )
    settings = Settings(config_path=config, home=tmp_path / "home")
    base = ["--config", str(config), "--home", str(settings.home)]
    runner = CliRunner()

    def corpus(*args: str) -> tuple[int, str]:
        result = runner.invoke(main, [*base, *args])
        return result.exit_code, result.output

    assert corpus("sync")[0] == 0
    assert corpus("promote", "g0001")[0] == 0
    assert corpus("promote", "g0002", "--expect-active", "g0001")[0] == 0
    reg = Registry(settings.registry_path)
    assert reg.active("deals").id == "g0002"  # type: ignore[union-attr]

    code, out = corpus("rollback", "--namespace", "deals", "--expect-active", "g0002")
    assert code == 0 and "ACTIVE generation is now g0001" in out, out
    moves = len(reg.history("deals"))
    code, out = corpus("rollback", "--namespace", "deals", "--expect-active", "g0002")
    assert code == 0, out
    assert "already done, nothing changed" in out and "ACTIVE generation is g0001" in out
    assert reg.active("deals").id == "g0001" and len(reg.history("deals")) == moves  # type: ignore[union-attr]

    code, out = corpus("promote", "g0002", "--namespace", "messages")  # not g0002's namespace
    assert code == 2 and "serves namespace 'deals', not 'messages'" in out, out
    assert reg.active("deals").id == "g0001"  # type: ignore[union-attr]

    code, out = corpus("promote", "g0002", "--expect-active", "g0002")
    assert code == 1, out
    assert "serves g0001, not g0002 as expected" in out and "nothing changed" in out
    assert reg.active("deals").id == "g0001" and len(reg.history("deals")) == moves  # type: ignore[union-attr]
