"""``corpus storage``: where the stores live, and moving them to an object store."""

from __future__ import annotations

import click

from corpus_index.cli.app import emit_json, handle_errors, main, settings_of


@main.group("storage")
def storage() -> None:
    """Where the stores (warehouse, LanceDB tables, exports, receipts) live: the home folder,
    or the object store CORPUS_STORAGE names (s3://bucket/prefix)."""


@storage.command("copy")
@click.option(
    "--to",
    "target",
    required=True,
    metavar="s3://BUCKET/PREFIX",
    help="An empty object-store prefix; endpoint and credentials come from the AWS_* "
    "environment variables (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...).",
)
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds to wait for a sync or promotion of this home to finish first.",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was copied as JSON.")
@click.pass_context
@handle_errors
def copy(ctx: click.Context, target: str, wait_s: float, as_json: bool) -> None:
    """Copy the stores of this home to an object store and check the copy, file by file.

    The source is left as it is; the home serves from the copy once CORPUS_STORAGE names it.
    The registry, the lock and Dagster's folder stay in the home folder.
    """
    from corpus_index.store_copy import copy_stores

    report = copy_stores(settings_of(ctx), target, wait_s=wait_s)
    if as_json:
        emit_json(report.to_json())
        return
    for name, counts in report.stores.items():
        click.echo(f"{name}: {counts['files']} files, {counts['bytes']} bytes")
    click.echo(f"copied {report.source} to {report.target}; now set CORPUS_STORAGE={report.target}")
