"""``corpus`` commands that run or inspect the pipeline: sync, generations and their lifecycle,
migration plans, compaction, deletion audits and retrieval evals."""

from __future__ import annotations

import sys

import click

from corpus_index.cli.app import (
    EXIT_DAMAGED,
    EXIT_FAILED,
    FiniteFloat,
    emit_json,
    handle_errors,
    main,
    runner_of,
    settings_of,
)
from corpus_index.config import Settings
from corpus_index.errors import ConfigError


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds to wait for another sync or promotion of this home to finish; after that "
    "(at once with 0) exit with code 75 (busy).",
)
@click.option(
    "--repair",
    is_flag=True,
    help="First repair what `corpus doctor` finds damaged, then sync (which rebuilds it).",
)
@click.option(
    "--retry-refused",
    is_flag=True,
    help="Send again the inputs an embedder's server refused before (held back unasked "
    "otherwise, until their text or the model changes).",
)
@click.pass_context
@handle_errors
def sync(
    ctx: click.Context, as_json: bool, wait_s: float, repair: bool, retry_refused: bool
) -> None:
    """Run the asset graph for every configured collection (the runs show in the Dagster UI).

    One sync per home at a time: a second one (or a promotion) waits up to --wait seconds for
    the lock under the home, then exits with code 75 (busy), naming the PID that holds it.
    """
    from corpus_index.homelock import home_lock_of

    settings = settings_of(ctx)
    with home_lock_of(settings, "sync", wait_s=wait_s):
        if repair:
            from corpus_index import doctor as doctor_

            for line in doctor_.repair(settings, doctor_.check(settings)):
                click.echo(f"  repaired: {line}", err=True)
        _sync(ctx, settings, as_json, retry_refused=retry_refused)


def _sync(ctx: click.Context, settings: Settings, as_json: bool, *, retry_refused: bool) -> None:
    def progress(message: str) -> None:
        if not as_json:
            click.echo(f"  running {message}", err=True)

    report = runner_of(ctx).sync(settings, progress=progress, retry_refused=retry_refused)
    summary = report.to_json()
    if as_json:
        emit_json(summary)
    else:
        click.echo(
            f"synced {summary['documents']} documents: embedded {summary['embedded']}, "
            f"cache hits {summary['cache_hits']}, quarantined {summary['quarantined']}"
        )
        for name, c in summary["collections"].items():
            held = f", {c['held']} held while their file is bad" if c.get("held") else ""
            click.echo(
                f"  {name}: {c['documents']} documents ({c['added']} added, {c['changed']} changed, "
                f"{c['removed']} removed{held}), {c['quarantined']} quarantined"
            )
        for profile, g in summary["generations"].items():
            click.echo(
                f"  profile {profile}: generation {g['generation']} {g['status']} with {g['rows']} rows"
            )
        for name, r in summary["reshards"].items():
            old = ", ".join(r["dropped"])
            then = f"; dropped {old}" if report.ok else f"; {old} kept until a sync succeeds"
            click.echo(
                f"  re-sharded {name}: {len(r['from'])} -> {len(r['to'])} partitions"
                + (then if old else "")
            )
        if summary["skipped_partitions"]:
            click.echo(f"  {len(summary['skipped_partitions'])} unchanged shard partitions not run")
        for row in summary.get("newly_quarantined", []):
            click.echo(f"  QUARANTINED {row['source_id']}: {row['error']}", err=True)
        for row in summary.get("notes", []):
            click.echo(f"  NOTE {row['note']}", err=True)
        for row in summary.get("refused", []):
            click.echo(
                f"  REFUSED {row['source_id']} ({row['profile']}): {row['error']}; held back, "
                "its last good version serving if it had one",
                err=True,
            )
        if more := summary.get("refused_inputs", 0) - len(summary.get("refused", [])):
            click.echo(
                f"  REFUSED {more} more inputs (see the embeddings runs' metadata)", err=True
            )
        for row in summary["stale"]:
            click.echo(
                f"  STALE {row['source_id']}: serving its last good version "
                f"({row['serving_version']}) since {row['since']}; {row['error']}",
                err=True,
            )
        for failure in summary["failed_runs"]:
            click.echo(
                f"  FAILED {failure['job']} {failure['partition']}: "
                f"{failure.get('failed_checks') or failure.get('error', '')}",
                err=True,
            )
    if not report.ok:
        sys.exit(EXIT_FAILED)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the generations as JSON.")
@click.pass_context
@handle_errors
def generations(ctx: click.Context, as_json: bool) -> None:
    """List index generations with status, counts and check outcomes."""
    from corpus_index.alerts import alerts
    from corpus_index.doctor import generation_problem
    from corpus_index.gates import check_summary
    from corpus_index.index_store import GenerationStore
    from corpus_index.registry import LIVE, open_registry

    settings = settings_of(ctx)
    reg = open_registry(settings)
    gens = reg.generations()
    store = GenerationStore(settings.lance_uri)
    # a live generation whose table is missing or unreadable is not healthy, whatever its
    # status and checks say
    damage = {g.id: generation_problem(store, g) if g.status in LIVE else None for g in gens}
    if as_json:
        config = settings.load()
        emit_json(
            {
                "generations": [{**g.to_json(), "damaged": damage[g.id]} for g in gens],
                # how each namespace's hybrid search fuses (the default unless declared)
                "retrieval": {
                    name: {**ns.retrieval.to_json(), "declared": ns.retrieval_declared}
                    for name, ns in config.namespaces.items()
                },
            }
        )
        if any(damage.values()):
            sys.exit(EXIT_DAMAGED)
        return
    if not gens:
        click.echo("no generations yet (run `corpus sync`)")
    for g in gens:
        checks = check_summary(g.checks)
        golden = g.eval.get("golden", {})
        metrics = (
            f"  recall@5={golden['recall@5']:.3f} mrr@10={golden['mrr@10']:.3f} "
            f"ndcg@10={golden['ndcg@10']:.3f}"
            if golden
            else ""
        )
        click.echo(
            f"{g.id}  {g.status:<8} {g.spec.namespace}/{g.spec.profile}  {g.spec.backend_spec}  "
            f"dim={g.spec.dim}  rows={g.row_count}{metrics}  {checks}"
        )
        if damage[g.id]:
            click.echo(
                f"  DAMAGED: {damage[g.id]}; run `corpus doctor --repair`, then `corpus sync`",
                err=True,
            )
    unacknowledged = alerts(settings.home)
    if unacknowledged:  # the failed runs an operator looking here has not seen yet
        click.echo(
            f"{len(unacknowledged)} unacknowledged alert(s), the newest: "
            f"{unacknowledged[-1].summary()}; see `corpus alerts`",
            err=True,
        )
    if any(damage.values()):
        sys.exit(EXIT_DAMAGED)


@main.command()
@click.option(
    "--repair",
    is_flag=True,
    help="Rebuild what is damaged: restore the registry from its journal, drop damaged "
    "partitions and tables so the next `corpus sync` rebuilds them.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@click.pass_context
@handle_errors
def doctor(ctx: click.Context, repair: bool, as_json: bool) -> None:
    """Check the home: warehouse partitions, generation and cache tables, the registry.

    Also names each cache table no model reads (UNCLAIMED, under "notices" in --json: named
    before cache names were exact, its owner cannot be decided); that is no damage, and
    --repair leaves it.

    --repair holds the home's lock (as a sync does): while a sync or a run holds it, it exits
    with code 75 (busy), naming the holder, and changes nothing.
    """
    from corpus_index import doctor as doctor_
    from corpus_index.homelock import home_lock_of

    settings = settings_of(ctx)
    if repair:
        with home_lock_of(settings, "doctor --repair"):
            findings = doctor_.check(settings)
            done = doctor_.repair(settings, findings) if findings else []
    else:
        findings, done = doctor_.check(settings), []
    notices = doctor_.notices(settings)
    if as_json:
        emit_json(
            {
                "findings": [f.to_json() for f in findings],
                "repaired": done,
                "notices": [n.to_json() for n in notices],
            }
        )
    else:
        if not findings:
            where = f" (stores: {settings.storage})" if settings.storage else ""
            click.echo(f"{settings.home}{where}: healthy")
        for f in findings:
            click.echo(f"DAMAGED {f.kind} {f.name}: {f.path}: {f.problem}")
            click.echo(f"  {'repaired' if repair else 'repair would'}: {f.repair}")
        for n in notices:
            click.echo(f"UNCLAIMED cache {n.name}: {n.path}: {n.problem}")
            click.echo(f"  to do: {n.repair}")
        for line in done:
            click.echo(f"  done: {line}")
        if done:
            click.echo("now run `corpus sync` to rebuild what was removed")
    if findings and not repair:
        sys.exit(EXIT_DAMAGED)


EXPECT_ACTIVE_HELP = (
    "The generation that serves now (gNNNN, as `corpus generations` shows it). A retry after "
    "the {action} already committed changes nothing and says so; if another generation "
    "serves, the {action} is refused. Needs a single namespace."
)


def _run_promotion(
    ctx: click.Context, namespace: str, generation: str, action: str, expect_active: str = ""
) -> None:
    from corpus_index.registry import open_registry

    settings = settings_of(ctx)
    runner = runner_of(ctx)
    before = open_registry(settings).active(namespace)
    if action == "rollback":
        result = runner.rollback(settings, namespace, expect_active=expect_active)
    else:
        result = runner.promote(settings, namespace, generation, expect_active=expect_active)
    if not result.success:
        detail = result.error or "see the run in the Dagster UI"
        click.echo(f"error: {action} refused for namespace {namespace}: {detail}", err=True)
        sys.exit(EXIT_FAILED)
    active = open_registry(settings).active(namespace)
    if active is None:
        return
    if expect_active and (before.id if before else "") != expect_active:
        # succeeded although the expected generation did not serve: a retry of a committed move
        click.echo(
            f"{namespace}: already done, nothing changed: the {action} from {expect_active} "
            f"to {active.id} had committed; ACTIVE generation is {active.id} "
            f"({active.spec.profile}, {active.row_count} rows); run {result.run_id}"
        )
        return
    click.echo(
        f"{namespace}: ACTIVE generation is now {active.id} ({active.spec.profile}, "
        f"{active.spec.backend_spec}, {active.row_count} rows); run {result.run_id}"
    )


def _single_namespace(expect_active: str, namespaces: list[str], action: str) -> None:
    if expect_active and len(namespaces) != 1:
        raise click.UsageError(
            f"--expect-active names one generation, but {action} would act on "
            f"{len(namespaces)} namespaces ({', '.join(namespaces) or 'none'}); pass --namespace"
        )


@main.command()
@click.argument("generation", required=False)
@click.option(
    "--namespace", help="Namespace to promote in (default: the generation's, or every namespace)."
)
@click.option(
    "--expect-active", default="", metavar="GNNNN", help=EXPECT_ACTIVE_HELP.format(action="promote")
)
@click.pass_context
@handle_errors
def promote(
    ctx: click.Context, generation: str | None, namespace: str | None, expect_active: str
) -> None:
    """Make GENERATION (default: the newest READY one) serve its namespace, after its gates passed."""
    from corpus_index.registry import open_registry

    settings = settings_of(ctx)
    if generation:
        gen = open_registry(settings).require(generation)
        if namespace and gen.spec.namespace != namespace:
            raise ConfigError(
                f"generation {gen.id} serves namespace {gen.spec.namespace!r}, not "
                f"{namespace!r}; nothing was promoted"
            )
        _run_promotion(ctx, gen.spec.namespace, generation, "promote", expect_active)
        return
    config = settings.load()
    namespaces = [namespace] if namespace else list(config.namespaces)
    _single_namespace(expect_active, namespaces, "promote")
    for ns in namespaces:
        _run_promotion(ctx, ns, "", "promote", expect_active)


@main.command()
@click.option(
    "--namespace",
    default=None,
    help="Namespace to roll back (default: every namespace with a previous generation).",
)
@click.option(
    "--expect-active",
    default="",
    metavar="GNNNN",
    help=EXPECT_ACTIVE_HELP.format(action="rollback"),
)
@click.pass_context
@handle_errors
def rollback(ctx: click.Context, namespace: str | None, expect_active: str) -> None:
    """Point a namespace back at its previous ACTIVE generation, in one step, without re-embedding."""
    from corpus_index.registry import open_registry

    settings = settings_of(ctx)
    reg = open_registry(settings)
    config = settings.load()
    namespaces = [namespace] if namespace else [ns for ns in config.namespaces if reg.previous(ns)]
    _single_namespace(expect_active, namespaces, "rollback")
    if not namespaces:
        click.echo("error: no namespace has a previous generation to roll back to", err=True)
        sys.exit(EXIT_FAILED)
    for ns in namespaces:
        _run_promotion(ctx, ns, "", "rollback", expect_active)


@main.command()
@click.argument("generation")
@click.pass_context
@handle_errors
def retire(ctx: click.Context, generation: str) -> None:
    """Retire GENERATION and drop its table (never the ACTIVE one nor the rollback target, and
    only after the namespace's retire_after_hours)."""
    from corpus_index.registry import open_registry

    settings = settings_of(ctx)
    open_registry(settings).require(generation)
    result = runner_of(ctx).retire(settings, generation)
    if not result.success:
        detail = result.error or "see the run in the Dagster UI"
        click.echo(f"error: retire refused: {detail}", err=True)
        sys.exit(EXIT_FAILED)
    gen = open_registry(settings).require(generation)
    click.echo(f"{gen.id}: {gen.status}; table {gen.table_name} dropped; run {result.run_id}")


@main.command("plan-migration")
@click.argument("profile")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.pass_context
@handle_errors
def plan_migration(ctx: click.Context, profile: str, as_json: bool) -> None:
    """Estimate what backfilling PROFILE would embed: inputs, cache hits, tokens and cost."""
    from corpus_index.home import Home
    from corpus_index.migration import plan_migration as plan

    result = plan(Home(settings_of(ctx)), profile)
    if as_json:
        emit_json(result.to_json())
        return
    click.echo(
        f"profile {result.profile} -> namespace {result.namespace}: {result.backend_spec} "
        f"(revision {result.model_revision}, dim {result.dim}, input format {result.input_format})"
    )
    if result.existing_generation:
        click.echo(f"  builds into existing generation {result.existing_generation}")
    else:
        click.echo("  builds a new generation (BUILDING beside the ACTIVE one)")
    click.echo(f"  {'collection':<24}{'inputs':>8}{'cached':>8}{'to embed':>10}{'tokens':>10}")
    for c in result.collections:
        note = "" if c.ingested else "  (not ingested yet: run `corpus sync`)"
        click.echo(
            f"  {c.collection:<24}{c.distinct_inputs:>8}{c.cache_hits:>8}{c.to_embed:>10}"
            f"{c.tokens_to_embed:>10}{note}"
        )
    click.echo(
        f"  {'total':<24}{result.inputs:>8}{result.cache_hits:>8}{result.to_embed:>10}"
        f"{result.tokens_to_embed:>10}"
    )
    if result.shared_inputs:
        click.echo(
            f"  the rows count {result.shared_inputs} inputs more than the total: an input "
            "in several collections is in each one's row, and the backfill embeds it once"
        )
    cost = "not priced" if result.cost_usd is None else f"${result.cost_usd:.4f}"
    click.echo(f"  tokens counted by: {result.token_counter}; cost: {cost}")


@main.command()
@click.option(
    "--retention-hours",
    type=FiniteFloat(),
    default=24.0,
    show_default=True,
    help="Keep LanceDB versions younger than this (ignored while a deletion awaits purge).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the compaction report as JSON.")
@click.pass_context
@handle_errors
def compact(ctx: click.Context, retention_hours: float, as_json: bool) -> None:
    """Optimize every live index and cache table now (what compaction_schedule runs nightly)."""
    result, report = runner_of(ctx).compact(settings_of(ctx), retention_hours)
    if not result.success:
        click.echo(f"error: compaction failed: {result.error}", err=True)
        sys.exit(EXIT_FAILED)
    if as_json:
        emit_json(report)
        return
    for t in report["tables"]:
        extra = (
            f", {t['cache_entries_purged']} unused entries purged"
            if "cache_entries_purged" in t
            else ""
        )
        click.echo(
            f"{t['table']}: {t['rows']} rows, versions {t['versions_before']} -> "
            f"{t['versions_after']}{extra}"
        )
    for name in report.get("retired_tables_dropped", []):
        click.echo(f"{name}: dropped (its generation is RETIRED; a retire left it)")
    click.echo(
        f"compacted {len(report['tables'])} tables in {report['seconds']} s; "
        f"{len(report['tombstones_purged'])} deletions physically purged"
    )


@main.command("audit-deletion")
@click.argument("source_id")
@click.option("--json", "as_json", is_flag=True, help="Print the audit as JSON.")
@click.pass_context
@handle_errors
def audit_deletion(ctx: click.Context, source_id: str, as_json: bool) -> None:
    """Search every store (all generation tables and their old versions, caches, exports,
    warehouse) for SOURCE_ID and its hashes, and the bytes of every file of the home for
    fingerprints of its deleted texts and vectors; exit 1 if anything remains."""
    from corpus_index.deletion import audit_deletion as audit
    from corpus_index.home import Home

    report = audit(Home(settings_of(ctx)), source_id)
    if as_json:
        emit_json(report)
    else:
        tomb = report["tombstone"]
        if tomb:
            click.echo(
                f"{source_id}: deleted {tomb['removed_at']} ({tomb['reason']}); receipt "
                f"{tomb['receipt']}; purged: {tomb['purged_at'] or 'not yet (run corpus compact)'}"
            )
        else:
            click.echo(f"{source_id}: no tombstone (never deleted, or deleted and re-added)")
        for r in report["remaining"]:
            where = r.get("table") or r.get("path")
            version = (
                f" version {r['version']}{' (current)' if r.get('current') else ''}"
                if "version" in r
                else ""
            )
            count = f": {r['rows']} rows" if "rows" in r else ""
            click.echo(f"  REMAINS in {r['store']} {where}{version}{count} (by {r['match']})")
        scan = report["byte_scan"]
        cost = scan.get("cost", {})
        click.echo(
            f"  byte scan: {scan['status']}"
            + (
                f", {cost['files']} files, {cost['raw_bytes']} bytes in {cost['seconds']} s"
                if cost
                else ""
            )
        )
        click.echo(f"  identity details: {report['identity_details']}")
        for s_ in report["shared"]:
            what = (
                f"{s_['input_hashes']} input hashes"
                if "input_hashes" in s_
                else f"{s_['units']} unit ids"
            )
            click.echo(f"  shared: {what} ({s_['why']})")
        click.echo("clean: nothing remains" if report["clean"] else "NOT clean")
    if not report["clean"]:
        sys.exit(EXIT_FAILED)


@main.command("eval")
@click.argument("dataset_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--profile", help="Embedding profile (default: the first in corpus.yaml).")
@click.option(
    "--mode",
    "mode",
    type=click.Choice([*("dense", "lexical", "hybrid"), "all"]),
    default="hybrid",
    show_default=True,
    help="Search mode to score, or all three.",
)
@click.option("--k", "ks", default="1,5,10,100", show_default=True, help="Recall cut-offs.")
@click.option("--limit", type=int, help="Only the first N queries (a quick look).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per mode.")
@click.pass_context
@handle_errors
def eval_command(
    ctx: click.Context,
    dataset_dir: str,
    profile: str | None,
    mode: str,
    ks: str,
    limit: int | None,
    as_json: bool,
) -> None:
    """Evaluate retrieval on a BEIR-format folder (corpus.jsonl, queries.jsonl, qrels.tsv),
    ingested through the pipeline into a namespace of its own."""
    from pathlib import Path

    from corpus_index.beir_eval import MODES, run_eval

    try:
        cutoffs = sorted({int(k) for k in ks.split(",") if k.strip()})
    except ValueError:
        raise click.BadParameter(f"--k takes integers like 1,5,10 (got {ks!r})") from None
    if 10 not in cutoffs:
        cutoffs.append(10)
    modes = list(MODES) if mode == "all" else [mode]
    settings = settings_of(ctx)
    runner = runner_of(ctx)
    results = run_eval(
        settings,
        Path(dataset_dir),
        runner=runner,
        profile=profile,
        modes=modes,
        ks=cutoffs,
        limit=limit,
        progress=None if as_json else (lambda m: click.echo(f"  {m}", err=True)),
    )
    runner.eval_report(settings)
    if as_json:
        emit_json(results if len(results) > 1 else results[0])
        return
    cols = ["ndcg@10", "mrr@10", *[f"recall@{k}" for k in cutoffs], "p@10"]
    click.echo(
        f"{'dataset':<12}{'mode':<9}{'gen':<7}"
        + "".join(f"{c:>11}" for c in cols)
        + f"{'p50 ms':>9}{'p95 ms':>9}"
    )
    for r in results:
        click.echo(
            f"{r['dataset']:<12}{r['mode']:<9}{r['generation']:<7}"
            + "".join(f"{r[c]:>11.4f}" for c in cols)
            + f"{r['latency_p50_ms']:>9.1f}{r['latency_p95_ms']:>9.1f}"
        )
