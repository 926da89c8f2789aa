"""Conversation grouping of an irc-disentanglement folder, read through the ``messages``
kind's ``irc`` layout, and its scores against gold clusters when there are any.

The folder is ingested through the real pipeline into a home of its own
(``<home>/evals/grouping-<folder>/``, as ``corpus eval`` does for retrieval): one ``messages``
collection in the ``irc`` layout, synced by the pipeline runner, and the conversations are
those its ``linked_groups`` step wrote (each chat message not in one stands alone, as does each
system line). The profile embeds with ``hash:v1-384``: the conversation linker reads no
embedding (topic is TF-IDF), so no model is loaded to score a grouping. Link-model weights
other than the shipped ones (``weights``, for training experiments) group the parsed logs in
this process instead. Grouping reads only the logs (``*.ascii.txt``): never annotation or gold
files, which only score.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc

from corpus_index.collection import CollectionConfig
from corpus_index.config import Settings, home_of_its_own
from corpus_index.errors import ConfigError, ParseError
from corpus_index.group_records import GROUP_SCHEMA, MEMBER_SCHEMA
from corpus_index.home import Home
from corpus_index.kinds import parse_document, read_documents
from corpus_index.kinds.messages import message_of
from corpus_index.linked.clusters import gold_named, read_clusters, split_id
from corpus_index.linked.conversations import five_minute_rule, group_conversations
from corpus_index.linked.messages import Message
from corpus_index.linked.model import LinkModel
from corpus_index.linked.scoring import GroupingScores, score
from corpus_index.records import BLOCK_SCHEMA, QUARANTINE_SCHEMA
from corpus_index.runner import PipelineRunner, Progress, load_runner
from corpus_index.steps.linked_groups import read_units

EVAL_GROUP = "eval"
EMBEDDER = "hash:v1-384"


@dataclass(frozen=True, slots=True)
class GroupingReport:
    """What grouping a folder gave: the conversations, what could not be read, and the
    scores of ours and of the channel-wide five-minute rule (None without gold)."""

    logs: int
    messages: int
    conversations: list[list[str]]  # unit ids as the gold files name them (gold_named)
    problems: list[str]  # a log that could not be read or parsed: its file, line and reason
    gold: Path | None
    gold_logs_skipped: list[str]  # gold logs not grouped here, left out of the scores
    scores: GroupingScores | None
    five_minute_scores: GroupingScores | None

    @property
    def nothing_read(self) -> bool:
        """Every log of the folder could not be read or parsed (nothing grouped or scored)."""
        return _none_read(self.logs, self.problems)


def default_gold(folder: Path) -> Path | None:
    """The gold clusters the corpus keeps beside a split's folder (``gold.<split>.clusters.txt``
    next to ``<split>/``), if there."""
    path = folder.parent / f"gold.{folder.name}.clusters.txt"
    return path if path.is_file() else None


def read_gold(path: Path) -> list[list[str]]:
    """The gold conversations of ``path`` (:func:`read_clusters`), read before any grouping so
    bad gold is refused before the work.

    Raises:
        FileNotFoundError: there is no such file.
        ParseError: it is malformed, or holds no conversation to score against.
    """
    clusters = read_clusters(path)
    if not clusters:
        raise ParseError(str(path), "no conversations to score against; a gold file has one a line")
    return clusters


def read_messages(folder: Path) -> tuple[list[Message], int, list[str]]:
    """The messages of every log in ``folder`` (and below), the number of logs, and the
    problems of those that could not be read or parsed.

    Raises:
        FileNotFoundError: the folder does not exist.
    """
    collection = CollectionConfig(
        name="eval-grouping",
        kind="messages",
        path=folder,
        tenant="eval",
        acl_groups=("eval",),
        format="irc",
    )
    messages: list[Message] = []
    problems: list[str] = []
    logs = 0
    for doc in read_documents(collection):
        logs += 1
        if doc.error is not None:
            problems.append(doc.error)
            continue
        try:
            blocks = parse_document(collection, doc, "0" * 16)
        except ParseError as exc:
            problems.append(str(exc))
            continue
        messages.extend(message_of(b) for b in blocks)
    return messages, logs, problems


def grouping_settings(settings: Settings, folder: Path) -> Settings:
    """The folder's own home and config: one ``messages`` collection in the ``irc`` layout, a
    ``hash:v1-384`` profile, a namespace with no eval gate (the gold clusters are the eval)."""
    folder = Path(folder).resolve()
    name = re.sub(r"[^a-z0-9_-]+", "-", folder.name.lower()).strip("-") or "logs"
    namespace = f"eval-grouping-{name}"
    home = settings.home / "evals" / f"grouping-{name}"
    config = {
        "collections": {
            name: {
                "kind": "messages",
                "format": "irc",
                "path": str(folder),
                "tenant": namespace,
                "acl_groups": [EVAL_GROUP],
                "tier": "public",
                "namespace": namespace,
            }
        },
        "profiles": {
            "hash": {"embedder": EMBEDDER, "input_format": "default-v1", "namespace": namespace}
        },
        "namespaces": {namespace: {"eval_gate": "off"}},
    }
    return home_of_its_own(home, config)


def synced_grouping(
    settings: Settings,
    folder: Path,
    *,
    runner: PipelineRunner | None = None,
    progress: Progress | None = None,
) -> tuple[list[Message], list[list[str]], int, list[str]]:
    """Sync ``folder`` in its own home (:func:`grouping_settings`) and read back its messages,
    its conversations (as the ``linked_groups`` step wrote them, members in order; every
    other message alone), the number of logs and the problems of those quarantined.

    A log that could be read once and no longer can keeps its last good version serving in
    that home, as in any (a broken source never takes its document away), but it is a
    problem here and the grouping is of what the logs say now: its messages are left out.

    Raises:
        ConfigError: the pipeline failed.
    """
    es = grouping_settings(settings, folder)
    report = (runner or load_runner()).sync(es, progress=progress)
    if not report.ok:
        raise ConfigError(f"{folder}: the pipeline failed: {report.failed_runs}")
    home = Home(es)
    (collection,) = home.config.collections
    part = (collection,)
    quarantined = home.read("quarantine", part, QUARANTINE_SCHEMA)
    problems = [str(e) for e in quarantined["error"].to_pylist()]  # each names its file
    unread = pc.unique(quarantined["doc_id"])
    blocks = home.read("parsed_blocks", part, BLOCK_SCHEMA)
    blocks = blocks.filter(pc.invert(pc.is_in(blocks["doc_id"], value_set=unread)))
    messages = sorted(
        (u.message for u in read_units(blocks)), key=lambda m: (m.timestamp, m.unit_id)
    )
    units = {m.unit_id for m in messages}
    groups = home.read("linked_groups", part, GROUP_SCHEMA)
    conversation_ids = set(
        groups.filter(pc.equal(groups["group_type"], "conversation"))["group_id"].to_pylist()
    )
    members = home.read("group_members", part, MEMBER_SCHEMA).to_pylist()
    grouped: dict[str, list[tuple[int, str]]] = {}
    for m in members:
        if m["group_id"] in conversation_ids and m["unit_id"] in units:
            grouped.setdefault(m["group_id"], []).append((m["order"], m["unit_id"]))
    conversations = [[u for _, u in sorted(v)] for _, v in sorted(grouped.items())]
    seen = {u for c in conversations for u in c}
    conversations.extend([m.unit_id] for m in messages if m.unit_id not in seen)
    # every log once: read, unreadable, or empty (no block, no problem: the manifest lists it)
    manifest = home.read("source_manifest", part, columns=["doc_id", "change"])
    live = manifest.filter(pc.not_equal(manifest["change"], "removed"))["doc_id"]
    logs = len({*pc.unique(blocks["doc_id"]).to_pylist(), *unread.to_pylist(), *live.to_pylist()})
    return messages, conversations, logs, problems


def evaluate_grouping(
    folder: Path,
    *,
    settings: Settings | None = None,
    runner: PipelineRunner | None = None,
    gold: Path | None = None,
    weights: Path | None = None,
    score_it: bool = True,
    progress: Progress | None = None,
) -> GroupingReport:
    """Group every log of ``folder``; score the grouping against ``gold`` (default: the
    corpus's gold file beside the folder) unless ``score_it`` is off or there is none. The
    conversations are scored and returned under the ids the gold files use
    (:func:`~corpus_index.linked.clusters.gold_named`: a train log ``<date>.train-<x>``'s
    messages are ``<date>:<index>``). Only the gold conversations of logs grouped here are
    scored (:func:`gold_of_logs`); the report names the gold logs left out. When no log could
    be read (:attr:`GroupingReport.nothing_read`) nothing is scored.

    With ``settings`` (the user's home) the folder goes through the pipeline in a home of its
    own (:func:`synced_grouping`, run by ``runner``); without, or with ``weights`` other than
    the shipped ones, the logs are parsed and grouped in this process.

    Raises:
        FileNotFoundError: the folder, or a gold or weights file named, does not exist.
        ParseError: the gold file is malformed or holds no conversation.
        ConfigError: the pipeline failed, or the gold holds no conversation of a log grouped.
    """
    gold_path = (gold or default_gold(folder)) if score_it else None
    clusters = read_gold(gold_path) if gold_path is not None else None  # bad gold: first
    if settings is None or weights is not None:
        messages, logs, problems = read_messages(folder)
        conversations = group_conversations(messages, model=LinkModel.load(weights))
    else:
        messages, conversations, logs, problems = synced_grouping(
            settings, folder, runner=runner, progress=progress
        )
    named = gold_named(conversations, gold=clusters or ())
    ours = rule = None
    skipped: list[str] = []
    if clusters is not None and gold_path is not None and not _none_read(logs, problems):
        clusters, skipped = gold_of_logs(clusters, named)
        if not clusters:
            raise ConfigError(
                f"{gold_path}: no conversation of a log grouped in {folder} (it names "
                f"{len(skipped)} other logs, {', '.join(skipped[:3])}...); give the gold "
                "clusters of this folder's logs"
            )
        ours = score(clusters, named)
        rule = score(clusters, gold_named(five_minute_rule(messages), gold=clusters))
    return GroupingReport(logs, len(messages), named, problems, gold_path, skipped, ours, rule)


def _none_read(logs: int, problems: list[str]) -> bool:
    return bool(problems) and len(problems) == logs


def gold_of_logs(
    gold: list[list[str]], conversations: list[list[str]]
) -> tuple[list[list[str]], list[str]]:
    """The gold conversations of the logs ``conversations`` hold, and the logs of the rest
    (sorted): scored, a gold log that is not in the folder (or could not be read) would count
    every message of it as one of ours left alone."""
    grouped = {split_id(c[0])[0] for c in conversations if c}
    kept = [c for c in gold if split_id(c[0])[0] in grouped]
    return kept, sorted({split_id(c[0])[0] for c in gold} - grouped)
