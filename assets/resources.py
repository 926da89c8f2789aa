"""The one resource the assets use: the corpus home and its configuration."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from corpus_index.config import Settings
from corpus_index.home import Home


class CorpusResource(dg.ConfigurableResource):  # type: ignore[misc]
    """Where the configuration and the home folder are."""

    config_path: str
    home: str

    def settings(self) -> Settings:
        return Settings(config_path=Path(self.config_path), home=Path(self.home))

    def open_home(self) -> Home:
        return Home(self.settings())
