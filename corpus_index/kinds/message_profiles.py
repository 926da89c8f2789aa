"""Processing profiles of the ``messages`` kind: how the text of each source is cleaned and cut
(seed "Linked Context" §4), in one table a collection's config may override field by field.

| source | structure | special handling |
|---|---|---|
| ``discord_chat`` | message | thread-aware (``channel`` or ``thread``) |
| ``sms_message`` | message | a thread without a channel is its set of people |
| ``email_thread`` | message | quoted replies and signatures stripped; CC'd people mentioned |
| ``phone_call`` | turns | speaker turns, action items |
| ``incident_report`` | sections | kept whole, with its section headers |
| ``shift_note`` | sections | by participant (``John: ...`` entries, a section each) |
| ``resource_doc`` | sections | one block per section, numbered headings too, with the document's version (its ``version``, else a ``Version 3.2`` line near the top) |
| ``irc_chat`` | message | irc logs (the ``irc`` format) |
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from corpus_index.errors import ConfigError

STRUCTURES = ("message", "turns", "sections")


@dataclass(frozen=True, slots=True)
class ProcessingProfile:
    """How the units of one source are cleaned and structured."""

    name: str
    structure: str = "message"  # message | turns (speaker turns) | sections (headed parts)
    # drop quoted replies (``> ...``; an ``On ... wrote:`` or Outlook ``From:``/``Sent:`` header
    # and below)
    strip_quotes: bool = False
    strip_signature: bool = False  # drop a signature (``--`` or a sign-off and what follows)
    cc_as_mentioned: bool = False  # CC'd people join the unit's mentions
    action_items: bool = False  # pick out action items (``Action: ...``, ``I'll ...``)
    thread_by_participants: bool = False  # no channel: the thread is its set of people
    split_sections: bool = False  # one block per section instead of one per record
    by_participant: bool = False  # ``John: ...`` entries are sections headed by the name
    version_from_text: bool = False  # no ``version``: a ``Version 3.2`` line near the top


PROFILES: dict[str, ProcessingProfile] = {
    p.name: p
    for p in (
        ProcessingProfile("discord_chat"),
        ProcessingProfile("sms_message", thread_by_participants=True),
        ProcessingProfile(
            "email_thread", strip_quotes=True, strip_signature=True, cc_as_mentioned=True
        ),
        ProcessingProfile("phone_call", structure="turns", action_items=True),
        ProcessingProfile("incident_report", structure="sections"),
        ProcessingProfile("shift_note", structure="sections", by_participant=True),
        ProcessingProfile(
            "resource_doc", structure="sections", split_sections=True, version_from_text=True
        ),
        ProcessingProfile("irc_chat"),
    )
}
_FIELDS = {f.name: f for f in dataclasses.fields(ProcessingProfile) if f.name != "name"}


def profiles_with(overrides: Mapping[str, Mapping[str, Any]], *, key: str) -> dict[str, Any]:
    """The profile table with a collection's ``processing`` overrides applied.

    Raises:
        ConfigError: an unknown source or field, or a value of the wrong type; the message
            names ``<key>.<source>.<field>``.
    """
    table: dict[str, ProcessingProfile] = dict(PROFILES)
    for source, fields in overrides.items():
        where = f"{key}.{source}"
        if source not in table:
            raise ConfigError(f"{where}: unknown source (known: {', '.join(PROFILES)})")
        if not isinstance(fields, Mapping):
            raise ConfigError(f"{where}: must be a mapping of profile fields")
        changes: dict[str, Any] = {}
        for name, value in fields.items():
            if name not in _FIELDS:
                raise ConfigError(f"{where}.{name}: unknown field (known: {', '.join(_FIELDS)})")
            if name == "structure":
                if value not in STRUCTURES:
                    raise ConfigError(f"{where}.structure: must be one of {', '.join(STRUCTURES)}")
            elif not isinstance(value, bool):
                raise ConfigError(f"{where}.{name}: must be true or false (got {value!r})")
            changes[name] = value
        table[source] = dataclasses.replace(table[source], **changes)
    return table


# -- cleaning ---------------------------------------------------------------------------------

_QUOTE_HEADER = re.compile(
    r"^\s*(?:On .{1,200} wrote:|-{2,}\s*Original Message\s*-{2,}|-{2,}\s*Forwarded message\s*-{2,})\s*$",
    re.IGNORECASE,
)
_WRAPPED_LINES = 3  # a client wraps a long ``On <date>, <name> <address> wrote:`` this far
_HEADER_FIELD = re.compile(r"^\s*\*?(from|sent|date|to|cc|subject)\s*:\*?(?:\s|$)", re.IGNORECASE)
_HEADER_LINES = 8  # an Outlook ``From:``/``Sent:``/``To:``/``Subject:`` block, wrapped lines too
_RULE = re.compile(r"^\s*(?:_{8,}|-{8,})\s*$")  # the line Outlook sets above that block
_SIGN_OFF = re.compile(
    r"^\s*(?:regards|kind regards|best regards|warm regards|many thanks|thanks|thank you|"
    r"cheers|best|sincerely|yours sincerely|sent from my \w+.*)[,.!]?\s*$",
    re.IGNORECASE,
)
_SIGNATURE_LINES = 6  # a sign-off this close to the end starts the signature


def _starts_quote(lines: list[str], i: int) -> bool:
    """Whether the quoted earlier message starts at ``lines[i]``: an ``On ... wrote:`` line
    (or one wrapped over up to three lines), an ``Original Message`` line, or an Outlook
    header block (``From:`` then ``Sent:`` or ``Date:``, and ``To:`` or ``Subject:``)."""
    if _QUOTE_HEADER.match(lines[i]):
        return True
    head = lines[i : i + _WRAPPED_LINES]
    for n in range(2, len(head) + 1):
        if not head[n - 1].strip():
            break
        joined = " ".join(line.strip() for line in head[:n])
        if _QUOTE_HEADER.match(joined) and any(c.isdigit() for c in joined):  # a date in it
            return True
    first = _HEADER_FIELD.match(lines[i])
    if first is None or first[1].lower() != "from":
        return False
    fields = set()
    for line in lines[i : i + _HEADER_LINES]:
        if not line.strip():
            break
        if field := _HEADER_FIELD.match(line):
            fields.add(field[1].lower())
    return bool(fields & {"sent", "date"}) and bool(fields & {"to", "subject"})


def strip_quotes(text: str) -> str:
    """``text`` without quoted replies: lines starting with ``>``, and everything from an
    ``On ... wrote:`` (one line or wrapped), ``Original Message`` or Outlook
    ``From:``/``Sent:``/``To:``/``Subject:`` header down, with the rule set above it."""
    lines = text.splitlines()
    kept: list[str] = []
    for i, line in enumerate(lines):
        if _starts_quote(lines, i):
            while kept and (not kept[-1].strip() or _RULE.match(kept[-1])):
                kept.pop()
            break
        if not line.lstrip().startswith(">"):
            kept.append(line)
    return "\n".join(kept).strip()


def strip_signature(text: str) -> str:
    """``text`` without a signature: from a ``--`` line, or from a sign-off (``Regards,``) in
    the last few lines, down."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.rstrip() in ("--", "-- ", "__"):
            return "\n".join(lines[:i]).strip()
    for i in range(max(0, len(lines) - _SIGNATURE_LINES), len(lines)):
        if i > 0 and _SIGN_OFF.match(lines[i]):
            return "\n".join(lines[:i]).strip()
    return text.strip()


# -- structure --------------------------------------------------------------------------------

_SPEAKER = re.compile(r"^\s*([A-Z][\w.'\- ]{0,40}?)\s*(?:\[[^\]]*\])?\s*:\s+(\S.*)$")
_ACTION = re.compile(
    r"^\s*(?:[-*]\s*)?(?:action(?: item)?s?|todo|to do|follow[- ]up)\s*[:\-]\s*(\S.*)$", re.I
)
# "Action items:" alone on its line, the items bulleted or numbered below it
_ACTION_HEADING = re.compile(
    r"^\s*(?:action(?: item)?s?|todos?|to do|follow[- ]ups?)\s*:\s*$", re.I
)
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d{1,3}[.)])\s+(\S.*)$")  # "- ", "* ", "1.", "2)"
_PROMISE = re.compile(r"\b(?:I'll|I will|we'll|we will|I'm going to)\b[^.?!]*[.?!]?", re.I)
_HEADER = (
    re.compile(r"^\s*#{1,6}\s+(\S.*?)\s*#*\s*$"),  # markdown
    re.compile(r"^\s*([A-Z][A-Za-z0-9 /&'()\-]{0,50}):\s*$"),  # "Background:" alone
    re.compile(r"^\s*([A-Z][A-Z0-9 /&'()\-]{2,50})\s*$"),  # "WHAT HAPPENED"
)


def _action_lines(lines: list[str]) -> dict[int, str]:
    """The lines of ``lines`` that are action items, by index, each with its item: an
    ``Action: ...`` line, and each bulleted or numbered line (``- ``, ``* ``, ``1.``) under an
    ``Action items:`` line alone, its indented next lines joined to it. The heading and those
    next lines are listed with "" (they belong to the items, not to anyone's turn). The list
    ends at a line that is neither blank, a bullet nor an indented continuation."""
    found: dict[int, str] = {}
    listing = False  # under an "Action items:" heading
    last: int | None = None  # the bullet an indented line continues
    for i, line in enumerate(lines):
        if _ACTION_HEADING.match(line):
            found[i], listing, last = "", True, None
        elif (m := _ACTION.match(line)) is not None:
            found[i], last = m[1].strip(), None
        elif not listing:
            continue
        elif not line.strip():
            last = None  # a blank line between bullets; an indented paragraph after it is not one
        elif (b := _BULLET.match(line)) is not None:
            found[i], last = b[1].strip(), i
        elif last is not None and line[:1].isspace():
            found[last], found[i] = f"{found[last]} {line.strip()}", ""
        else:
            listing, last = False, None
    return found


def speaker_turns(
    text: str, *, default_speaker: str, skip_actions: bool = False
) -> list[dict[str, str]]:
    """Turns of a transcript: ``Name: words`` starts a turn, other lines continue it; text
    before any speaker is ``default_speaker``'s. With ``skip_actions``, the action items
    (``Action: ...`` lines, and an ``Action items:`` line with the bullets under it) are left
    out (they are the unit's action items, see :func:`action_items`)."""
    lines = text.splitlines()
    actions = _action_lines(lines)
    turns: list[dict[str, str]] = []
    for i, line in enumerate(lines):
        action = i in actions
        if not line.strip() or (action and skip_actions):
            continue
        m = _SPEAKER.match(line)
        if m is not None and not action:
            turns.append({"speaker": m[1].strip(), "text": m[2].strip()})
        elif turns:
            turns[-1]["text"] = f"{turns[-1]['text']} {line.strip()}"
        else:
            turns.append({"speaker": default_speaker, "text": line.strip()})
    return turns


def action_items(text: str) -> list[str]:
    """Action items: ``Action: ...``/``TODO: ...`` lines, the bulleted or numbered lines under
    an ``Action items:`` line alone, and promises (``I'll call her``) in the other lines."""
    lines = text.splitlines()
    actions = _action_lines(lines)
    items: list[str] = []
    for i, line in enumerate(lines):
        if i in actions:
            items.extend([actions[i]] if actions[i] else [])
            continue
        items.extend(p.group(0).strip() for p in _PROMISE.finditer(line))
    return items


# "1. Purpose", "2) Scope", "3.1 Steps": a number (one level needs its "." or ")"), then a
# capitalised title of a few words that does not end as a sentence (a list item may)
_NUMBERED = re.compile(r"^\s*(\d{1,2}(?:\.\d{1,2})*)([.)]?)\s+([A-Z][^\n]{0,60}?)\s*$")
_NUMBERED_ANY = re.compile(r"^\s*(\d{1,2}(?:\.\d{1,2})*)[.)]?\s+\S")  # a numbered line at all
_SENTENCE_END = (".", "!", "?", ",", ";", ":")


def _number(line: str) -> tuple[int, ...] | None:
    """A numbered line's number (``3.1`` is ``(3, 1)``), None when the line has none."""
    m = _NUMBERED_ANY.match(line)
    return None if m is None else tuple(int(n) for n in m[1].split("."))


def _numbered_heading(lines: list[str], i: int) -> str | None:
    """``lines[i]`` as a numbered heading (``1. Purpose``, ``2) Scope``, ``3.1 Steps``), or
    None. A line next to the one numbered before or after it at its level is an item of a
    list, not a heading (``1. Call 000`` above ``2. Stay with them``): headings have their
    text between them (a heading may sit right above a list: ``2. Steps`` over ``1. ...``)."""
    m = _NUMBERED.match(lines[i])
    if m is None or not (m[2] or "." in m[1]) or m[3].endswith(_SENTENCE_END):
        return None
    number = tuple(int(n) for n in m[1].split("."))
    for j, step in ((i - 1, -1), (i + 1, 1)):
        other = _number(lines[j]) if 0 <= j < len(lines) else None
        if other is not None and other == (*number[:-1], number[-1] + step):
            return None
    return lines[i].strip()


def sections(text: str, *, by_participant: bool = False) -> list[dict[str, str]]:
    """Headed parts of a report: a markdown heading, a ``Label:`` line, an upper-case line or
    a numbered heading (:func:`_numbered_heading`) starts a part; text before the first
    heading is a part with an empty heading.

    ``by_participant``: each ``John: ...`` entry in a part (:func:`participant_entries`) is
    a part of its own, headed by the name; the part's text before its first entry keeps the
    part's heading."""
    parts: list[dict[str, str]] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        heading = next((m[1] for p in _HEADER if (m := p.match(line)) is not None), None)
        if heading is None:
            heading = _numbered_heading(lines, i)
        if heading is not None:
            parts.append({"heading": heading.strip(), "text": ""})
        elif line.strip():
            if not parts:
                parts.append({"heading": "", "text": ""})
            joined = f"{parts[-1]['text']}\n{line.strip()}" if parts[-1]["text"] else line.strip()
            parts[-1]["text"] = joined
    if not by_participant:
        return parts
    split: list[dict[str, str]] = []
    for part in parts:
        entries = participant_entries(part["text"])
        if not entries:
            split.append(part)
            continue
        lead = entries.pop(0)[1] if not entries[0][0] else ""
        if lead or part["heading"]:
            split.append({"heading": part["heading"], "text": lead})
        split.extend({"heading": name, "text": said} for name, said in entries)
    return split


# sentence adverbs and connectives that may stand before a name ("Then Amelia: ..."), not of it
LEADING_WORDS = frozenset(
    {
        *("then", "and", "also", "later", "later on", "after that", "afterwards", "meanwhile"),
        *("next", "finally", "earlier"),
    }
)
_LEADING_FIRST = frozenset(w.split()[0] for w in LEADING_WORDS)  # "After that:" is no one
_LEADING = "|".join(  # longest first, so "later on" is not taken as "later"
    w.replace(" ", r"[ \t]+") for w in sorted(LEADING_WORDS, key=lambda w: (-len(w), w))
)
# "<Name>: ..." at a line's start or after a sentence's end: one or two words, capitalised,
# after up to two leading words (any case, a comma allowed: "And then, Amelia: ...")
_ENTRY = re.compile(
    r"(?m)(?:^|(?<=[ \t]))[ \t]*"
    rf"(?:(?i:{_LEADING}),?[ \t]+){{0,2}}"
    r"((?:[A-Z](?:[a-z]|'[A-Z])[A-Za-z'\-]*)(?:[ ](?:[A-Za-z](?:[a-z]|'[A-Z])[A-Za-z'\-]*))?)"
    r"[ \t]*:(?=\s)"
)
_PERSON_WORD = re.compile(r"[A-Z](?:[a-z]|'[A-Z])[A-Za-z'\-]*")
# labels written as "Label:" inside an entry (or above a note), not people
NOT_PARTICIPANTS = frozenset(
    {
        *("note", "notes", "update", "updates", "late entry", "late note", "edit", "addendum"),
        *("action", "actions", "action item", "action items", "todo", "to do", "follow up"),
        *("follow-up", "reminder", "correction", "important", "also", "see", "re", "time"),
        *("date", "location", "staff present", "link", "url", "email", "phone", "mobile"),
        *("staff", "other", "general"),
    }
)
_TITLES = frozenset({"dr", "mr", "mrs", "ms", "mx", "st", "prof"})  # "Dr. Lee: ..." no end


def _is_label(name: str) -> bool:
    """Whether ``name`` (the words before an entry's colon) is a label or a leading word
    (``Note:``, ``Late entry:``, ``Finally:``), not someone. A place (``House:``, ``Kitchen
    bench:``) heads an entry as a person does: what is written of it is its own, not the
    previous person's (no heading is read as a person)."""
    words = name.lower().split()
    if name.lower() in NOT_PARTICIPANTS or words[0] in NOT_PARTICIPANTS:
        return True
    # a leading word still first had no name after it (the name would have been taken)
    return words[0] in _LEADING_FIRST


def participant_entries(text: str) -> list[tuple[str, str]]:
    """``text`` as ``(name, what was written of them)`` entries: ``John: ...`` at the start
    of the text, of a line, or after a sentence's end (``... bed at 9. Amelia: ...``) starts
    one. The name is one or two words, capitalised (a second word may be lower case at a
    line's start: ``Day hub:``), without the leading words before it (:data:`LEADING_WORDS`:
    ``Then Amelia:`` is Amelia's), not a label (:data:`NOT_PARTICIPANTS`: ``Note:``,
    ``Late entry:``), whose words stay in the entry before it; a place (``House:``) heads an
    entry of its own; a time (``7:40``), a numbered room (``Room 3:``) or an address
    (``https://``) has no name before its colon. Text before the first entry is an entry
    with an empty name; no entry at all: []."""
    starts: list[tuple[int, int, str]] = []  # where an entry starts, where its text does, name
    for m in _ENTRY.finditer(text):
        name = m[1]
        if _is_label(name):
            continue
        before = text[: m.start()].rstrip(" \t")
        at_line = not before or before.endswith("\n")
        if not at_line:
            if not before.rstrip(")\"'").endswith((".", "!", "?")):
                continue
            last = before.rstrip(".!?)\"'").rsplit(maxsplit=1)[-1:]
            if last and last[0].lower() in _TITLES:
                continue
            if not all(_PERSON_WORD.fullmatch(w) for w in name.split()):
                continue
        starts.append((m.start(), m.end(), name))
    if not starts:
        return []
    entries = [("", text[: starts[0][0]].strip())] if text[: starts[0][0]].strip() else []
    for k, (_, begin, name) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(text)
        entries.append((name, text[begin:end].strip()))
    return entries


_VERSION = re.compile(r"^\s*(?:version|ver\.?|v)\s*:?\s*(\d{1,4}(?:\.\d{1,4}){0,3})\b", re.I)
_VERSION_LINES = 5  # a document names its version in its first lines


def text_version(text: str) -> str:
    """The version a document gives itself on a line of its own near its top (``Version 3.2,
    effective 1 November 2025``, ``v2.1, reviewed ...``, ``Version: 4``), "" where none does."""
    lines = [line for line in text.splitlines() if line.strip()][:_VERSION_LINES]
    return next((m[1] for line in lines if (m := _VERSION.match(line)) is not None), "")
