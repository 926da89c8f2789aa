"""``corpus reprocess``: the second pass over linked groups (what ``reprocess_schedule`` runs
hourly), at a time given or now."""

from __future__ import annotations

import sys
import time

import click

from corpus_index.cli.app import EXIT_FAILED, emit_json, handle_errors, main, runner_of, settings_of
from corpus_index.home import Home
from corpus_index.steps.reprocess import grouped_collections, iso, parse_now


@main.command()
@click.option(
    "--now",
    "now_text",
    metavar="TIME",
    help="Judge what is due at this ISO 8601 time (for example 2025-12-10T06:00:00+11:00; "
    "no offset reads as UTC). Default: the clock.",
)
@click.option("--collection", default="", help="Only this grouped collection (default: all).")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
@click.pass_context
@handle_errors
def reprocess(ctx: click.Context, now_text: str | None, collection: str, as_json: bool) -> None:
    """Re-process the linked groups still waiting for context: questions without an answer,
    incidents without their shift notes, conversations still going (at most 50 items, highest
    priority first), with the wider windows; the groups that change are embedded and indexed."""
    # an empty --now (an unset shell variable, say) is refused, not read as the clock
    now = iso(parse_now(now_text) if now_text is not None else time.time())
    if collection:  # refused here (exit 2) rather than as a failed run
        grouped_collections(Home(settings_of(ctx)), collection)
    result, report, synced = runner_of(ctx).reprocess(settings_of(ctx), now, collection=collection)
    if not result.success:
        click.echo(f"error: re-processing failed: {result.error}", err=True)
        sys.exit(EXIT_FAILED)
    if as_json:
        emit_json({**report, "sync": synced.to_json() if synced is not None else None})
    else:
        click.echo(
            f"re-processed at {report['now']}: {report['items_taken']} items taken, "
            f"{report['groups_changed']} groups changed, {report['items_timed_out']} items "
            "timed out"
        )
        for name, c in report["collections"].items():
            click.echo(
                f"  {name}: {c['taken']} taken, {c['groups_changed']} groups changed, "
                f"{len(c['timed_out'])} timed out, {c['queued']} still queued"
            )
            timed_out = set(c["timed_out"])
            for item in (t for t in report["taken"] if t["collection"] == name):
                status = "  timed out" if item["key"] in timed_out else ""
                click.echo(
                    f"    {item['key']} (priority {item['priority']}, attempt "
                    f"{item['attempt']}){status}"
                )
        for failure in synced.failed_runs if synced is not None else []:
            click.echo(f"  FAILED {failure['job']} {failure['partition']}", err=True)
    if synced is not None and not synced.ok:
        sys.exit(EXIT_FAILED)
