"""A linear model of which earlier message a message continues, or that it starts anew.

Each message picks, among "a new conversation" and its ``window`` predecessors in the
channel, the option with the highest score ``w · features`` (a conditional logit: a softmax
over the options; see :func:`~corpus_index.linked.conversations.decode`). The weights are fitted by :func:`fit` on gold reply links and shipped as a
small JSON file beside this module (``links-v2.json``, trained by ``bench/train_grouping.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from scipy.optimize import minimize

from corpus_index.errors import ConfigError
from corpus_index.linked.features import PAIR_FEATURES, SELF_FEATURES, ChannelFeatures

FORMAT = "linked-links-v2"
DEFAULT_WEIGHTS = "links-v2.json"


@dataclass(frozen=True, slots=True)
class LinkModel:
    """Weights of the pair and new-conversation features, and the window they look back."""

    window: int
    pair_weights: tuple[float, ...]
    self_weights: tuple[float, ...]
    trained_on: str = ""

    def to_json(self) -> dict[str, Any]:
        """The weights file's content, with the feature names each weight belongs to."""
        return {
            "format": FORMAT,
            "window": self.window,
            "pair_features": dict(zip(PAIR_FEATURES, self.pair_weights, strict=True)),
            "self_features": dict(zip(SELF_FEATURES, self.self_weights, strict=True)),
            "trained_on": self.trained_on,
        }

    def save(self, path: Path | str) -> None:
        """Write the weights file (rounded to 6 decimals, so it diffs and reads well)."""
        data = self.to_json()
        for key in ("pair_features", "self_features"):
            data[key] = {k: round(float(v), 6) for k, v in data[key].items()}
        Path(path).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")

    @classmethod
    def from_json(cls, data: dict[str, Any], *, source: str = "weights") -> LinkModel:
        """A model from a weights file's content (``source`` names it in errors).

        Raises:
            ConfigError: another format, or weights for other features than this code computes.
        """
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            found = data.get("format") if isinstance(data, dict) else None
            raise ConfigError(f"{source}: weights format {found!r}, expected {FORMAT!r}")
        pair, own = data.get("pair_features", {}), data.get("self_features", {})
        if tuple(pair) != PAIR_FEATURES or tuple(own) != SELF_FEATURES:
            raise ConfigError(
                f"{source}: the weights name other features than this version computes; "
                "retrain them with bench/train_grouping.py"
            )
        return cls(
            window=int(data["window"]),
            pair_weights=tuple(float(v) for v in pair.values()),
            self_weights=tuple(float(v) for v in own.values()),
            trained_on=str(data.get("trained_on", "")),
        )

    @classmethod
    def load(cls, path: Path | str | None = None) -> LinkModel:
        """The weights in ``path``, or the ones shipped with the package.

        Raises:
            ConfigError: the file is not a weights file of this version.
            FileNotFoundError: there is no such file.
        """
        if path is None:
            source = f"{__package__}/{DEFAULT_WEIGHTS}"
            text = resources.files(__package__).joinpath(DEFAULT_WEIGHTS).read_text("utf-8")
        else:
            source, text = str(path), Path(path).read_text(encoding="utf-8")
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"{source}: not a JSON weights file: {exc}") from None
        return cls.from_json(data, source=source)


class Example(NamedTuple):
    """One channel to fit on: its pair features (all rows, conversation columns filled), its
    other features, and a bool ``[n, 1 + window]`` array of the gold options of each message
    (column 0: it starts a conversation)."""

    pair: np.ndarray
    features: ChannelFeatures
    gold: np.ndarray


def fit(
    examples: list[Example],
    *,
    window: int,
    l2: float = 1.0,
    trained_on: str = "",
) -> LinkModel:
    """Fit weights by maximum likelihood (L-BFGS, L2 penalty ``l2``; deterministic).

    Args:
        examples: the channels; messages with no possible gold option (none, or only outside
            the window) are left out.
    """
    rows_pair, rows_self, rows_valid, rows_gold = [], [], [], []
    for pair_all, features, gold in examples:
        options = np.concatenate([np.ones((len(gold), 1), bool), features.valid], axis=1)
        keep = (gold & options).any(axis=1)
        rows_pair.append(pair_all[keep])
        rows_self.append(features.self_[keep])
        rows_valid.append(options[keep])
        rows_gold.append(gold[keep] & options[keep])
    pair = np.concatenate(rows_pair)
    own = np.concatenate(rows_self)
    valid = np.concatenate(rows_valid)
    gold = np.concatenate(rows_gold)
    n_pair = pair.shape[2]

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        wp = w[:n_pair].astype(np.float32)
        ws = w[n_pair:].astype(np.float32)
        s = np.concatenate([(own @ ws)[:, None], pair @ wp], axis=1).astype(np.float64)
        s = np.where(valid, s, -np.inf)
        top = s.max(axis=1, keepdims=True)
        e = np.exp(s - top)
        z = e.sum(axis=1, keepdims=True)
        eg = np.where(gold, e, 0.0)
        zg = eg.sum(axis=1, keepdims=True)
        nll = float(np.sum(np.log(z) - np.log(zg))) + l2 * float(w @ w)
        q = (e / z - eg / zg).astype(np.float32)  # d nll / d score
        grad_p = np.einsum("nk,nkf->f", q[:, 1:], pair)
        grad_s = q[:, 0] @ own
        grad = np.concatenate([grad_p, grad_s]).astype(np.float64) + 2 * l2 * w
        return nll, grad

    start = np.zeros(n_pair + own.shape[1])
    result = minimize(loss, start, jac=True, method="L-BFGS-B", options={"maxiter": 500})
    w = result.x
    return LinkModel(
        window=window,
        pair_weights=tuple(float(x) for x in w[:n_pair]),
        self_weights=tuple(float(x) for x in w[n_pair:]),
        trained_on=trained_on,
    )
