"""The IVF_PQ parameters of a generation table, and the partitions a query probes, grow with
its row count."""

from __future__ import annotations

import pytest

from corpus_index.index_store import ANN_MAX_PARTITIONS, ann_parameters
from corpus_index.retrieval import ANN_MIN_NPROBES, ann_nprobes


@pytest.mark.parametrize(
    ("rows", "dim", "partitions", "sub_vectors"),
    [
        (5_000, 384, 70, 48),
        (100_000, 384, 316, 48),
        (1_000_000, 384, 1000, 48),
        (4_000_000, 384, ANN_MAX_PARTITIONS, 48),
        (100_000, 256, 316, 32),
        (100_000, 1536, 316, 192),
        (100_000, 64, 316, 8),
        (100_000, 100, 316, 25),  # 100 // 8 does not divide 100: 4 dimensions a sub-vector
        (1, 384, 1, 48),
    ],
)
def test_partitions_follow_the_square_root_of_the_rows(
    rows: int, dim: int, partitions: int, sub_vectors: int
) -> None:
    params = ann_parameters(rows, dim)
    assert params.partitions == partitions and params.sub_vectors == sub_vectors
    assert dim % params.sub_vectors == 0


def test_each_partition_stays_about_the_square_root_of_the_rows() -> None:
    for rows in (10_000, 250_000, 1_000_000):
        per_partition = rows / ann_parameters(rows, 384).partitions
        assert rows**0.5 <= per_partition < rows**0.5 + 2


@pytest.mark.parametrize(
    ("rows", "nprobes"),
    [(1_000, 20), (100_000, 31), (1_000_000, 100), (50_000_000, 102)],
)
def test_queries_probe_a_tenth_of_the_partitions(rows: int, nprobes: int) -> None:
    assert ann_nprobes(rows, 384) == nprobes
    assert ann_nprobes(rows, 384) >= ANN_MIN_NPROBES


def test_the_index_is_built_with_the_parameters_chosen() -> None:
    from corpus_index.index_store import ANN_KMEANS_ITERATIONS, _ann_config

    config = _ann_config(100_000, 384)
    params = ann_parameters(100_000, 384)
    assert (config.num_partitions, config.num_sub_vectors) == (params.partitions, 48)
    assert config.max_iterations == params.iterations == ANN_KMEANS_ITERATIONS
    assert config.distance_type == "cosine"
