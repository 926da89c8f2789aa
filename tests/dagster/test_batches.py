"""embeddings and index_rows work a batch at a time: checked per batch, committed once."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from corpus_index import predicates, steps
from corpus_index.config import Settings
from corpus_index.home import Home
from definitions import dagster_runner
from tests.corpusgen import write_home

pytestmark = pytest.mark.slow
COLLECTION = "alpha-deals"


def refs(corpus: Home, generation: object) -> list[str]:
    got = corpus.store.collection_refs(generation, COLLECTION)  # type: ignore[arg-type]
    return sorted(got["chunk_ref"].to_pylist())


def test_rows_stream_in_batches_and_a_failing_batch_commits_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(config_path=write_home(tmp_path), home=tmp_path / "home")
    assert dagster_runner().sync(settings).ok
    corpus = Home(settings)
    generation = corpus.registry.open_generation(corpus.spec("main"), run_id="test")
    served = refs(corpus, generation)
    n = len(served)
    assert n > 6
    monkeypatch.setattr(steps.index_rows, "ROWS_PER_BATCH", 3)

    # rebuilt from nothing: appended in one stream of batches, each one checked
    corpus.store.delete_where(generation, predicates.eq("collection", COLLECTION))
    assert refs(corpus, generation) == []
    out = steps.index_rows.run(corpus, "main", COLLECTION, run_id="rebuild")
    assert out.passed and out.write is not None
    assert (out.built, out.write.inserted, out.write.total) == (n, n, n)
    suite = next(g for g in out.gates if g.name.endswith("pass_expectation_suite"))
    # a batch holds whole documents: each deal has at least 3 rows, so one deal per batch
    per_doc = pc.value_counts(corpus.store.collection_refs(generation, COLLECTION)["source_id"])
    assert min(c["counts"].as_py() for c in per_doc) >= 3
    assert suite.metadata["batches"] == len(per_doc)
    assert suite.metadata["rows"] == n
    assert refs(corpus, generation) == served

    # the last document's blocks lose their tenant: its rows fail in the last batch, after
    # earlier batches already went into the write; nothing is committed
    blocks = corpus.warehouse.read("parsed_blocks", (COLLECTION,))
    assert blocks is not None
    last = blocks["doc_id"][-1].as_py()
    is_last = pc.equal(blocks["doc_id"], last)
    tenant = pc.if_else(is_last, pa.scalar("", pa.string()), blocks["tenant_id"])
    corpus.warehouse.write(
        "parsed_blocks",
        (COLLECTION,),
        blocks.set_column(blocks.schema.get_field_index("tenant_id"), "tenant_id", tenant),
    )
    version = corpus.store.table(generation).version
    # rewrite every source
    monkeypatch.setattr(steps.index_rows, "REPLACE_WHOLE_COLLECTION_ABOVE", -1)
    out = steps.index_rows.run(corpus, "main", COLLECTION, run_id="broken")
    assert not out.passed and out.write is None
    tenant_gate = next(g for g in out.gates if g.name == "rows_have_tenant_and_acl")
    assert not tenant_gate.passed and tenant_gate.metadata["bad_rows"] > 0
    assert tenant_gate.metadata["batches"] >= 2  # earlier batches had passed into the write
    assert corpus.store.table(generation).version == version
    assert refs(corpus, generation) == served
    assert corpus.store.count(generation, predicates.eq("tenant_id", "")) == 0


def test_embeddings_are_checked_window_by_window_and_a_bad_window_writes_no_partition(
    home: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from corpus_index.cache import EmbeddingCache
    from tests.dagster.harness import Graph

    assert Graph(home).ingest("alpha-deals").success
    corpus = Home(home)
    inputs = corpus.warehouse.read("embedding_inputs", ("alpha-deals",))
    assert inputs is not None
    spec = corpus.spec("main")
    mine = inputs.filter(pc.equal(inputs["input_format"], spec.input_format))
    # embedded in the inputs' order (documents in doc_id order), each hash once
    hashes = list(dict.fromkeys(mine["input_hash"].to_pylist()))
    assert len(hashes) > 6 and hashes != sorted(hashes)
    cache = EmbeddingCache(
        home.lance_uri, backend_spec=spec.backend_spec, revision=spec.model_revision, dim=spec.dim
    )
    # the last hash (the last window's) has a corrupted cache entry: finite, off the unit norm
    cache.put(hashes[-1:], np.full((1, spec.dim), 3.0, dtype=np.float32))
    monkeypatch.setattr(steps.embeddings, "EMBED_WINDOW", 3)
    last_window = hashes[(len(hashes) - 1) // 3 * 3 :]

    out = steps.embeddings.run(corpus, "main", "alpha-deals")
    assert not out.passed
    norm = next(g for g in out.gates if g.name == "vector_norms_match_profile")
    assert not norm.passed and norm.metadata["vectors_off_norm"] == 1
    assert norm.metadata["batches"] == math.ceil(len(hashes) / 3)
    assert corpus.warehouse.read("embeddings", ("main", "alpha-deals")) is None
    # the windows that passed their checks are cached; the failing window's new vectors are not
    cached = set(cache.lookup(hashes))
    assert cached == set(hashes[: len(hashes) - len(last_window)]) | {hashes[-1]}

    cache.delete(hashes[-1:])
    out = steps.embeddings.run(corpus, "main", "alpha-deals")
    assert out.passed
    assert (out.embedded, out.cache_hits) == (len(last_window), len(hashes) - len(last_window))
    table = corpus.warehouse.read("embeddings", ("main", "alpha-deals"))
    assert table is not None
    got = table["input_hash"].to_pylist()
    # window by window in the inputs' order (within a window, cache hits come first)
    assert [set(got[i : i + 3]) for i in range(0, len(got), 3)] == [
        set(hashes[i : i + 3]) for i in range(0, len(hashes), 3)
    ]


def test_sidecars_built_in_small_batches_match_one_batch(
    home: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from tests.dagster.harness import Graph

    g = Graph(home)
    assert g.ingest("alpha-deals").success and g.embed("main", "alpha-deals").success
    corpus = Home(home)
    folder = home.exports / "sidecars" / "main" / "alpha-deals"

    def contents() -> dict[str, dict[str, object]]:
        out = {}
        for path in sorted(folder.glob("*.embeddings.json")):
            data = json.loads(path.read_text(encoding="utf-8"))
            data.pop("generated_at", None)
            out[path.name] = data
        return out

    whole = contents()
    assert len(whole) == 3
    for path in folder.glob("*.embeddings.json"):
        path.unlink()
    monkeypatch.setattr(steps.sidecars, "SIDECAR_ROWS", 5)  # one deal (4 inputs) per range
    out = steps.sidecars.run(corpus, "main", "alpha-deals")
    assert (out.written, out.unchanged) == (3, 0)
    assert contents() == whole


def test_sidecars_in_ranges_remove_gone_documents_and_strays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Removed deals in the middle and at the end of the doc_id order lose their sidecars, one
    range of documents at a time; without recorded pins, stray files are found by listing."""
    settings = Settings(
        config_path=write_home(tmp_path, deals_per_tenant=5), home=tmp_path / "home"
    )
    assert dagster_runner().sync(settings).ok
    monkeypatch.setattr(steps.sidecars, "SIDECAR_ROWS", 5)  # one deal (4 inputs) per range
    corpus = Home(settings)
    folder = settings.exports / "sidecars" / "main" / COLLECTION
    names = sorted(p.name for p in folder.glob("*.embeddings.json"))
    assert len(names) == 5
    saved = {p.name: p.read_bytes() for p in folder.glob("*.embeddings.json")}
    pins_before = corpus.warehouse.read("sidecar_pins", ("main", COLLECTION))
    for deal in ("deal-alpha-002", "deal-alpha-004"):
        (tmp_path / "sources" / "alpha" / f"{deal}.uw.md").unlink()
    # deletion removes their sidecars and pins at once
    steps.source_manifest.run(corpus, COLLECTION)
    steps.parsed_blocks.run(corpus, COLLECTION)
    steps.embedding_inputs.run(corpus, COLLECTION)
    assert len(list(folder.glob("*.embeddings.json"))) == 3
    # had that not happened (files and pins as before), the step itself removes them
    for name, data in saved.items():
        (folder / name).write_bytes(data)
    assert pins_before is not None
    corpus.warehouse.write("sidecar_pins", ("main", COLLECTION), pins_before)
    out = steps.sidecars.run(corpus, "main", COLLECTION)
    assert (out.written, out.unchanged, out.removed) == (0, 3, 2)
    left = sorted(p.name for p in folder.glob("*.embeddings.json"))
    assert left == [n for n in names if "-002." not in n and "-004." not in n]
    pins = corpus.warehouse.read("sidecar_pins", ("main", COLLECTION))
    assert pins is not None and pins["doc_id"].to_pylist() == [n.split(".")[0] for n in left]

    # a home without recorded pins: every file is compared, and one no document owns goes
    corpus.warehouse.delete("sidecar_pins", ("main", COLLECTION))
    (folder / "deal-alpha-999.embeddings.json").write_text("{}", encoding="utf-8")
    out = steps.sidecars.run(corpus, "main", COLLECTION)
    assert (out.written, out.unchanged, out.removed) == (0, 3, 1)
    assert sorted(p.name for p in folder.glob("*.embeddings.json")) == left
    again = steps.sidecars.run(corpus, "main", COLLECTION)
    assert (again.written, again.unchanged, again.removed) == (0, 3, 0)

    # a torn file (not JSON) is written again, not an error
    torn = folder / left[0]
    torn.write_text('{"blocks": [', encoding="utf-8")
    fixed = steps.sidecars.run(corpus, "main", COLLECTION)
    assert (fixed.written, fixed.unchanged, fixed.removed) == (1, 2, 0)
    assert json.loads(torn.read_text(encoding="utf-8"))["blocks"]


def test_lent_vectors_are_checked_again_whatever_the_partition_records(
    home: Settings,
) -> None:
    from tests.dagster.harness import Graph

    assert Graph(home).ingest("alpha-deals").success
    corpus = Home(home)
    assert steps.embeddings.run(corpus, "main", "alpha-deals").passed
    key = ("embeddings", ("main", "alpha-deals"))
    table = corpus.warehouse.read(*key)
    assert table is not None
    spec = corpus.spec("main")
    # one stored vector goes off the unit norm behind the step's back, its metadata kept
    vectors = np.asarray(table["vector"].to_pylist(), dtype=np.float32)
    vectors[0] = 3.0
    flat = pa.array(vectors.ravel(), pa.float32())
    bad = table.set_column(
        table.schema.get_field_index("vector"),
        "vector",
        pa.FixedSizeListArray.from_arrays(flat, spec.dim),
    )
    corpus.warehouse.write(*key, bad)
    # every vector is lent, and every lent vector is checked again: the bad one fails the step
    out = steps.embeddings.run(corpus, "main", "alpha-deals")
    assert (out.embedded, out.cache_hits) == (0, table.num_rows)
    norm = next(g for g in out.gates if g.name == "vector_norms_match_profile")
    assert not out.passed and not norm.passed and norm.metadata["vectors_off_norm"] == 1
