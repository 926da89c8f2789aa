"""The ``corpus`` command line: sync, search and operate generations.

``app`` holds the Click group and the error boundary; ``operate`` the commands that run or
inspect the pipeline (through the injected ``PipelineRunner``); ``query`` the commands that read
the index as a principal; ``alerts`` the failed runs an operator has not acknowledged;
``grouping`` the evaluation of conversation grouping; ``identities`` the people of messages;
``reprocess`` the second pass over linked groups; ``sidecar`` RFC 0013 sidecars; ``serve`` the
HTTP API; ``storage`` moving the stores to an object store.
"""

from __future__ import annotations

from corpus_index.cli import (  # noqa: F401 - registers commands
    alerts,
    contexts,
    exports,
    grouping,
    identities,
    operate,
    query,
    registry,
    reprocess,
    serve,
    sidecar,
    storage,
)
from corpus_index.cli.app import main
from corpus_index.cli.query import print_hits

__all__ = ["main", "print_hits"]
