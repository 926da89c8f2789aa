"""The alerts file: one alert per failed run, acknowledgements by run id or prefix, a torn
or damaged line skipped."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from corpus_index.alerts import Alert, acknowledge, alerts, alerts_path, record_alert
from corpus_index.cli import main


def alert(run_id: str, job: str = "embed_job") -> Alert:
    return Alert(run_id=run_id, job=job, failed_at="2026-12-02T00:00:00+00:00")


def test_each_run_is_recorded_once_and_acknowledged_by_prefix(tmp_path: Path) -> None:
    assert alerts(tmp_path) == []  # no file yet
    assert record_alert(tmp_path, alert("aaaa1111-x"))
    assert not record_alert(tmp_path, alert("aaaa1111-x"))  # the daemon's next tick, or a sync
    assert record_alert(tmp_path, alert("bbbb2222-y", job="generation_job"))
    with alerts_path(tmp_path).open("a", encoding="utf-8") as f:
        f.write('{"type": "alert", "run_id": "torn')  # a crash mid-write
    assert [a.run_id for a in alerts(tmp_path)] == ["aaaa1111-x", "bbbb2222-y"]
    assert [a.run_id for a in acknowledge(tmp_path, ["bbbb"])] == ["bbbb2222-y"]
    assert [a.run_id for a in alerts(tmp_path)] == ["aaaa1111-x"]
    assert acknowledge(tmp_path, ["bbbb"]) == []  # already acknowledged
    assert [a.run_id for a in acknowledge(tmp_path)] == ["aaaa1111-x"]
    assert alerts(tmp_path) == []
    assert len(alerts(tmp_path, unacknowledged=False)) == 2


def test_lines_that_are_no_record_are_skipped_and_the_others_still_serve(tmp_path: Path) -> None:
    """A damaged or hand-edited file (a value that is no record, a record without a run id,
    bytes that are not UTF-8) neither hides the alerts beside it nor stops a sync recording
    the next one."""
    assert record_alert(tmp_path, alert("aaaa1111-x"))
    with alerts_path(tmp_path).open("ab") as f:
        f.write(b'[1]\n"text"\nnull\n{"type": "alert"}\n{"type": "ack", "run_id": 7}\n')
        f.write(b'\xff\xfe{"type": "ack", "run_id": "aaaa1111-x"}\n')
        f.write(b'{"type": "alert", "run_id": "cccc3333-z", "failed_steps": "embeddings", ')
        f.write(b'"failed_checks": [1, "index_rows:rows_match"]}\n')
    assert record_alert(tmp_path, alert("bbbb2222-y"))
    listed = alerts(tmp_path)
    assert [a.run_id for a in listed] == ["aaaa1111-x", "cccc3333-z", "bbbb2222-y"]
    assert listed[1].failed_steps == () and listed[1].failed_checks == ("index_rows:rows_match",)

    shown = CliRunner().invoke(main, ["--home", str(tmp_path), "alerts"])
    assert shown.exit_code == 1 and isinstance(shown.exception, SystemExit), shown.exception
    assert "run aaaa1111" in shown.output and "run bbbb2222" in shown.output
    assert [a.run_id for a in acknowledge(tmp_path)] == ["aaaa1111-x", "cccc3333-z", "bbbb2222-y"]
    assert alerts(tmp_path) == []


def test_the_summary_names_what_failed() -> None:
    a = Alert(
        run_id="cccc3333-z",
        job="embed_job",
        failed_at="2026-12-02T00:00:00+00:00",
        partition="alpha|main",
        failed_steps=("embeddings",),
        failed_checks=("embeddings:vectors_are_finite[alpha|main]",),
        error="1 blocking asset check failed",
    )
    assert a.summary() == (
        "2026-12-02T00:00:00+00:00  embed_job [alpha|main]  run cccc3333  failed: "
        "embeddings:vectors_are_finite[alpha|main]: 1 blocking asset check failed"
    )
    assert alert("dddd4444").summary().endswith("run dddd4444  failed: the run")
