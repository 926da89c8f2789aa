"""``corpus export verify``: a consumer's check of a flat-blob export (seed "Embeddings")."""

from __future__ import annotations

import os
import sys
from dataclasses import asdict

import click

from corpus_index.cli.app import EXIT_FAILED, announce_model_loading, emit_json, handle_errors, main
from corpus_index.embedders import make_embedder
from corpus_index.errors import ExportError
from corpus_index.export_reader import load_export, probe_verdict, search_blob, verdict_line


@main.group("export")
def export_group() -> None:
    """Flat-blob embedding exports (index.json + blob + chunks file)."""


@export_group.command("verify")
@click.argument("location")
@click.option(
    "--model",
    default="",
    help="The local model's backend_spec (default: the export's own, built locally).",
)
@click.option("--query", default="", help="Also search the blob for this text.")
@click.option("-k", "k", default=5, show_default=True, type=click.IntRange(1, 1000))
@click.option(
    "--api-key-env",
    default="CORPUS_API_KEY",
    show_default=True,
    help="The environment variable holding an API key, sent to an http(s) server "
    "(`corpus serve` serves exports only to a key); unset sends none.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@handle_errors
def verify_command(
    location: str, model: str, query: str, k: int, api_key_env: str, as_json: bool
) -> None:
    """Check the export at LOCATION (an embeddings/ folder, its index.json, or an http:// URL of
    either): fetch the blob in one read, check its size and sha256, embed the probe with the
    local model and give a verdict: verified (> 0.99), degraded (0.9-0.99), incompatible
    (< 0.9). With --query, search the blob, which is refused when the model's backend_spec is
    not the export's. Exit 0 verified or degraded, 1 incompatible or a broken export.
    """
    try:
        export = load_export(location, api_key=os.environ.get(api_key_env) or None)
    except ExportError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_FAILED)
    announce_model_loading()
    embedder = make_embedder(model or export.index["backend_spec"])
    verdict = probe_verdict(export, embedder)
    report = {
        "location": export.location,
        "backend_spec": export.index["backend_spec"],
        "model": embedder.backend_spec,
        "count": export.index["count"],
        "dim": export.index["dim"],
        "sha256": export.index["sha256"],
        **asdict(verdict),
    }
    if query:
        report["hits"] = [asdict(h) for h in search_blob(export, query, embedder=embedder, k=k)]
    if as_json:
        emit_json(report)
    else:
        click.echo(verdict_line(export, embedder, verdict))
        for hit in report.get("hits", []):
            click.echo(
                f"  {hit['score']:.3f}  {hit['source_id'] or hit['row']}  "
                f"#{hit['row']} {hit['section'] or ''}".rstrip()
            )
    sys.exit(EXIT_FAILED if verdict.verdict == "incompatible" else 0)
