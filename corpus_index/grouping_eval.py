"""Conversation grouping of an irc-disentanglement folder, read through the ``messages``
kind's ``irc`` layout, and its scores against gold clusters when there are any.

For now the folder is read and parsed by the kind directly, without a home; once the
pipeline's ``linked_groups`` step exists, this reads the groups it wrote instead. Grouping
reads only the logs (``*.ascii.txt``): never annotation or gold files, which only score.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from corpus_index.collection import CollectionConfig
from corpus_index.errors import ParseError
from corpus_index.kinds import parse_document, read_documents
from corpus_index.kinds.messages import message_of
from corpus_index.linked.clusters import read_clusters
from corpus_index.linked.conversations import five_minute_rule, group_conversations
from corpus_index.linked.messages import Message
from corpus_index.linked.model import LinkModel
from corpus_index.linked.scoring import GroupingScores, score


@dataclass(frozen=True, slots=True)
class GroupingReport:
    """What grouping a folder gave: the conversations, what could not be read, and the
    scores of ours and of the channel-wide five-minute rule (None without gold)."""

    logs: int
    messages: int
    conversations: list[list[str]]
    problems: list[str]  # a log that could not be read or parsed: its file, line and reason
    gold: Path | None
    scores: GroupingScores | None
    five_minute_scores: GroupingScores | None


def default_gold(folder: Path) -> Path | None:
    """The gold clusters the corpus keeps beside a split's folder (``gold.<split>.clusters.txt``
    next to ``<split>/``), if there."""
    path = folder.parent / f"gold.{folder.name}.clusters.txt"
    return path if path.is_file() else None


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


def evaluate_grouping(
    folder: Path, *, gold: Path | None = None, weights: Path | None = None, score_it: bool = True
) -> GroupingReport:
    """Group every log of ``folder``; score the grouping against ``gold`` (default: the
    corpus's gold file beside the folder) unless ``score_it`` is off or there is none.

    Raises:
        FileNotFoundError: the folder, or a gold or weights file named, does not exist.
        ParseError: the gold file is malformed.
    """
    messages, logs, problems = read_messages(folder)
    conversations = group_conversations(messages, model=LinkModel.load(weights))
    gold_path = (gold or default_gold(folder)) if score_it else None
    ours = rule = None
    if gold_path is not None:
        clusters = read_clusters(gold_path)
        ours = score(clusters, conversations)
        rule = score(clusters, five_minute_rule(messages))
    return GroupingReport(logs, len(messages), conversations, problems, gold_path, ours, rule)
