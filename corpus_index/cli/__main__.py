"""``python -m corpus_index.cli``."""

from corpus_index.cli import main

main()
