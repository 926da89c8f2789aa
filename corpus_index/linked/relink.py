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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, NamedTuple

import pyarrow as pa

from corpus_index.hashing import value_digest
from corpus_index.linked.conversations import (
    DECODE_VERSION,
    OutOfWindow,
    by_channel,
    components,
    decode,
    joined,
)
from corpus_index.linked.features import (
    FEATURES_VERSION,
    PACE_GAPS,
    Earlier,
    author_key,
    channel_features,
)
from corpus_index.linked.messages import Message, thread_subject
from corpus_index.linked.model import LinkModel
from corpus_index.linked.responses import RESPONSES_VERSION
from corpus_index.linked.state import ConversationState
from corpus_index.linked.topic import FIRST_WEIGHED, TOPIC_BLOCK, Embed


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
# the schema metadata of a table of links that holds each channel's ChannelTail, as JSON:
# {tenant: {channel: ChannelTail.to_json()}}; a deletion drops it with the rows it removes
TAILS_KEY = b"channel_tails"


@dataclass(slots=True)
class ChannelTail:
    """What deciding a channel's next messages reads of the messages a run linked, beyond the
    channel's recent window itself (see the module's description).

    Args:
        size: the messages linked.
        authors: each author (:func:`~corpus_index.linked.features.author_key`) by their
            first and last message's positions and the last one's time, in the order they
            first wrote.
        tail: the conversation (the position of its first message) of each of the last
            ``window`` messages.
        conversations: each of those conversations by its last message's position, its size
            and its authors.
        subjects: each e-mail subject by the position of the latest message under it.
    """

    size: int = 0
    authors: dict[str, tuple[int, int, float]] = field(default_factory=dict)
    tail: list[int] = field(default_factory=list)
    conversations: dict[int, tuple[int, int, list[str]]] = field(default_factory=dict)
    subjects: dict[str, int] = field(default_factory=dict)

    def before(self, lo: int) -> Earlier:
        """What the features of a slice of the channel from message ``lo`` on read of the
        messages before it: who had written, and when each last did."""
        return Earlier(
            authors=[k for k, (first, _, _) in self.authors.items() if first < lo],
            last={k: t for k, (_, last, t) in self.authors.items() if last < lo},
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "authors": [[k, *v] for k, v in self.authors.items()],
            "tail": self.tail,
            "conversations": [[c, *v] for c, v in self.conversations.items()],
            "subjects": self.subjects,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChannelTail:
        return cls(
            size=int(data["size"]),
            authors={str(k): (int(f), int(la), float(t)) for k, f, la, t in data["authors"]},
            tail=[int(c) for c in data["tail"]],
            conversations={
                int(c): (int(la), int(n), [str(a) for a in who])
                for c, la, n, who in data["conversations"]
            },
            subjects={str(k): int(v) for k, v in data["subjects"].items()},
        )


def tail_after(
    prior: ChannelTail, channel: Sequence[Message], parents: Sequence[int], window: int
) -> ChannelTail:
    """The :class:`ChannelTail` of ``channel`` (in order, linked to ``parents``) from that of
    its first ``prior.size`` messages, reading only the messages after them (all of them
    from an empty ``prior``).

    Raises:
        ValueError: a message after them continues one before the prior tail.
    """
    start = prior.size
    base = start - len(prior.tail)  # the position of the prior tail's first message
    authors = dict(prior.authors)
    subjects = dict(prior.subjects)
    roots = list(prior.tail)  # each message's conversation from ``base`` on
    grown: dict[int, tuple[int, int, set[str]]] = {
        c: (last, n, set(who)) for c, (last, n, who) in prior.conversations.items()
    }
    for i in range(start, len(channel)):
        m, parent = channel[i], parents[i]
        if parent < base:
            raise ValueError(f"message {i} continues {parent}, before the tail kept ({base})")
        root = i if parent >= i else roots[parent - base]
        roots.append(root)
        _, n, who = grown.get(root, (i, 0, set()))
        if not m.system and m.author:
            key = author_key(m.author)
            authors[key] = (authors[key][0] if key in authors else i, i, m.timestamp)
            who.add(key)
        grown[root] = (i, n + 1, who)
        if m.title:
            subject, _ = thread_subject(m.title)
            if subject:
                subjects[subject] = i
    tail = roots[max(len(channel) - window, 0) - base :]
    return ChannelTail(
        size=len(channel),
        authors=authors,
        tail=tail,
        conversations={c: (grown[c][0], grown[c][1], sorted(grown[c][2])) for c in set(tail)},
        subjects=subjects,
    )


def read_tails(table: pa.Table | None) -> dict[str, dict[str, ChannelTail]]:
    """The channel tails a table of links keeps (:data:`TAILS_KEY`), by tenant and channel;
    none from a table without them (an earlier version's, or one a deletion rewrote) or
    whose tails cannot be read."""
    raw = (table.schema.metadata or {}).get(TAILS_KEY) if table is not None else None
    if raw is None:
        return {}
    try:
        return {
            str(tenant): {str(name): ChannelTail.from_json(t) for name, t in channels.items()}
            for tenant, channels in json.loads(raw).items()
        }
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}  # damaged: they only spare work, so the channels are decided whole


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
    (:data:`~corpus_index.linked.responses.RESPONSES_VERSION`) and of the decoding
    (:data:`~corpus_index.linked.conversations.DECODE_VERSION`): links an earlier version
    made are decided again."""
    versions = [FEATURES_VERSION, RESPONSES_VERSION, DECODE_VERSION]
    raw = json.dumps([model.to_json(), *versions], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:16]


def links_table(
    links: Iterable[Link], tails: Mapping[str, Mapping[str, ChannelTail]] | None = None
) -> pa.Table:
    """The links as a table of :data:`LINK_SCHEMA` (built column by column), with the
    channels' ``tails`` (by tenant and channel) in its metadata."""
    columns = list(zip(*links, strict=True)) or [() for _ in LINK_SCHEMA.names]
    table = pa.Table.from_arrays(
        [pa.array(c, f.type) for c, f in zip(columns, LINK_SCHEMA, strict=True)],
        schema=LINK_SCHEMA,
    )
    if not tails:
        return table
    data = {t: {c: x.to_json() for c, x in chans.items()} for t, chans in tails.items() if chans}
    raw = json.dumps(data, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return table.replace_schema_metadata({TAILS_KEY: raw})


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
        history: the tenant's channels' tails the run of ``previous`` kept (by channel, see
            :func:`read_tails`); a channel that only grew since is decided from its window.
    """

    previous: Sequence[Link] = ()
    model: LinkModel | None = None
    embed: Embed | None = None
    sources: dict[str, str] = field(default_factory=dict)
    tenant_id: str = ""
    prints: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    history: Mapping[str, ChannelTail] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)
    tails: dict[str, ChannelTail] = field(default_factory=dict)  # this run's, to keep
    model_key: str = ""  # the digest of the model :meth:`group` linked with (its prints read it)
    reused: int = 0  # messages whose parent was taken from the previous links
    relinked: int = 0  # messages decided again
    channels_relinked: int = 0
    from_window: int = 0  # of those, channels decided from their recent window

    def group(self, messages: Sequence[Message]) -> list[list[str]]:
        """The conversations of ``messages`` (any channels): lists of unit ids in time order,
        the same as a full re-link gives."""
        model = self.model or LinkModel.load()
        digest = self.model_key = model_digest(model)
        before: dict[str, list[Link]] = {}
        for link in self.previous:
            if link.tenant_id == self.tenant_id:
                before.setdefault(link.channel, []).append(link)
        for links in before.values():  # in order as written: a pass each
            links.sort(key=attrgetter("position"))
        self.links, self.reused, self.relinked, self.channels_relinked = [], 0, 0, 0
        self.tails, self.from_window = {}, 0
        out: list[list[str]] = []
        for name, channel in by_channel(messages).items():
            prints = [self._print(m, digest) for m in channel]
            earlier = before.get(name, [])
            kept = _kept_parents(earlier, prints)
            prior = self.history.get(name)
            if len(kept) < len(channel):
                start = len(kept)
                grew = prior is not None and start == len(earlier)  # only appended to
                found = self._from_window(channel, kept, prior, model) if grew else None
                if found is not None:
                    parents, self.tails[name] = found
                    self.from_window += 1
                else:
                    features = channel_features(
                        channel, window=model.window, embed=self.embed, start=start
                    )
                    parents = decode(channel, features, model, before=kept)
                    self.tails[name] = tail_after(ChannelTail(), channel, parents, model.window)
                self.channels_relinked += 1
            else:  # as it was: its tail, or made once where none is kept (a deletion's)
                parents = kept
                self.tails[name] = (
                    prior
                    if prior is not None and prior.size == len(channel)
                    else tail_after(ChannelTail(), channel, parents, model.window)
                )
            self.reused += len(kept)
            self.relinked += len(channel) - len(kept)
            self.links.extend(self._links(name, channel, prints, parents, earlier, len(kept)))
            out.extend(components(channel, parents))
        return out

    def _links(
        self,
        name: str,
        channel: Sequence[Message],
        prints: Sequence[str],
        parents: Sequence[int],
        earlier: Sequence[Link],
        kept: int,
    ) -> Iterator[Link]:
        """This run's links of a channel: for its first ``kept`` messages, whose links hold
        as ``earlier`` left them (the same message at the same place, the same parent), the
        earlier link itself where it names the same document and message (not one an
        earlier version wrote without them); a new link elsewhere."""
        sources, tenant = self.sources, self.tenant_id
        for i, m in enumerate(channel):
            source = sources.get(m.unit_id, "")
            if i < kept:
                x = earlier[i]
                if x.source_id == source and x.unit_id == m.unit_id:
                    yield x
                    continue
            yield Link(name, i, prints[i], parents[i], source, tenant, m.unit_id, m.timestamp)

    def _from_window(
        self,
        channel: Sequence[Message],
        kept: list[int],
        prior: ChannelTail | None,
        model: LinkModel,
    ) -> tuple[list[int], ChannelTail] | None:
        """The parents of ``channel``, whose first ``len(kept)`` messages are as ``prior``
        left them, linked to ``kept``, decided from the channel's recent window, and the
        channel's tail after them; None where the window does not hold what a new message
        reads (the channel is then decided from the whole of it)."""
        window, start = model.window, len(kept)
        lo = start - window - TOPIC_BLOCK + 1  # the first message whose words weigh the new
        if prior is None or lo < 0 or not _whole(prior, start, window):
            return None
        part = channel[lo:]
        if sum(not m.system for m in part[: start - lo]) < PACE_GAPS + 2:
            return None  # too few messages in the slice to give the channel's pace
        here = {m.unit_id for m in part}
        for m in channel[start:]:
            far = m.reply_to and m.reply_to not in here
            if far and any(x.unit_id == m.reply_to for x in channel[:lo]):
                return None  # an explicit reply to a message before the slice
            subject, reply = thread_subject(m.title) if m.title else ("", False)
            if reply and prior.subjects.get(subject, lo) < lo:
                return None  # an e-mail thread whose latest message is before the slice
        features = channel_features(
            part, window=window, embed=self.embed, start=start - lo, earlier=prior.before(lo)
        )
        if any(a not in features.ids for _, _, who in prior.conversations.values() for a in who):
            return None  # a tail that names an author the channel does not have
        first = start - window - lo  # the tail's first message in the slice
        names: dict[int, int] = {}  # each tail conversation's name in the slice
        for k, c in enumerate(prior.tail):
            names.setdefault(c, c - lo if c >= lo else first + k)
        state = ConversationState.seeded(
            features,
            first,
            [names[c] for c in prior.tail],
            (
                (names[c], last - lo, n, [features.ids[a] for a in who])
                for c, (last, n, who) in prior.conversations.items()
            ),
        )
        try:
            local = decode(
                part,
                features,
                model,
                before=[p - lo for p in kept[lo:]],
                state=state,
                floor=first,
            )
        except OutOfWindow:
            return None
        parents = [*kept, *(p + lo for p in local[start - lo :])]
        return parents, tail_after(prior, channel, parents, window)

    def _print(self, m: Message, digest: str) -> str:
        known = self.prints.get(m.unit_id)
        return (
            known[1] if known is not None and known[0] == digest else fingerprint(m, model=digest)
        )


def _whole(tail: ChannelTail, size: int, window: int) -> bool:
    """Whether ``tail`` holds what deciding the messages after the first ``size`` of its
    channel reads, consistently: the conversations of the last ``window`` of them, each
    begun no later than its first message there and last written in the window."""
    base = size - window
    if tail.size != size or len(tail.tail) != window or set(tail.conversations) != set(tail.tail):
        return False
    if any(c > base + k for k, c in enumerate(tail.tail)):
        return False
    return all(base <= last < size for last, _, _ in tail.conversations.values())


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
