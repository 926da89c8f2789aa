"""Ingest throughput: SciFact through the whole pipeline vs ``model.encode`` on the same texts.

The pipeline side is ``DagsterRunner.sync`` (``definitions.dagster_runner()``) (what ``corpus sync`` runs: ingest, embed and
generation jobs in-process against a fresh home's Dagster instance) over a generated
``corpus.yaml`` with one ``beir`` collection and one ``st:all-MiniLM-L6-v2`` profile. The raw
side is one ``SentenceTransformer.encode`` call over exactly the distinct input texts the
pipeline embeds (rebuilt beforehand with ``corpus_index.embedding.build_inputs`` and checked
afterwards against the pipeline's ``embedding_inputs`` partition), with the same batch size,
the same model object and the same thread settings. The model is loaded and warmed once before
either timing (its load time is printed on its own line). The raw side runs first by default
(``--order``), always in the same position, so warm caches favour neither side by accident.

Target: pipeline throughput (distinct inputs / sync wall time) is at least 0.9x raw.

Usage (from the repository root)::

    .venv/bin/python bench/ingest.py --limit 1000      # quick: first 1,000 documents (~1.5 min)
    .venv/bin/python bench/ingest.py                   # all 5,183 documents (~7 min on 2 cores)
    .venv/bin/python bench/ingest.py --limit 500 --json
    .venv/bin/python bench/ingest.py --limit 1000 --diagnose   # + raw encode in the pipeline's
                                                              #   call pattern (64 texts a call)

Options: ``--limit N`` first N documents (default all), ``--home DIR`` corpus home to build in
(default: a temporary folder, removed afterwards; must be empty), ``--batch-size`` (64, the
profile default), ``--threads`` (2: torch intra-op and BLAS/OpenMP threads, both sides),
``--order raw-first|pipeline-first``, ``--sandwich`` (raw, pipeline, raw: the mean of the two
raw timings, for a machine whose load drifts), ``--data DIR`` (a BEIR folder; default
/work/shared/evaldata/scifact), ``--json``.

Other processes on the machine share the cores: figures are noisy; compare ratios within one
run, not seconds across runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402  (sets up sys.path for the project; imports nothing heavy)

TARGET = 0.9
MODEL = "all-MiniLM-L6-v2"
DEFAULT_DATA = Path("/work/shared/evaldata/scifact")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=None, help="use the first N documents")
    ap.add_argument("--home", type=Path, default=None, help="corpus home (default: a temp dir)")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="BEIR folder (corpus.jsonl)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--order", choices=["raw-first", "pipeline-first"], default="raw-first")
    ap.add_argument(
        "--sandwich",
        action="store_true",
        help="run the raw side again after the pipeline (raw, pipeline, raw) and use the mean of "
        "the two raw timings: drift in the machine's load then hits both sides alike",
    )
    ap.add_argument(
        "--diagnose",
        action="store_true",
        help="also time raw encode called as the pipeline calls it (hash order, batch-size texts a call)",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    return ap.parse_args(argv)


def prepare_home(args: argparse.Namespace, home: Path) -> tuple[Path, Path]:
    """(config, source folder) of the benchmark's corpus in ``home``."""
    corpus = args.data / "corpus.jsonl"
    if not corpus.is_file():
        sys.exit(f"error: {corpus} not found (--data must be a BEIR folder)")
    if args.limit is None:
        source = args.data  # read in place; the beir reader only reads corpus.jsonl
    else:
        source = home / "source"
        source.mkdir()
        with corpus.open("rb") as src, (source / "corpus.jsonl").open("wb") as dst:
            for n, line in enumerate(src):
                if n >= args.limit:
                    break
                dst.write(line)
    config = _common.write_config(
        home / "corpus.yaml",
        collection="scifact",
        kind="beir",
        source=source,
        embedder=f"st:{MODEL}",
        tenant="bench",
        acl=["bench-readers"],
        batch_size=args.batch_size,
    )
    return config, source


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _common.configure(threads=args.threads)
    with _common.bench_home(args.home, "bench-ingest-", must_be_empty=True) as home:
        config_path, _source = prepare_home(args, home)
        _common.point_project_at(config_path, home)
        return run(args, home, config_path)


def run(args: argparse.Namespace, home: Path, config_path: Path) -> int:
    import numpy as np
    import pyarrow.compute as pc

    _common.set_torch_threads(args.threads)
    from corpus_index.config import Settings
    from corpus_index.embedders import local
    from corpus_index.embedding import build_inputs
    from corpus_index.records import INPUT_SCHEMA
    from corpus_index.sources import parse_collection, scan_manifest
    from corpus_index.warehouse import Warehouse

    settings = Settings(config_path=config_path, home=home)
    config = settings.load()
    collection = config.collections["scifact"]
    profile = config.profiles["main"]

    # the canonical inputs, rebuilt with the library, before either side runs
    t0 = time.perf_counter()
    manifest = scan_manifest(collection, None)
    parsed = parse_collection(collection, manifest.table, None, None)
    inputs = build_inputs(
        parsed.blocks, sections=config.sections, input_formats={profile.input_format}
    )
    texts_by_hash = dict(
        zip(inputs["input_hash"].to_pylist(), inputs["text"].to_pylist(), strict=True)
    )
    hashes = sorted(texts_by_hash)  # the order embed_with_cache uses
    texts = [texts_by_hash[h] for h in hashes]
    rebuild_s = time.perf_counter() - t0

    # one model object for both sides: the pipeline's embedder reuses this cached load
    t0 = time.perf_counter()
    model = local._load(local.model_path(MODEL))
    model_load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    model.encode(texts[: args.batch_size], batch_size=args.batch_size, show_progress_bar=False)
    warmup_s = time.perf_counter() - t0

    # count the model's own time inside the pipeline (wraps the class, edits nothing)
    inner = {"s": 0.0, "calls": 0, "texts": 0}
    original_embed = local.SentenceTransformerEmbedder.embed

    def timed_embed(self, batch):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        try:
            return original_embed(self, batch)
        finally:
            inner["s"] += time.perf_counter() - start
            inner["calls"] += 1
            inner["texts"] += len(batch)

    local.SentenceTransformerEmbedder.embed = timed_embed  # type: ignore[method-assign]

    cpu: dict[str, float] = {}

    def say(message: str) -> None:  # progress on stderr, so a killed run still told something
        if not args.json:
            print(f"  ... {message}", file=sys.stderr, flush=True)

    def raw_side() -> tuple[float, object]:
        start, cpu0 = time.perf_counter(), time.process_time()
        vectors = model.encode(
            texts,
            batch_size=args.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        cpu["raw"] = time.process_time() - cpu0
        secs = time.perf_counter() - start
        say(f"raw side: {secs:.2f} s, {len(texts) / secs:.2f} passages/s")
        return secs, vectors

    def pipeline_side() -> _common.SyncTiming:
        cpu0 = time.process_time()
        timing = _common.timed_sync(settings)
        cpu["pipeline"] = time.process_time() - cpu0
        say(f"pipeline side: {timing.wall_s:.2f} s, embedded {timing.report.embedded}")
        return timing

    rss_before = _common.rss_mib()
    raw_runs: list[float] = []
    raw_cpu_runs: list[float] = []
    with _common.RssSampler() as mem:
        if args.order == "raw-first" or args.sandwich:
            raw_s, raw_vectors = raw_side()
            raw_runs.append(raw_s)
            raw_cpu_runs.append(cpu["raw"])
            timing = pipeline_side()
            if args.sandwich:
                raw_runs.append(raw_side()[0])
                raw_cpu_runs.append(cpu["raw"])
        else:
            timing = pipeline_side()
            raw_s, raw_vectors = raw_side()
            raw_runs.append(raw_s)
            raw_cpu_runs.append(cpu["raw"])
    raw_s = sum(raw_runs) / len(raw_runs)
    cpu["raw"] = sum(raw_cpu_runs) / len(raw_cpu_runs)
    chunked_s = None
    if args.diagnose:
        start = time.perf_counter()
        for i in range(0, len(texts), args.batch_size):
            model.encode(
                texts[i : i + args.batch_size],
                batch_size=args.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        chunked_s = time.perf_counter() - start

    report = timing.report
    if not report.ok:
        print(json.dumps(report.to_json(), indent=2), file=sys.stderr)
        sys.exit("error: the pipeline run failed; see the report above")

    # both sides did the same work: same inputs, same vectors
    wh = Warehouse(settings.warehouse)
    piped = wh.read("embedding_inputs", ("scifact",), INPUT_SCHEMA)
    piped = piped.filter(pc.equal(piped["input_format"], profile.input_format))
    same_inputs = sorted(set(piped["input_hash"].to_pylist())) == hashes
    emb = wh.read("embeddings", ("main", "scifact"))
    got = dict(zip(emb["input_hash"].to_pylist(), range(emb.num_rows), strict=True))
    matrix = emb["vector"].combine_chunks().values.to_numpy(zero_copy_only=False).reshape(-1, 384)
    order = np.asarray([got[h] for h in hashes])
    cosine = np.sum(matrix[order] * np.asarray(raw_vectors), axis=1)
    min_cos = float(cosine.min()) if len(cosine) else 1.0

    padding = padded_tokens(model, texts, args.batch_size)
    n = len(texts)
    pipe_s = timing.wall_s
    raw_pps = n / raw_s
    pipe_pps = report.embedded / pipe_s if pipe_s else 0.0
    ratio = pipe_pps / raw_pps
    steps = timing.steps_by_name()
    result = {
        "documents": report.documents,
        "inputs": n,
        "embedded_by_pipeline": report.embedded,
        "same_inputs": same_inputs,
        "min_cosine_pipeline_vs_raw": round(min_cos, 6),
        "batch_size": args.batch_size,
        "threads": args.threads,
        "order": "raw, pipeline, raw (mean of raws)" if args.sandwich else args.order,
        "raw_runs_s": [round(x, 3) for x in raw_runs],
        "model_load_s": round(model_load_s, 3),
        "warmup_s": round(warmup_s, 3),
        "inputs_rebuild_s": round(rebuild_s, 3),
        "raw_s": round(raw_s, 3),
        "raw_passages_per_s": round(raw_pps, 2),
        "raw_cpu_s": round(cpu["raw"], 3),
        "pipeline_s": round(pipe_s, 3),
        "pipeline_passages_per_s": round(pipe_pps, 2),
        "pipeline_cpu_s": round(cpu["pipeline"], 3),
        "ratio_by_cpu_time": round(cpu["raw"] / cpu["pipeline"], 4) if cpu["pipeline"] else None,
        "ratio_pipeline_over_raw": round(ratio, 4),
        "target": TARGET,
        "pass": ratio >= TARGET,
        "pipeline_embeddings_step_s": round(steps.get("embeddings", 0.0), 3),
        "pipeline_model_encode_s": round(inner["s"], 3),
        "pipeline_model_calls": inner["calls"],
        "pipeline_steps_s": {k: round(v, 3) for k, v in steps.items()},
        "pipeline_dagster_overhead_s": round(timing.dagster_overhead_s, 3),
        "raw_chunked_like_pipeline_s": round(chunked_s, 3) if chunked_s is not None else None,
        "tokens": padding,
        "rss_before_mib": round(rss_before, 1),
        "rss_peak_sampled_mib": round(mem.peak, 1),
        "maxrss_mib": round(_common.maxrss_mib(), 1),
        "runs": [r.to_json() for r in timing.runs],
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_text(result)
    return 0 if result["pass"] else 1


def padded_tokens(model: object, texts: list[str], batch_size: int) -> dict[str, float]:
    """Token positions the model computes (every text padded to its batch's longest), in the
    pipeline's call pattern (``texts`` in input-hash order, re-ordered longest first by character
    count as ``embed_with_cache`` does, ``batch_size`` texts a call) and in one ``encode`` call
    (which sentence-transformers also orders longest first by character count, over all texts;
    ``real`` is the count with no padding at all). A count, not a timing: no noise from other
    processes."""
    import numpy as np

    cap = int(getattr(model, "max_seq_length", 512) or 512)
    tokenizer = model.tokenizer  # type: ignore[attr-defined]
    lengths = [min(len(ids), cap) for ids in tokenizer(texts, add_special_tokens=True)["input_ids"]]

    def padded(order: list[int]) -> tuple[int, int]:
        linear = quadratic = 0
        for i in range(0, len(order), batch_size):
            batch = order[i : i + batch_size]
            longest = max(batch)
            linear += longest * len(batch)
            quadratic += longest * longest * len(batch)  # attention grows with length squared
        return linear, quadratic

    by_chars = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # stable: hash order
    pipe, pipe_q = padded([lengths[i] for i in by_chars])
    one_call = np.argsort([-len(t) for t in texts])  # SentenceTransformer.encode's own order
    raw, raw_q = padded([lengths[i] for i in one_call])
    real = sum(lengths)
    return {
        "real": real,
        "padded_pipeline_pattern": pipe,
        "padded_one_encode_call": raw,
        "ratio": round(pipe / raw, 4) if raw else 1.0,
        "attention_ratio": round(pipe_q / raw_q, 4) if raw_q else 1.0,
    }


def print_text(r: dict) -> None:  # type: ignore[type-arg]
    pipe_s = r["pipeline_s"]
    print(f"ingest benchmark: SciFact, {r['documents']} documents, {r['inputs']} distinct inputs")
    print(
        f"  threads {r['threads']} (torch + BLAS, both sides), batch size {r['batch_size']}, "
        f"order {r['order']}"
    )
    print(
        f"  inputs identical to the pipeline's embedding_inputs: {r['same_inputs']}; "
        f"pipeline embedded {r['embedded_by_pipeline']}; "
        f"min cosine(pipeline, raw) {r['min_cosine_pipeline_vs_raw']}"
    )
    print(
        f"  model load {r['model_load_s']:.2f} s (not counted on either side), "
        f"warm-up {r['warmup_s']:.2f} s"
    )
    print(
        f"  raw model.encode     {r['raw_s']:9.2f} s   {r['raw_passages_per_s']:7.2f} passages/s"
        f"   (process CPU {r['raw_cpu_s']:.1f} s)"
        + (
            f"  runs: {', '.join(f'{x:.1f}' for x in r['raw_runs_s'])} s"
            if len(r["raw_runs_s"]) > 1
            else ""
        )
    )
    print(
        f"  pipeline (sync)      {pipe_s:9.2f} s   {r['pipeline_passages_per_s']:7.2f} passages/s"
        f"   (process CPU {r['pipeline_cpu_s']:.1f} s)"
    )
    print(
        f"  ratio pipeline/raw   {r['ratio_pipeline_over_raw']:.3f}   target >= {r['target']}  "
        f"{'PASS' if r['pass'] else 'FAIL'}   (by CPU time: {r['ratio_by_cpu_time']:.3f})"
    )
    print("  inside the pipeline:")
    emb = r["pipeline_embeddings_step_s"]
    print(f"    embeddings step    {emb:9.2f} s   ({100 * emb / pipe_s:.1f}% of the sync)")
    print(
        f"    model.encode calls {r['pipeline_model_encode_s']:9.2f} s   "
        f"({r['pipeline_model_calls']} calls)"
    )
    for step, secs in sorted(r["pipeline_steps_s"].items(), key=lambda kv: -kv[1]):
        if step != "embeddings":
            print(f"    {step:<18} {secs:9.2f} s")
    print(
        f"    Dagster, outside steps {r['pipeline_dagster_overhead_s']:5.2f} s "
        f"({len(r['runs'])} runs)"
    )
    if r["raw_chunked_like_pipeline_s"] is not None:
        c = r["raw_chunked_like_pipeline_s"]
        print(
            f"  diagnose: raw encode, {r['batch_size']} texts a call in hash order (the pipeline's "
            f"pattern): {c:.2f} s ({r['inputs'] / c:.2f} passages/s, "
            f"{r['raw_s'] / c:.3f}x raw throughput)"
        )
    t = r["tokens"]
    print(
        f"  token positions computed: pipeline pattern {t['padded_pipeline_pattern']}, one "
        f"encode call {t['padded_one_encode_call']} (real {t['real']}): {t['ratio']:.3f}x "
        f"(attention term {t['attention_ratio']:.3f}x)"
    )
    print(
        f"  memory: RSS {r['rss_before_mib']:.0f} MiB before, sampled peak "
        f"{r['rss_peak_sampled_mib']:.0f} MiB, ru_maxrss {r['maxrss_mib']:.0f} MiB"
    )


if __name__ == "__main__":
    sys.exit(main())
