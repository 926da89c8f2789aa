"""The ``corpus`` command line: sync, search and operate generations.

``app`` holds the Click group and the error boundary; ``operate`` the commands that run or
inspect the pipeline (through the injected ``PipelineRunner``); ``query`` the commands that read
the index as a principal; ``grouping`` the evaluation of conversation grouping.
"""

from __future__ import annotations

from corpus_index.cli import grouping, operate, query  # noqa: F401 - registers the commands on ``main``
from corpus_index.cli.app import main
from corpus_index.cli.query import print_hits

__all__ = ["main", "print_hits"]
