"""Conversations as the irc-disentanglement gold files write them: one a line,
``<stem>:<index> <index> ...`` (every message of a conversation lies in one log)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from corpus_index.errors import ParseError

# the first line index of a log its gold clusters cover (lines before it are context)
ANNOTATED_FROM = 1000


def split_id(unit_id: str) -> tuple[str, int]:
    """``(stem, index)`` of a unit id ``<stem>:<index>``.

    Raises:
        ValueError: the id has no ``:<index>`` ending.
    """
    stem, sep, index = unit_id.rpartition(":")
    if not sep or not stem or not index.isdigit():
        raise ValueError(f"unit id {unit_id!r} is not <file stem>:<line index>")
    return stem, int(index)


def gold_named(
    clusters: Iterable[Iterable[str]], *, gold: Iterable[Iterable[str]] = ()
) -> list[list[str]]:
    """The conversations with their unit ids as the corpus's gold files name them.

    The train split's logs are ``<date>.train-<x>.ascii.txt`` and gold.train.clusters.txt
    names their messages ``<date>:<index>`` (the dev split's logs and clusters both name the
    whole stem), so a log's stem is cut at its first dot, unless the ``gold`` clusters name
    the whole stem, or the cut would give two logs of ``clusters`` one name (each then keeps
    its own: ids of two logs never merge). Ids inside the pipeline stay the whole stem's,
    unique per file name.

    Raises:
        ValueError: a unit id is not ``<stem>:<index>``.
    """
    named = [[split_id(u) for u in c] for c in clusters]
    known = {split_id(u)[0] for c in gold for u in c}
    stems = {stem for c in named for stem, _ in c}
    cut = {stem: stem if stem in known else stem.split(".", 1)[0] for stem in stems}
    shared = Counter(cut.values())
    name = {stem: to if shared[to] == 1 else stem for stem, to in cut.items()}
    return [[f"{name[stem]}:{index}" for stem, index in c] for c in named]


def parse_clusters(text: str, *, path: str = "<clusters>") -> list[list[str]]:
    """The conversations of a clusters file, each a list of unit ids in file order.

    Raises:
        ParseError: a line is not ``<stem>:<index> <index> ...``, or names a message an earlier
            line holds (a message is in one conversation); the message names the line.
    """
    clusters: list[list[str]] = []
    line_of: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        parts = line.split()
        if not parts:
            continue
        stem, sep, first = parts[0].rpartition(":")
        indices = [first, *parts[1:]]
        if not sep or not stem or not all(i.isdigit() for i in indices):
            raise ParseError(path, "expected '<stem>:<index> <index> ...'", line=n)
        cluster = [f"{stem}:{int(i)}" for i in indices]
        for unit in cluster:
            if (earlier := line_of.setdefault(unit, n)) != n:
                raise ParseError(
                    path,
                    f"{unit} is in the conversation of line {earlier} already; a message is "
                    "in one conversation",
                    line=n,
                )
        clusters.append(cluster)
    return clusters


def read_clusters(path: Path | str) -> list[list[str]]:
    """:func:`parse_clusters` of a file.

    Raises:
        ParseError: the file is not UTF-8 text, or :func:`parse_clusters` refuses it.
    """
    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ParseError(str(path), f"not UTF-8 text (byte {exc.start})", line=line) from None
    return parse_clusters(text, path=str(path))


def format_clusters(clusters: Iterable[Iterable[str]]) -> str:
    """Conversations in the gold format, one a line, ordered by log and first index; indices
    ascend within a line.

    Raises:
        ValueError: a conversation is empty or spans two logs.
    """
    rows: list[tuple[str, list[int]]] = []
    for cluster in clusters:
        members = [split_id(u) for u in cluster]
        stems = {stem for stem, _ in members}
        if len(stems) != 1:
            what = "is empty" if not stems else f"spans logs {', '.join(sorted(stems))}"
            raise ValueError(f"a conversation {what}; each lies in one log")
        rows.append((stems.pop(), sorted(i for _, i in members)))
    rows.sort()
    return "".join(f"{stem}:{' '.join(map(str, idx))}\n" for stem, idx in rows)


def from_index(clusters: Iterable[Iterable[str]], first: int) -> list[list[str]]:
    """The conversations cut to the messages of index ``first`` and later (a conversation
    left empty dropped): the part of each log its gold file covers, lines before ``first``
    being context (the corpus annotates from index 1,000 on).

    Raises:
        ValueError: a unit id is not ``<stem>:<index>``.
    """
    cut = ([u for u in cluster if split_id(u)[1] >= first] for cluster in clusters)
    return [c for c in cut if c]


def write_clusters(path: Path | str, clusters: Iterable[Iterable[str]]) -> None:
    """Write :func:`format_clusters` to ``path``."""
    Path(path).write_text(format_clusters(clusters), encoding="utf-8")
