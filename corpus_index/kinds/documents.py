"""The ``documents`` kind: folders of plain ``.md`` and ``.txt`` notes, policies and manuals,
cut into structure-aware chunks (headings, paragraphs, a size cap), each keeping its heading
path as its section and as the context line of its input text (``heading-context-v1``)."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from corpus_index.errors import ConfigError
from corpus_index.kinds.base import utf8_text
from corpus_index.kinds.text_files import (
    CHUNKING,
    TextFileKind,
    check_chunking,
    split_front_matter,
)
from corpus_index.records import Block, SourceDoc

if TYPE_CHECKING:
    from corpus_index.collection import CollectionConfig

SOURCE_TYPE = "document"


class Documents(TextFileKind):
    """Plain text documents: every chunk an embeddable block of source type ``document``, in the
    collection's tier (a document's front matter may narrow its ``tier`` and ``acl``)."""

    name = "documents"
    source_types = (SOURCE_TYPE,)

    def parse(self, collection: CollectionConfig, doc: SourceDoc, version: str) -> list[Block]:
        """One block per chunk; the title is the front matter's ``title`` or the file name.

        Raises:
            ParseError: bad front matter or not UTF-8, naming the file and line.
        """
        front, body, first = split_front_matter(doc.path, utf8_text(doc), collection)
        title = str(front.get("title") or PurePosixPath(doc.doc_id).stem.replace("-", " "))
        return self.chunk_blocks(
            collection,
            doc,
            version,
            source_type=SOURCE_TYPE,
            title=title,
            front=front,
            body=body,
            first_line=first,
            default_tier=collection.tier,
        )

    def check_options(self, collection: CollectionConfig, *, key: str) -> None:
        """Only ``processing.chunking`` (see :func:`check_chunking`); no ``format``.

        Raises:
            ConfigError: any other setting.
        """
        if collection.format:
            raise ConfigError(f"{key}.format: the documents kind has no such setting")
        unknown = sorted(set(collection.processing) - {CHUNKING})
        if unknown:
            raise ConfigError(
                f"{key}.processing: unknown setting(s) {', '.join(unknown)} (known: {CHUNKING})"
            )
        check_chunking(collection, key=key)


DOCUMENTS = Documents()
