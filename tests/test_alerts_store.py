"""The alerts file: one alert per failed run, acknowledgements by run id or prefix, a torn
line skipped."""

from __future__ import annotations

from pathlib import Path

from corpus_index.alerts import Alert, acknowledge, alerts, alerts_path, record_alert


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
