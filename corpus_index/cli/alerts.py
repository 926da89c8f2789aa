"""``corpus alerts``: the failed runs of the home nobody has acknowledged yet."""

from __future__ import annotations

import sys

import click

from corpus_index.alerts import acknowledge, alerts, alerts_path
from corpus_index.cli.app import EXIT_FAILED, emit_json, handle_errors, main, settings_of


@main.command("alerts")
@click.option("--ack", "ack", is_flag=True, help="Acknowledge the alerts listed (all, or RUN_IDs).")
@click.option("--all", "show_all", is_flag=True, help="List acknowledged alerts too.")
@click.option("--json", "as_json", is_flag=True, help="Print the alerts as JSON.")
@click.argument("run_ids", nargs=-1)
@click.pass_context
@handle_errors
def alerts_command(
    ctx: click.Context, ack: bool, show_all: bool, as_json: bool, run_ids: tuple[str, ...]
) -> None:
    """Failed runs not yet acknowledged: job, partition, failed checks and steps, the error.

    They are recorded by the daemon's run_failure_alert_sensor (runs from the UI and the
    automation) and by `corpus sync`. Exit 1 while any is unacknowledged; --ack [RUN_ID ...]
    acknowledges them (RUN_ID may be the 8-character prefix printed here).
    """
    home = settings_of(ctx).home
    if ack:
        done = acknowledge(home, list(run_ids) or None)
        if as_json:
            emit_json({"acknowledged": [a.to_json() for a in done]})
        else:
            click.echo(f"acknowledged {len(done)} alert(s)")
        return
    listed = [
        a
        for a in alerts(home, unacknowledged=not show_all)
        if not run_ids or any(a.run_id.startswith(p) for p in run_ids)
    ]
    if as_json:
        emit_json({"alerts": [a.to_json() for a in listed], "file": str(alerts_path(home))})
    elif not listed:
        click.echo("no unacknowledged alerts" if not show_all else "no alerts")
    else:
        for a in listed:
            click.echo(a.summary())
        click.echo(f"{len(listed)} alert(s); `corpus alerts --ack` acknowledges them", err=True)
    if alerts(home):
        sys.exit(EXIT_FAILED)
