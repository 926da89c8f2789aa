"""Conversations linked again only where the messages changed (seed "Linked Context" §5.1 at
scale): a channel's links from the last run are kept up to its first changed message, and
only its messages from there on are decided again.

Every feature of a message reads only the messages up to it (its TF-IDF weights are those of
the messages up to it, :func:`~corpus_index.linked.topic.trailing_tfidf`), but for a channel's
first :data:`~corpus_index.linked.topic.FIRST_WEIGHED` messages, which are weighed together;
and each decision reads the decisions before it. So when the first ``p`` messages of a channel
are the same as last time (same ids, authors, texts, times, replies, mentions, in the same
order), their parents are the same, and a full re-link and this one agree on every message:
re-linking starts at message ``p`` (at the start when ``p`` is among the first messages, whose
weights it changes) and looks back ``window`` messages. A new message in a channel past its
first messages costs itself, not the channel; a channel nothing changed in costs nothing.

The links are kept as :class:`Link` rows (one per message, its position in the channel, a
fingerprint of what the linker reads of it, its parent's position), in the Arrow layout
:data:`LINK_SCHEMA`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import pyarrow as pa

from corpus_index.hashing import value_digest
from corpus_index.linked.conversations import by_channel, components, decode, joined
from corpus_index.linked.features import FEATURES_VERSION, channel_features
from corpus_index.linked.messages import Message
from corpus_index.linked.model import LinkModel
from corpus_index.linked.responses import RESPONSES_VERSION
from corpus_index.linked.topic import FIRST_WEIGHED, Embed


class Link(NamedTuple):
    """One message's place in its channel's conversations, as the last run decided it."""

    channel: str
    position: int  # in the channel's time order
    fingerprint: str  # of what the linker reads of the message (see :func:`fingerprint`)
    parent: int  # the position of the message it continues; its own when it starts one
    source_id: str = ""  # the document it came from, so deleting it removes the row
    tenant_id: str = ""  # channels are a tenant's: two tenants' links never mix
    unit_id: str = ""  # the message (empty in a table an earlier version wrote)
    timestamp: float = 0.0  # its time, seconds since the epoch (0 in such a table)


LINK_SCHEMA = pa.schema(
    [
        ("channel", pa.string()),
        ("position", pa.int64()),
        ("fingerprint", pa.string()),
        ("parent", pa.int64()),
        ("source_id", pa.string()),
        ("tenant_id", pa.string()),
        ("unit_id", pa.string()),
        ("timestamp", pa.float64()),
    ]
)
# the columns a table of links has had from the start (``unit_id`` and ``timestamp`` came later)
LINK_COLUMNS_FIRST = ("channel", "position", "fingerprint", "parent", "source_id", "tenant_id")


def fingerprint(m: Message, *, model: str = "") -> str:
    """A digest (:func:`~corpus_index.hashing.value_digest`) of what linking reads of a message
    (its id, author, text, time, explicit reply, mentions and whether it is a system line) and
    of the ``model`` (a digest of the weights), so an edit to any of them, or other weights,
    is seen. A fingerprint an earlier version stored (sha256 of their JSON) matches none of
    these: links it left are decided again once."""
    data = (model, m.unit_id, m.author, m.text, m.timestamp, m.reply_to, tuple(m.mentions))
    return value_digest((*data, m.system))


def model_digest(model: LinkModel) -> str:
    """First 16 hex of the sha256 of the weights, as their file writes them, of the version
    of the features they weigh (:data:`~corpus_index.linked.features.FEATURES_VERSION`) and
    of the rule pass that reads replies after the model
    (:data:`~corpus_index.linked.responses.RESPONSES_VERSION`): links an earlier version
    made are decided again."""
    versions = [FEATURES_VERSION, RESPONSES_VERSION]
    raw = json.dumps([model.to_json(), *versions], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:16]


def links_table(links: Iterable[Link]) -> pa.Table:
    """The links as a table of :data:`LINK_SCHEMA` (built column by column)."""
    columns = list(zip(*links, strict=True)) or [() for _ in LINK_SCHEMA.names]
    return pa.Table.from_arrays(
        [pa.array(c, f.type) for c, f in zip(columns, LINK_SCHEMA, strict=True)],
        schema=LINK_SCHEMA,
    )


def read_links(table: pa.Table | None) -> list[Link]:
    """The links of a table of :data:`LINK_SCHEMA` (none for ``None``), read column by
    column; a table an earlier version wrote, without ``unit_id`` and ``timestamp``, reads
    with those empty (relinking reads neither)."""
    if table is None:
        return []
    names = [n for n in LINK_SCHEMA.names if n in table.column_names]
    columns = table.select(names).to_pydict()
    rows = zip(*(columns[n] for n in names), strict=True)
    return (
        list(map(Link._make, rows)) if len(names) == len(Link._fields) else [Link(*r) for r in rows]
    )


def linked_conversations(links: Iterable[Link]) -> list[list[Link]]:
    """The conversations ``links`` make (a run's, as :func:`read_links` gives them), read from
    the links alone, no message decoded: each channel's messages joined to their parents'
    (as :meth:`Relinker.group` joins them), each conversation's links in channel order, the
    channels in order of name; a message that continues nothing and is continued by nothing
    is a conversation of one. A link whose parent's row is gone (its source deleted since the
    run) starts a conversation of its own, until the next run links its channel again.

    Raises:
        ValueError: a link has no ``unit_id`` (a table an earlier version wrote: the next run
            writes them).
    """
    channels: dict[tuple[str, str], list[Link]] = {}
    for link in links:
        if not link.unit_id:
            raise ValueError(
                f"a link of {link.channel!r} has no unit id (written by an earlier version)"
            )
        channels.setdefault((link.tenant_id, link.channel), []).append(link)
    out: list[list[Link]] = []
    for key in sorted(channels):
        channel = sorted(channels[key], key=lambda x: x.position)
        at = {x.position: i for i, x in enumerate(channel)}
        # a parent removed since: the link starts its own
        parents = [at.get(x.parent, i) for i, x in enumerate(channel)]
        out.extend([channel[i] for i in c] for c in joined(parents))
    return out


@dataclass(slots=True)
class Relinker:
    """Groups messages into conversations per channel like
    :func:`~corpus_index.linked.conversations.group_conversations`, starting from the links
    of an earlier run (``previous``); after :meth:`group`, :attr:`links` holds this run's
    links, to give the next run, and the counts say how much was decided again.

    Args:
        previous: the links an earlier run of the same model left (none: link everything).
        model: the link weights (default: the ones shipped).
        embed: an embedding function for topic similarity instead of TF-IDF cosine.
        sources: the document each unit id came from, recorded on its link.
        tenant_id: whose channels these are: only ``previous`` links of this tenant are read,
            and this run's links carry it.
        prints: the :func:`fingerprint` of messages known to be as they were when it was made
            (unit id -> the model digest it was made with, and it; see
            :mod:`corpus_index.unit_prints`), taken instead of hashing them where the digest
            is this model's.
    """

    previous: Sequence[Link] = ()
    model: LinkModel | None = None
    embed: Embed | None = None
    sources: dict[str, str] = field(default_factory=dict)
    tenant_id: str = ""
    prints: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)
    model_key: str = ""  # the digest of the model :meth:`group` linked with (its prints read it)
    reused: int = 0  # messages whose parent was taken from the previous links
    relinked: int = 0  # messages decided again
    channels_relinked: int = 0

    def group(self, messages: Sequence[Message]) -> list[list[str]]:
        """The conversations of ``messages`` (any channels): lists of unit ids in time order,
        the same as a full re-link gives."""
        model = self.model or LinkModel.load()
        digest = self.model_key = model_digest(model)
        before: dict[str, list[Link]] = {}
        mine = (x for x in self.previous if x.tenant_id == self.tenant_id)
        for link in sorted(mine, key=lambda x: (x.channel, x.position)):
            before.setdefault(link.channel, []).append(link)
        self.links, self.reused, self.relinked, self.channels_relinked = [], 0, 0, 0
        out: list[list[str]] = []
        for name, channel in by_channel(messages).items():
            prints = [self._print(m, digest) for m in channel]
            kept = _kept_parents(before.get(name, []), prints)
            if len(kept) < len(channel):
                start = len(kept)
                features = channel_features(
                    channel, window=model.window, embed=self.embed, start=start
                )
                parents = decode(channel, features, model, before=kept)
                self.channels_relinked += 1
            else:
                parents = kept
            self.reused += len(kept)
            self.relinked += len(channel) - len(kept)
            self.links.extend(
                Link(
                    name,
                    i,
                    p,
                    parents[i],
                    self.sources.get(m.unit_id, ""),
                    self.tenant_id,
                    m.unit_id,
                    m.timestamp,
                )
                for i, (m, p) in enumerate(zip(channel, prints, strict=True))
            )
            out.extend(components(channel, parents))
        return out

    def _print(self, m: Message, digest: str) -> str:
        known = self.prints.get(m.unit_id)
        return (
            known[1] if known is not None and known[0] == digest else fingerprint(m, model=digest)
        )


def _kept_parents(previous: list[Link], prints: list[str]) -> list[int]:
    """The parents that still hold: those of the messages before the first that differs from
    last time (all of them when none does), or none when it is among the channel's first
    :data:`~corpus_index.linked.topic.FIRST_WEIGHED`."""
    same = 0
    for link, p in zip(previous, prints, strict=False):
        if link.position != same or link.fingerprint != p:
            break
        same += 1
    if same == len(prints) == len(previous):
        return [link.parent for link in previous]
    return [link.parent for link in previous[:same]] if same >= FIRST_WEIGHED else []
