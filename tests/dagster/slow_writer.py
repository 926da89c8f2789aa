"""An asset that writes one generation slowly, for the scope lock's test (test_run_lock.py).

Without ``from __future__ import annotations``: Dagster reads the annotations of an asset's
parameters as classes, to tell its context and resources apart."""

import time

import dagster as dg

from assets.resources import CorpusResource, writes

# run id -> when its step wrote (from, to)
WROTE: dict[str, tuple[float, float]] = {}


@dg.asset(partitions_def=dg.StaticPartitionsDefinition(["main"]))
@writes("generation")
def generation_table(context: dg.AssetExecutionContext, corpus: CorpusResource) -> None:
    start = time.time()
    time.sleep(2.0)  # long enough for another run to ask for the lock meanwhile
    WROTE[context.run.run_id] = (start, time.time())
