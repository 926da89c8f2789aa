"""One run of a home's job out of process, on the instance ``DAGSTER_HOME`` names, with the
executor the Definitions declare (``CORPUS_EXECUTOR=multiprocess``: a process per step).

    python -m tests.dagster.prod_jobs ingest_job alpha-deals
    python -m tests.dagster.prod_jobs embed_job 'alpha-deals|main'

The environment names the home (``CORPUS_CONFIG``, ``CORPUS_HOME``) and the instance; the step
processes rebuild the job from this module (``dg.reconstructable``). Prints the run's id and
whether it succeeded, as one JSON line; exits 1 when it failed.
"""

from __future__ import annotations

import json
import sys

import dagster as dg

from definitions import build_definitions
from tests.dagster.harness import QUIET


def ingest_job() -> dg.JobDefinition:
    return build_definitions().resolve_job_def("ingest_job")


def embed_job() -> dg.JobDefinition:
    return build_definitions().resolve_job_def("embed_job")


def generation_job() -> dg.JobDefinition:
    return build_definitions().resolve_job_def("generation_job")


JOBS = {"ingest_job": ingest_job, "embed_job": embed_job, "generation_job": generation_job}


def main(argv: list[str]) -> int:
    name, partition_key = argv
    make = JOBS[name]
    tags = make().get_tags_for_partition_key(partition_key, selected_asset_keys=None)
    with (
        dg.DagsterInstance.get() as instance,
        dg.execute_job(dg.reconstructable(make), instance, run_config=QUIET, tags=tags) as result,
    ):
        print(json.dumps({"run_id": result.run_id, "success": result.success}))
        return 0 if result.success else 1


if __name__ == "__main__":
    from tests.dagster import prod_jobs  # the functions the step processes import by name

    sys.exit(prod_jobs.main(sys.argv[1:]))
