"""How a namespace's hybrid search fuses its retrievers: one default for every namespace,
overridable per namespace only in ``corpus.yaml`` (``namespaces.<ns>.retrieval``).

The default (chosen on the SciFact and Cranfield dev collections, ``bench/fusion_lab.py``;
figures in ``bench/README.md``): z-score fusion of the dense and lexical scores with equal
weights, plus one round of Rocchio feedback on the dense side over the top fused candidate's
document (beta 0.5). ``bench/golden_gate.py`` checks it against the previous default on every
golden set of the sample corpus.
``fusion: rrf`` with ``feedback_docs: 0`` is the previous behaviour (reciprocal rank fusion).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

FUSIONS = ("zscore", "rrf", "weighted")
FEEDBACK_UNITS = ("document", "chunk")


@dataclass(frozen=True, slots=True)
class RetrievalSettings:
    """Fusion method, weights and pseudo-relevance feedback of a namespace's hybrid search.

    Attributes:
        fusion: ``zscore`` (standardized scores, weighted sum), ``rrf`` (reciprocal rank
            fusion) or ``weighted`` (min-max scores, weighted sum).
        dense_weight / lexical_weight: the retrievers' weights in the fusion.
        rrf_k: the RRF constant (``rrf`` only).
        feedback_docs: fused candidates whose vectors move the query (Rocchio); 0 turns it off.
        feedback_beta: weight of their centroid added to the query vector.
        feedback_from: ``document``: each feedback candidate stands for its document, the
            unit-length mean of that document's rows among the first round's candidates;
            ``chunk``: the candidate's own row.
    """

    fusion: str = "zscore"
    dense_weight: float = 1.0
    lexical_weight: float = 1.0
    rrf_k: int = 60
    feedback_docs: int = 1
    feedback_beta: float = 0.5
    feedback_from: str = "document"

    def __post_init__(self) -> None:
        if self.fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {', '.join(FUSIONS)} (got {self.fusion!r})")
        weights = (self.dense_weight, self.lexical_weight)
        if not all(math.isfinite(w) and w >= 0 for w in weights) or not any(weights):
            raise ValueError(
                f"fusion weights must be finite, non-negative and not both 0 (got {weights})"
            )
        if self.rrf_k < 0:
            raise ValueError(f"rrf_k must be >= 0 (got {self.rrf_k})")
        if self.feedback_docs < 0:
            raise ValueError(f"feedback_docs must be >= 0 (got {self.feedback_docs})")
        if not math.isfinite(self.feedback_beta) or self.feedback_beta < 0:
            raise ValueError(f"feedback_beta must be a number >= 0 (got {self.feedback_beta})")
        if self.feedback_from not in FEEDBACK_UNITS:
            raise ValueError(
                f"feedback_from must be one of {', '.join(FEEDBACK_UNITS)} "
                f"(got {self.feedback_from!r})"
            )

    @property
    def weights(self) -> tuple[float, float]:
        return (self.dense_weight, self.lexical_weight)

    @property
    def feedback(self) -> bool:
        """Whether hybrid search runs the Rocchio round."""
        return self.feedback_docs > 0 and self.feedback_beta > 0

    def to_json(self) -> dict[str, Any]:
        return {
            "fusion": self.fusion,
            "dense_weight": self.dense_weight,
            "lexical_weight": self.lexical_weight,
            "rrf_k": self.rrf_k,
            "feedback_docs": self.feedback_docs,
            "feedback_beta": self.feedback_beta,
            "feedback_from": self.feedback_from,
        }


DEFAULT_RETRIEVAL = RetrievalSettings()
RETRIEVAL_KEYS = frozenset(DEFAULT_RETRIEVAL.to_json())


def retrieval_settings(spec: dict[str, Any]) -> RetrievalSettings:
    """The default with the keys ``spec`` sets (keys already checked against RETRIEVAL_KEYS).

    Raises:
        ValueError: a value of the wrong type or out of range (the message names the key).
    """
    values: dict[str, Any] = {}
    for key, value in spec.items():
        default = getattr(DEFAULT_RETRIEVAL, key)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if isinstance(default, str) and not isinstance(value, str):
            raise ValueError(f"{key} must be a string (got {value!r})")
        if isinstance(default, float) and not number:
            raise ValueError(f"{key} must be a number (got {value!r})")
        if isinstance(default, int) and not (number and isinstance(value, int)):
            raise ValueError(f"{key} must be an integer (got {value!r})")
        values[key] = float(value) if isinstance(default, float) else value
    return RetrievalSettings(**values)
