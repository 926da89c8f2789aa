"""Recording a step's gates on the generation whose promotion requires them."""

from __future__ import annotations

from corpus_index import gates
from corpus_index.home import Home
from corpus_index.registry import Generation


def record_partition_checks(
    home: Home, generation: Generation, asset: str, collection: str, outcomes: list[gates.Gate]
) -> None:
    """Record ``outcomes`` of ``asset``'s checks on ``collection`` against ``generation``."""
    home.registry.record_checks(
        generation.id,
        {gates.check_key(asset, g.name, collection): g.to_json() for g in outcomes},
    )
