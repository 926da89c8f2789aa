"""Linked context: grouping message units into conversations, and scoring a grouping.

A pure library (no pipeline, no Dagster): the ``messages`` kind's units become
:class:`Message` records, :func:`group_conversations` disentangles each channel, and
:func:`score` compares a grouping with gold conversations as the irc-disentanglement corpus
defines it.
"""

from __future__ import annotations

from corpus_index.linked.clusters import (
    format_clusters,
    parse_clusters,
    read_clusters,
    write_clusters,
)
from corpus_index.linked.conversations import five_minute_rule, group_conversations, link_parents
from corpus_index.linked.messages import Message
from corpus_index.linked.model import LinkModel
from corpus_index.linked.scoring import GroupingScores, score

__all__ = [
    "GroupingScores",
    "LinkModel",
    "Message",
    "five_minute_rule",
    "format_clusters",
    "group_conversations",
    "link_parents",
    "parse_clusters",
    "read_clusters",
    "score",
    "write_clusters",
]
