"""``corpus registry copy``: move the home's registry into a PostgreSQL database."""

from __future__ import annotations

import click

from corpus_index.cli.app import emit_json, handle_errors, main, settings_of
from corpus_index.config import registry_url
from corpus_index.registry import JOURNAL_NAME, Registry, open_registry
from corpus_index.registry_copy import copy_registry
from corpus_index.registry_sql import redact


@main.group("registry")
def registry_group() -> None:
    """The registry's database: generations, pointers, tombstones, evals, traces."""


@registry_group.command("copy")
@click.option(
    "--to",
    "target",
    required=True,
    metavar="URL",
    help="The PostgreSQL database to copy into, postgresql://user@host:port/db (it must hold "
    "no registry rows yet).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the rows copied per table as JSON.")
@click.pass_context
@handle_errors
def copy_command(ctx: click.Context, target: str, as_json: bool) -> None:
    """Copy every row of the home's registry (by default <home>/registry.duckdb) into the
    database at URL, in one transaction. Stop syncs, the daemon and `corpus serve` first;
    afterwards set CORPUS_REGISTRY=URL (or pass --registry URL) so every process uses it."""
    settings = settings_of(ctx)
    url = registry_url(target, setting="--to")
    source = open_registry(settings)
    counts = copy_registry(source, Registry(url, journal=settings.home / JOURNAL_NAME))
    if as_json:
        emit_json({"from": source.location, "to": redact(url), "rows": counts})
        return
    click.echo(f"copied {source.location} -> {redact(url)}")
    for table, n in counts.items():
        click.echo(f"  {table:16} {n} rows")
    click.echo(f"now set CORPUS_REGISTRY={redact(url)} for every process of this home")
