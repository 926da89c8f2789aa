"""Blocking data-quality checks as plain functions: each returns a ``Gate`` outcome.

The Dagster asset checks call these; so can anything else (the CLI, tests, notebooks).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

NORM_TOLERANCE = 1e-3
# the least cosine between a cached vector and the same input embedded again that counts as
# the same model's vector (a consumer's probe is "verified" above it too)
REPRODUCED = 0.99
NOT_RUN = "NOT RUN"  # the status of a check that did not run (Gate.status)

# The blocking checks of each gated asset: (name, description). The Dagster asset checks, the
# registry's record of a generation and promotion's list of required gates all use these names.
EMBEDDING_GATES = [
    ("vectors_have_profile_dim", "Every vector has the profile's dimension."),
    ("vectors_are_finite", "No vector holds NaN or infinite values."),
    ("vector_norms_match_profile", "Vector norms are what the profile declares."),
    (
        "vectors_share_one_backend_spec",
        "Every vector was produced by the generation's backend_spec and revision, as recorded "
        "per window, and up to 4 cache hits a run embedded again have cosine >= 0.99 with "
        "what the cache gave.",
    ),
    ("vectors_match_their_inputs", "Every vector's input_hash is in embedding_inputs, and back."),
]
INDEX_ROW_GATES = [
    ("rows_have_tenant_and_acl", "Every row has a tenant_id and at least one ACL group."),
    ("no_rows_from_removed_documents", "No row belongs to a removed document."),
    (
        "index_rows_pass_expectation_suite",
        "The Great Expectations suite expectations/index_rows.json passes (not-null, value sets, "
        "unique vector_id).",
    ),
]
EVAL_GATE = "retrieval_not_worse_than_active"
GENERATION_GATES = [
    ("row_counts_reconcile", "Rows per collection equal that collection's embeddable inputs."),
    (
        "indexes_cover_every_row",
        "The FTS and ANN indexes cover every row but a bounded tail of the newest rows, which "
        "search reads exactly.",
    ),
    ("no_orphan_vectors", "Every row belongs to a collection of the namespace."),
    (
        EVAL_GATE,
        "Recall@5, MRR@10 and nDCG@10 on the namespace's golden set are not worse than the "
        "ACTIVE generation's beyond the namespace's eval_tolerance.",
    ),
]


def check_key(asset: str, check: str, collection: str | None = None) -> str:
    """How a generation's record names a check: ``asset:check`` or ``asset:check[collection]``."""
    return f"{asset}:{check}" + (f"[{collection}]" if collection else "")


@dataclass(frozen=True, slots=True)
class Gate:
    """The outcome of one check: its name, whether it passed, and figures that explain it.

    A check that could not run (nothing to run it on, e.g. no golden set) has ``ran`` False and
    ``passed`` False: it is reported as not run, never as passed, and whoever requires it
    decides what a missing run means (see ``lifecycle.promote``).
    """

    name: str
    passed: bool
    description: str
    metadata: dict[str, Any] = field(default_factory=dict)
    ran: bool = True

    @classmethod
    def not_run(cls, name: str, description: str, reason: str) -> Gate:
        """A check that did not run, and why."""
        return cls(name, False, description, {"not_run": reason}, ran=False)

    @property
    def status(self) -> str:
        """``PASSED``, ``FAILED`` or ``NOT RUN``."""
        return NOT_RUN if not self.ran else "PASSED" if self.passed else "FAILED"

    def to_json(self) -> dict[str, Any]:
        ran = {} if self.ran else {"ran": False}
        return {"passed": self.passed, **ran, "description": self.description, **self.metadata}


def not_run(check: dict[str, Any]) -> bool:
    """Whether a check as recorded (``Gate.to_json``) did not run."""
    return check.get("ran") is False


def check_summary(checks: Mapping[str, dict[str, Any]]) -> str:
    """One line on a generation's recorded checks: what failed, what did not run, else how
    many passed."""
    if not checks:
        return "checks not run"
    skipped = sorted(n for n, c in checks.items() if not_run(c))
    failed = sorted(n for n, c in checks.items() if not c.get("passed") and n not in skipped)
    parts = [f"FAILED: {', '.join(failed)}"] if failed else []
    if skipped:
        parts.append(f"NOT RUN: {', '.join(skipped)}")
    passed = len(checks) - len(failed) - len(skipped)
    return "; ".join(parts) if failed else "; ".join([f"{passed} checks passed", *parts])


def vectors_have_profile_dim(
    vectors: npt.NDArray[np.float32], dim: int, *, widths: Mapping[int, int] | None = None
) -> Gate:
    """The width of the vectors themselves against the profile's ``dim``.

    Only the vectors are measured: what the embedder declares is where the profile's ``dim``
    comes from, so comparing the two could never fail. ``actual_dim`` is the width found (-1
    when ``vectors`` is not a matrix).

    Args:
        widths: vectors counted by their width as they came, when they were put into one
            matrix afterwards (vectors of several widths are, with the odd ones made NaN:
            the matrix's width alone would hide them).
    """
    found = dict(widths) if widths else {int(vectors.shape[1]) if vectors.ndim == 2 else -1: 1}
    odd = sorted(w for w in found if w != dim)
    metadata: dict[str, Any] = {"expected_dim": dim, "actual_dim": odd[0] if odd else dim}
    if len(found) > 1:
        metadata["widths"] = ", ".join(f"{w}: {n}" for w, n in sorted(found.items()))
    return Gate(
        "vectors_have_profile_dim",
        not odd,
        f"every vector has the profile's dimension {dim}",
        metadata,
    )


def vectors_are_finite(vectors: npt.NDArray[np.float32]) -> Gate:
    bad = int(np.count_nonzero(~np.isfinite(vectors).all(axis=1))) if vectors.size else 0
    return Gate(
        "vectors_are_finite", bad == 0, "no NaN or infinite values", {"non_finite_vectors": bad}
    )


def vector_norms_match_profile(vectors: npt.NDArray[np.float32], *, normalized: bool) -> Gate:
    if not normalized:
        return Gate("vector_norms_match_profile", True, "profile declares unnormalized vectors", {})
    if vectors.size == 0:
        return Gate(
            "vector_norms_match_profile",
            True,
            "no vectors to check (profile declares L2-normalized vectors)",
            {"vectors_off_norm": 0},
        )
    with np.errstate(invalid="ignore"):
        norms = np.linalg.norm(vectors, axis=1)
    off = int(np.count_nonzero(~(np.abs(norms - 1.0) <= NORM_TOLERANCE)))
    return Gate(
        "vector_norms_match_profile",
        off == 0,
        f"every vector is L2-normalized (|norm - 1| <= {NORM_TOLERANCE})",
        {"vectors_off_norm": off},
    )


def vectors_share_one_backend_spec(
    producers: Mapping[tuple[str, str], int],
    *,
    backend_spec: str,
    revision: str,
    cache_hits_again: Sequence[float] | None = None,
) -> Gate:
    """Every vector was produced by ``backend_spec`` at ``revision`` (the generation's spec).

    A cache hit's recorded producer is the cache table's name, which is made from the same
    spec, so only embedding some of them again can show that the table holds another
    model's vectors.

    Args:
        producers: vectors counted by the ``(backend_spec, revision)`` recorded for the window
            that produced them: the embedder after its call for fresh vectors, the cache
            table's identity for cache hits, the previous partition's identity for lent ones.
        cache_hits_again: the cosine of each cache hit embedded again by the generation's
            embedder with the vector the cache gave (None: none was embedded again); one
            below REPRODUCED fails the check.
    """
    expected = (backend_spec, revision)
    others = sum(n for producer, n in producers.items() if producer != expected)
    metadata: dict[str, Any] = {
        "produced_by": ", ".join(f"{s} {r}: {n}" for (s, r), n in sorted(producers.items())),
        "vectors_from_other_embedders": others,
    }
    unlike = 0
    if cache_hits_again is not None:
        unlike = sum(1 for c in cache_hits_again if not c >= REPRODUCED)
        metadata["cache_hits_embedded_again"] = len(cache_hits_again)
        metadata["cache_hits_not_reproduced"] = unlike
        if cache_hits_again:
            metadata["min_cache_hit_cosine"] = round(float(min(cache_hits_again)), 4)
    return Gate(
        "vectors_share_one_backend_spec",
        others == 0 and unlike == 0,
        f"every vector was produced by {backend_spec} at revision {revision}",
        metadata,
    )


def vectors_match_their_inputs(
    vector_hashes: Sequence[str] | pa.Array | pa.ChunkedArray,
    input_hashes: Sequence[str] | pa.Array | pa.ChunkedArray,
) -> Gate:
    """Counted on Arrow arrays (hash tables of the distinct keys, not Python sets of strings)."""
    vs = pc.unique(_string_array(vector_hashes))
    ins = pc.unique(_string_array(input_hashes))
    orphans = len(vs) - int(pc.sum(pc.is_in(vs, value_set=ins)).as_py() or 0)
    missing = len(ins) - int(pc.sum(pc.is_in(ins, value_set=vs)).as_py() or 0)
    return Gate(
        "vectors_match_their_inputs",
        orphans == 0 and missing == 0,
        "every vector's input_hash is in embedding_inputs and every input has a vector",
        {"vectors_without_input": orphans, "inputs_without_vector": missing},
    )


def _string_array(values: Sequence[str] | pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks() if values.num_chunks else pa.array([], pa.string())
    if isinstance(values, pa.Array):
        return values
    return pa.array(list(values), pa.string())


def rows_have_tenant_and_acl(rows: pa.Table) -> Gate:
    if rows.num_rows == 0:
        return Gate(
            "rows_have_tenant_and_acl",
            True,
            "every row has a tenant and ACL groups",
            {"bad_rows": 0},
        )
    tenant_bad = pc.or_(
        pc.is_null(rows["tenant_id"]), pc.equal(pc.utf8_length(rows["tenant_id"]), 0)
    )
    acl_len = pc.list_value_length(rows["acl_groups"])
    acl_bad = pc.or_(pc.is_null(acl_len), pc.equal(acl_len, 0))
    bad = int(
        pc.sum(pc.or_(pc.fill_null(tenant_bad, True), pc.fill_null(acl_bad, True))).as_py() or 0
    )
    return Gate(
        "rows_have_tenant_and_acl",
        bad == 0,
        "every row has a tenant and ACL groups",
        {"bad_rows": bad},
    )


def no_rows_from_removed_documents(
    rows: pa.Table,
    live_source_ids: Iterable[str],
    *,
    removed_source_ids: Iterable[str] = (),
    found_in: str = "the generation",
) -> Gate:
    """No row of ``rows`` (their ``source_id``) belongs to a document that is not live, or is
    removed (tombstoned) though a stale source still names it.

    ``removed_document_rows`` counts the rows that do, ``examples`` names up to five of their
    documents and ``found_in`` where the rows were read.
    """
    live = set(live_source_ids)
    removed = set(removed_source_ids)
    sources = rows.column("source_id").to_pylist() if rows.num_rows else []
    bad = [s for s in sources if s not in live or s in removed]
    return Gate(
        "no_rows_from_removed_documents",
        not bad,
        "no row belongs to a document that was removed",
        {
            "removed_document_rows": len(bad),
            "examples": ", ".join(sorted(set(bad))[:5]),
            "found_in": found_in,
        },
    )


def combine(parts: Sequence[Gate], *, summed: Sequence[str] = ()) -> Gate:
    """One gate from the same check run over several batches: it passes when every batch
    passed; its figures are the first failing batch's (else the last's), with the ``summed``
    figures added up over all batches."""
    if not parts:
        raise ValueError("combine needs at least one gate")
    failing = [g for g in parts if not g.passed]
    base = failing[0] if failing else parts[-1]
    metadata = dict(base.metadata)
    for key in summed:
        values = [g.metadata.get(key) for g in parts]
        if all(isinstance(v, int) for v in values):
            metadata[key] = sum(values)
    if len(parts) > 1:
        metadata["batches"] = len(parts)
    return Gate(base.name, not failing, base.description, metadata)
