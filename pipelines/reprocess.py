"""``reprocess_job`` and ``reprocess_schedule``: the hourly second pass over linked groups
(seed "Linked Context" §7): the due items of every grouped collection, at most 50, re-linked
with the wider windows; ``linked_groups`` and ``embedding_inputs`` of each collection touched
are rewritten and reported as materializations, so the automation sensor embeds and indexes
the changed groups like any ingest.

``now`` comes from the run config (ISO 8601), else the clock: the schedule puts its tick's time
there (``ScheduleEvaluationContext.scheduled_execution_time``), so a scheduled run is judged at
its tick, re-executed or not. A tick with no item due starts no run (the job holds the home
alone while it runs).
"""

# no `from __future__ import annotations`: Dagster reads the op annotations at definition time

import time

import dagster as dg

from assets import CorpusResource
from corpus_index.homelock import EXCLUSIVE_TAGS
from corpus_index.steps import reprocess


class ReprocessConfig(dg.Config):  # type: ignore[misc]
    """When the run is judged at, and which collection (none: every grouped one)."""

    now: str = ""  # ISO 8601 (the schedule gives its tick's); empty: the clock
    collection: str = ""


@dg.op(description="Re-process the due linked groups (at most 50) with the wider windows.")
def reprocess_op(
    context: dg.OpExecutionContext, config: ReprocessConfig, corpus: CorpusResource
) -> dg.Output[dict[str, object]]:
    now = reprocess.parse_now(config.now) if config.now else time.time()
    report = reprocess.run(corpus.open_home(), now, collection=config.collection)
    for name, entry in report.collections.items():
        for asset in ("linked_groups", "embedding_inputs"):
            context.log_event(
                dg.AssetMaterialization(
                    asset_key=asset,
                    partition=name,
                    metadata={"reprocessed_at": reprocess.iso(now), **_counts(entry)},
                )
            )
    context.log.info(
        f"re-processed {len(report.taken)} items at {reprocess.iso(now)}: "
        f"{report.groups_changed} groups changed, {len(report.timed_out)} timed out"
    )
    if not report.passed:
        failed = [n for n, e in report.collections.items() if not e["written"]]
        raise dg.Failure(
            f"the linked-group checks failed for {', '.join(failed)}: their last good groups "
            "stay (see the linked_groups checks)"
        )
    return dg.Output(
        report.to_json(),
        metadata={
            "now": reprocess.iso(now),
            "items_taken": len(report.taken),
            "groups_changed": report.groups_changed,
            "items_timed_out": len(report.timed_out),
            "collections": ", ".join(report.collections) or "none",
        },
    )


def _counts(entry: dict[str, object]) -> dict[str, object]:
    return {k: entry[k] for k in ("taken", "groups_changed", "queued")}


@dg.job(
    description="Re-process the due linked groups of every grouped collection (seed §7).",
    # it rewrites the groups of every collection it touches, which holds no step's scope lock
    tags=EXCLUSIVE_TAGS,
)
def reprocess_job() -> None:
    reprocess_op()


@dg.schedule(
    name="reprocess_schedule",
    job=reprocess_job,
    cron_schedule="0 * * * *",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Hourly: questions, incidents and conversations still waiting for their context "
    "(no run when none is due).",
)
def reprocess_schedule(
    context: dg.ScheduleEvaluationContext, corpus: CorpusResource
) -> dg.RunRequest | dg.SkipReason:
    # the run takes the home alone (EXCLUSIVE_TAGS): it starts only when it has work, judged
    # at the tick, as the run is (read only: the queue files, no registry)
    at = context.scheduled_execution_time
    now = at.timestamp() if at is not None else time.time()
    due = reprocess.due_count(corpus.settings(), now)
    if not due:
        return dg.SkipReason(f"no linked group is due for re-processing at {reprocess.iso(now)}")
    # the run is judged at the tick too: its time goes in the run's config
    config = ReprocessConfig(now=reprocess.iso(now))
    return dg.RunRequest(run_config=dg.RunConfig(ops={"reprocess_op": config}))
