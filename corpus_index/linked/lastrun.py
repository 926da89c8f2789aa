"""What the last run of the groupings left of each unit, for this run to take where nothing
it was made from has changed (the ``linked_groups`` step keeps it in ``unit_prints``, see
:mod:`corpus_index.unit_prints`), and what this run leaves for the next.

Per unit: the TF-IDF block it was weighed in and what each block was weighed by
(:meth:`~corpus_index.linked.similarity.Similarity.weighing`), so a run tells which units are
weighed by other frequencies than last time (:meth:`LastRun.weigh`), and each block's digest
and size, so a block whose units are all as they were, and all there, is not hashed again;
the key of its question's scored answers (:mod:`corpus_index.linked.questions`); its digest
in a settled group's key (:mod:`corpus_index.linked.settled`), which holds while the unit is
as it was and weighed as it was; and what its text says to the decision threads
(:mod:`corpus_index.linked.decisions`: the sentence it decides by, whether it proposes),
which holds while its text does. Only units whose rows are as they were are given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from corpus_index.linked.messages import Message
from corpus_index.linked.similarity import Similarity

NOT_ASKED = ""  # :attr:`LastRun.keys` of a unit that asks nothing
UNKEYED = "?"  # ... of a question scored without a memo (no key to keep)


@dataclass(slots=True)
class LastRun:
    """What the last run left of each unit, and, filled as this run goes, the same of this one.

    Args:
        keys: the key of each question's scored answers (:data:`UNKEYED`: none) and
            :data:`NOT_ASKED` for every other unit; empty when a unit was edited or taken
            out since and the message it was read as last time is not kept (where it stood
            is unknown).
        gone: the messages the last run read the units edited or taken out since as (where
            they stood then): a question with one in its reach is read again, as with a new
            unit.
        blocks: the TF-IDF block (by number) each unit was weighed in.
        weighing: what the units of each of those blocks were weighed by.
        digests: each of those blocks' digest and how many units it held
            (:meth:`~corpus_index.linked.similarity.Similarity.digested`): a block of this
            run that is one of them (its units all in it, as they were, and as many) is not
            hashed again.
        window_s: the answer window the keys were made with (another window keeps none).
        parts: each unit's digest in a settled group's key.
        decides: the sentence each unit decides by ("": none).
        proposes: whether each unit puts a proposal to decide (where it was read).
    """

    keys: Mapping[str, str] = field(default_factory=dict)
    blocks: Mapping[str, int] = field(default_factory=dict)
    weighing: Sequence[str] = ()
    digests: Sequence[tuple[str, int]] = ()
    window_s: float | None = None
    parts: Mapping[str, bytes] = field(default_factory=dict)
    decides: Mapping[str, str] = field(default_factory=dict)
    proposes: Mapping[str, bool] = field(default_factory=dict)
    gone: Sequence[Message] = ()
    # this run's, of every unit read: a question's key (or UNKEYED), else NOT_ASKED
    made_keys: dict[str, str] = field(default_factory=dict)
    made_blocks: dict[str, int] = field(default_factory=dict)
    made_weighing: list[str] = field(default_factory=list)
    made_digests: list[tuple[str, int]] = field(default_factory=list)
    made_parts: Mapping[str, bytes] = field(default_factory=dict)
    made_decides: dict[str, str] = field(default_factory=dict)
    made_proposes: dict[str, bool] = field(default_factory=dict)
    kept: int = 0  # questions whose scored answers were kept unread
    moved: set[str] | None = None  # after :meth:`weigh`

    def weigh(self, similarity: Similarity) -> set[str]:
        """Note this run's blocks and what each is weighed by (once a run); the units weighed
        by other frequencies than last time, or not weighed then."""
        if self.moved is not None:
            return self.moved
        moved: set[str] = set()
        before, blocks = self.weighing, self.blocks
        similarity.know(self._still_digested(similarity))
        for number, (weighed_by, ids) in enumerate(similarity.weighing()):
            self.made_weighing.append(weighed_by)
            for unit in ids:
                self.made_blocks[unit] = number
                then = blocks.get(unit)
                if then is None or then >= len(before) or before[then] != weighed_by:
                    moved.add(unit)
        self.made_digests = similarity.digested()
        self.moved = moved
        return moved

    def _still_digested(self, similarity: Similarity) -> dict[int, str]:
        """The digests of ``similarity``'s blocks that are blocks of the last run as they
        were: every unit of the block was in one block then (so was as it was: only such
        units are in :attr:`blocks`), and that block held as many units."""
        last, blocks = self.digests, self.blocks
        out: dict[int, str] = {}
        for number, ids in enumerate(similarity.blocks()):
            then = blocks.get(ids[0]) if ids else None
            if then is None or then >= len(last) or last[then][1] != len(ids):
                continue
            if all(blocks.get(u) == then for u in ids):
                out[number] = last[then][0]
        return out

    def settled_parts(self) -> dict[str, bytes]:
        """The units' digests in a settled group's key that still hold: of the units weighed
        as they were (after :meth:`weigh`)."""
        assert self.moved is not None, "LastRun.weigh first"
        moved = self.moved
        return {u: d for u, d in self.parts.items() if u not in moved}
