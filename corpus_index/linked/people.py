"""Who a unit involves, as a grouping sees it: identity ids where a registry resolves the names,
the names as written otherwise.

The linked layer sits below the identity library, so it asks for a registry only through
:class:`NameResolver`, the one method of :class:`~corpus_index.identities.IdentityRegistry` it
calls: an :class:`IdentityRegistry` is passed in by whoever holds one, and nothing here imports
it. Without one, people are matched by their names as written (a full name, or a given name
against a full name's first word).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Protocol

from corpus_index.linked.messages import Message


class Resolved(Protocol):
    """What a resolver says a name is: an identity id (None: nobody, or ambiguous)."""

    @property
    def identity_id(self) -> str | None: ...

    @property
    def reason(self) -> str: ...


class NameResolver(Protocol):
    """A tenant's identity registry, as far as grouping needs one."""

    def resolve(self, raw: str | None = None) -> Resolved: ...


# capitalised words, up to three in a row ("John", "John Pereira", "Grace F"): the names a
# text may hold; a resolver decides which are people
_NAME = re.compile(r"\b[A-Z][a-z]+(?:[ '-][A-Z][a-z]*){0,2}\b")
_PAREN = re.compile(r"\([^)]*\)")
_HANDLE_SPLIT = re.compile(r"[^a-z]+")


def name_key(raw: str) -> str:
    """A written name for comparison: lower case, without brackets, an e-mail's display part
    or its address's local part, words joined by one space (``"Jane O."`` -> ``"jane o"``)."""
    raw = raw.strip()
    if "<" in raw:  # "Name <address>": the name, or the address where there is none
        display, _, address = raw.partition("<")
        raw = display.strip() or address.rstrip(">")
    if "@" in raw and " " not in raw:
        raw = raw.split("@", 1)[0]
    raw = _PAREN.sub(" ", raw)
    return " ".join(w for w in _HANDLE_SPLIT.split(raw.lower()) if w)


def given(raw: str) -> str:
    """The first word of a written name (``"mike.brennan"``, ``"Mike Brennan"`` -> ``"mike"``)."""
    words = name_key(raw).split()
    return words[0] if words else ""


def same_name(a: str, b: str) -> bool:
    """Whether two written names plausibly name one person without a registry: equal, or one
    is the other's given name (``"Mike"`` and ``"Mike Brennan"``), or equal given names where
    one carries only a surname initial (``"Jane O."`` and ``"Jane Okafor"``)."""
    ka, kb = name_key(a), name_key(b)
    if not ka or not kb:
        return False
    if ka == kb:
        return True
    wa, wb = ka.split(), kb.split()
    if wa[0] != wb[0]:
        return False
    if len(wa) == 1 or len(wb) == 1:
        return True
    return wa[1][0] == wb[1][0] and (len(wa[1]) == 1 or len(wb[1]) == 1)


def names_in(text: str) -> Iterator[str]:
    """Capitalised words and runs of them in ``text``: the candidates for people's names."""
    for m in _NAME.finditer(text):
        yield m.group()


class People:
    """Resolves the people of messages once each, through a registry when there is one.

    ``person(raw)`` is an identity id (registry) or the name as written (none, or the registry
    does not know it); ``named(message)`` the people its text names (registry: the names it
    resolves; without: nothing, since any capitalised word might be a name); ``anchors`` what a
    group records of who a message involves.
    """

    def __init__(self, resolver: NameResolver | None = None) -> None:
        self._resolver = resolver
        self._memo: dict[str, str | None] = {}
        self._anchors: dict[str, tuple[Message, tuple[str, ...]]] = {}  # by unit id

    @property
    def has_registry(self) -> bool:
        return self._resolver is not None

    def identity(self, raw: str) -> str | None:
        """The identity id ``raw`` resolves to (not by a fuzzy guess), or None."""
        if self._resolver is None or not raw.strip():
            return None
        if raw not in self._memo:
            match = self._resolver.resolve(raw)
            ok = match.identity_id is not None and not match.reason.startswith("fuzzy")
            self._memo[raw] = match.identity_id if ok else None
        return self._memo[raw]

    def person(self, raw: str) -> str:
        """An identity id where the registry resolves ``raw``, else ``raw`` as written."""
        return self.identity(raw) or raw.strip()

    def named(self, message: Message) -> list[str]:
        """Identity ids of the people ``message``'s title and text name (registry only)."""
        if self._resolver is None:
            return []
        found = (self.identity(n) for n in names_in(f"{message.title}\n{message.text}"))
        return list(dict.fromkeys(i for i in found if i))

    def anchors(self, message: Message) -> list[str]:
        """A group's identity anchors from ``message``: with a registry, the identity ids of
        everyone it involves (unresolved names, such as shared mailboxes, left out); without,
        its author and the people it is sent to, as written (once per message: a unit is
        in several groups, each described and keyed by its members' anchors)."""
        seen = self._anchors.get(message.unit_id)
        if seen is not None and seen[0] is message:
            return list(seen[1])
        found = self._anchors_of(message)
        self._anchors[message.unit_id] = (message, tuple(found))
        return found

    def _anchors_of(self, message: Message) -> list[str]:
        if self._resolver is None:
            return list(
                dict.fromkeys(r.strip() for r in (message.author, *message.mentions) if r.strip())
            )
        raws = [message.author, *message.mentions]
        ids = [self.identity(r) for r in raws]
        return list(dict.fromkeys([*(i for i in ids if i), *self.named(message)]))

    def same(self, a: str, b: str) -> bool:
        """Whether two written names are one person: by identity where both resolve, by
        :func:`same_name` otherwise."""
        ia, ib = self.identity(a), self.identity(b)
        if ia is not None and ib is not None:
            return ia == ib
        return same_name(a, b)
