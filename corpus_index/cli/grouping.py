"""``corpus eval-grouping``: conversation grouping of an irc-disentanglement folder, scored
against its gold clusters (see :mod:`corpus_index.grouping_eval`); ``corpus conversations``:
how a collection's channel was told apart into conversations, drawn
(:mod:`corpus_index.conversation_timeline`)."""

from __future__ import annotations

from pathlib import Path

import click

from corpus_index import conversation_timeline as timelines
from corpus_index.cli.app import (
    EXIT_FAILED,
    EXIT_USAGE,
    check_writable,
    emit_json,
    handle_errors,
    main,
    runner_of,
    settings_of,
    writing,
)
from corpus_index.errors import ConfigError, ParseError
from corpus_index.grouping_eval import default_gold, evaluate_grouping
from corpus_index.home import Home
from corpus_index.linked.clusters import ANNOTATED_FROM, from_index, write_clusters
from corpus_index.linked.irc import SUFFIX as IRC_SUFFIX
from corpus_index.linked.scoring import GroupingScores
from corpus_index.plots import save_png

SKIPPED_NAMED = 5  # gold logs left out of the scores named in the text output (--json: all)


@main.command("eval-grouping")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--write-clusters",
    "clusters_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the conversations here, one a line: <stem>:<index> <index> ... (a train log "
    "<date>.train-<x> named <date>, as the gold files name it).",
)
@click.option(
    "--from-index",
    "first_index",
    type=click.IntRange(min=0),
    default=ANNOTATED_FROM,
    show_default=True,
    help="With --write-clusters: write the messages of this line index and later only (the "
    "part a log's gold clusters cover; the corpus annotates from 1,000 on, lines before are "
    "context). 0 writes every message.",
)
@click.option(
    "--gold",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Gold clusters to score against (default: gold.<folder name>.clusters.txt beside it).",
)
@click.option(
    "--weights",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Link-model weights (default: the ones shipped with corpus-index).",
)
@click.pass_context
@handle_errors
def eval_grouping(
    ctx: click.Context,
    folder: Path,
    as_json: bool,
    clusters_path: Path | None,
    first_index: int,
    gold: Path | None,
    weights: Path | None,
) -> None:
    """Group the irc logs (*.ascii.txt) of FOLDER into conversations and score them.

    FOLDER is synced through the pipeline into a home of its own (evals/grouping-<name>/
    under the home, a messages collection in the irc layout) and the conversations are those
    its linked_groups step wrote. Grouping reads the logs alone; gold clusters are read only to
    score: 1 - scaled VI, one-to-one overlap and conversation precision, recall and F, beside
    the channel-wide five-minute rule, over the gold conversations of the logs grouped (the
    gold's other logs are named as left out). With --write-clusters and no gold the
    conversations are written and scoring is skipped. --weights groups in this process
    instead (for trying weights other than the shipped ones).
    """
    if not any(folder.rglob(f"*{IRC_SUFFIX}")):
        click.echo(f"error: no irc logs (*{IRC_SUFFIX}) in {folder}", err=True)
        raise SystemExit(EXIT_USAGE)
    if clusters_path is None and gold is None and default_gold(folder) is None:
        click.echo(
            f"error: no gold clusters for {folder} (looked for {folder.parent}/gold."
            f"{folder.name}.clusters.txt); give --gold FILE, or --write-clusters FILE to "
            "only write the conversations",
            err=True,
        )
        raise SystemExit(EXIT_USAGE)
    if clusters_path is not None:  # checked before the sync, which takes minutes
        check_writable(clusters_path, "the conversations")
    try:
        report = evaluate_grouping(
            folder,
            settings=settings_of(ctx),
            runner=runner_of(ctx),
            gold=gold,
            weights=weights,
            progress=None if as_json else (lambda m: click.echo(f"  {m}", err=True)),
        )
    except ParseError as exc:  # the gold clusters (read first): bad input, as a bad option
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_USAGE) from None
    if report.nothing_read:
        for problem in report.problems:
            click.echo(f"error: {problem}", err=True)
        click.echo(f"error: no log of {folder} could be read; fix or remove them", err=True)
        raise SystemExit(EXIT_USAGE)
    written = None
    if clusters_path is not None:
        written = from_index(report.conversations, first_index)
        with writing(clusters_path, "the conversations"):
            write_clusters(clusters_path, written)
    if as_json:
        emit_json(
            {
                "folder": str(folder),
                "logs": report.logs,
                "messages": report.messages,
                "conversations": len(report.conversations),
                "clusters_file": str(clusters_path) if clusters_path else None,
                "clusters_from_index": first_index if clusters_path else None,
                "clusters_written": None if written is None else len(written),
                "gold": str(report.gold) if report.gold else None,
                "gold_logs_skipped": report.gold_logs_skipped,
                "scores": _row(report.scores),
                "five_minute_rule": _row(report.five_minute_scores),
                "problems": report.problems,
            }
        )
        return
    for problem in report.problems:
        click.echo(f"warning: {problem}", err=True)
    click.echo(
        f"{report.logs} logs, {report.messages} messages, {len(report.conversations)} conversations"
    )
    if clusters_path is not None and written is not None:
        n = sum(map(len, written))
        click.echo(
            f"{len(written)} conversations of {n} messages (line index {first_index} on) "
            f"written to {clusters_path}"
        )
        if not n and report.messages:
            click.echo(
                f"warning: no message has a line index of {first_index} or more; "
                "--from-index 0 writes every message",
                err=True,
            )
    if report.scores is None or report.five_minute_scores is None:
        click.echo("no gold clusters: scoring skipped")
        return
    if skipped := report.gold_logs_skipped:
        more = f" and {len(skipped) - SKIPPED_NAMED} more" if len(skipped) > SKIPPED_NAMED else ""
        click.echo(
            f"warning: {len(skipped)} logs of the gold clusters are not grouped here (not in "
            f"{folder}, or unreadable), left out of the scores: "
            f"{', '.join(skipped[:SKIPPED_NAMED])}{more}",
            err=True,
        )
    click.echo(f"scored on {report.scores.messages} annotated messages against {report.gold}")
    click.echo(f"{'grouping':<18} {'1-VI':>6} {'1-1':>6} {'P':>6} {'R':>6} {'F':>6}")
    for name, s in (("linked", report.scores), ("five-minute rule", report.five_minute_scores)):
        click.echo(
            f"{name:<18} {s.vi:6.1f} {s.one_to_one:6.1f} {s.precision:6.1f} "
            f"{s.recall:6.1f} {s.f:6.1f}"
        )


def _row(scores: GroupingScores | None) -> dict[str, float | int] | None:
    return None if scores is None else scores._asdict()


@main.command("conversations")
@click.argument("collection")
@click.option("--channel", default="", help="<source>/<channel> (default: the busiest).")
@click.option(
    "--messages",
    type=int,
    default=timelines.WINDOW_MESSAGES,
    show_default=True,
    help="The channel's newest messages drawn.",
)
@click.option("--hours", type=float, default=0.0, help="Instead: the hours up to its newest.")
@click.option(
    "--picture",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the picture (PNG) here.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_context
@handle_errors
def conversations(
    ctx: click.Context,
    collection: str,
    channel: str,
    messages: int,
    hours: float,
    picture: Path | None,
    as_json: bool,
) -> None:
    """How COLLECTION's busiest channel (or --channel) was told apart into conversations, as
    the last sync linked it: a line a conversation over the channel's newest messages, a mark
    where it speaks. Read from the kept links alone; names no message's words.
    """
    settings = settings_of(ctx)
    if collection not in settings.load().collections:
        raise ConfigError(f"no collection {collection!r} in {settings.config_path}")
    try:
        t = timelines.collection_timeline(
            Home(settings).warehouse, collection, channel=channel, messages=messages, hours=hours
        )
    except ValueError as exc:
        raise ConfigError(f"{collection}: {exc}") from exc
    if t is None:
        click.echo(
            f"error: {collection}: no conversation links (not a grouped kind, or not synced yet)",
            err=True,
        )
        raise SystemExit(EXIT_FAILED)
    if picture is not None:
        png = timelines.picture(t, collection)
        with writing(picture, "the picture"):
            save_png(png, picture)
    if as_json:
        emit_json({"collection": collection, **timelines.as_json(t), "picture": str(picture or "")})
        return
    for line in timelines.strips(t):
        click.echo(line)
    if picture is not None:
        click.echo(f"picture: {picture}")
