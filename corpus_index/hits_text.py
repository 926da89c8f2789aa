"""Hits as people read them in a terminal: score, source, excerpt and provenance."""

from __future__ import annotations

from typing import Any

import click


def print_hits(query: str, result: Any) -> None:
    """Human-readable hits with their provenance."""
    click.echo(
        f'\n"{query}"  ({len(result.hits)} hits, {result.trace.get("mode", "dense")}, '
        f"generation {result.trace['generation']}, {result.trace['total_ms']:.0f} ms)"
    )
    for rank, hit in enumerate(result.hits, start=1):
        p = hit.provenance
        click.echo(
            f"{rank:>2}. {hit.score:.3f}  {hit.source_id}  [{hit.section}]  tenant={hit.tenant_id}"
        )
        click.echo(f"    {hit.excerpt}")
        click.echo(
            f"    {p.chunk_ref}  {p.content_hash[:19]}…  {p.backend_spec}  run {p.run_id[:8]}"
        )
        for chunk in getattr(hit, "context", ()):
            marker = ">" if chunk.is_hit else " "
            click.echo(f"    {marker} [{chunk.block_key}] {' '.join(chunk.text.split())[:200]}")
