"""Limits on what one source document may cost to read and parse (configured in corpus.yaml)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on one source document, so no file can exhaust the machine; a document over any of
    them is quarantined with the limit's name and value. The defaults fit a 2-core, 24 GiB host
    (parsing holds a document's bytes and its parsed values, a few times its size)."""

    max_document_bytes: int = 8 * 2**20  # a file's size, checked before it is read
    max_yaml_aliases: int = 1_000  # alias (``*name``) uses in one YAML document
    max_yaml_nodes: int = 200_000  # nodes of one YAML document with every alias expanded
    max_nesting_depth: int = 64  # lists and mappings inside each other (YAML and JSON)
    max_block_chars: int = 256 * 2**10  # one block's content as JSON, the text it is embedded from
    # the people one message record names (``recipients`` and ``cc`` together): each is
    # matched against the tenant's registry, a name by a fuzzy pass over every name on file
    max_record_people: int = 500
    # the lines of one message stream (``*.jsonl``) or irc log: each is a unit or a quarantined
    # line, so a file of millions of short lines within max_document_bytes would cost millions
    max_stream_lines: int = 100_000
    # one message record's id, author, each recipient and cc, channel (or thread), location,
    # reply_to and version: each goes into every block's metadata, and a channel or author into
    # the titles of the groups it joins, so only the file's size bounded them
    max_name_chars: int = 512
    # one message record's subject and title (a group's title when it has no other)
    max_subject_chars: int = 4_096


LIMIT_KEYS = tuple(Limits.__dataclass_fields__)
