"""Flat-blob exports of a profiles collection (seed "Embeddings"): the blob format byte for byte,
the tier rule, centroids, the blocking checks, HTTP reading, and deletion reaching every export.
One home, synced once with the hash embedder, serves the file."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pytest
import yaml
from click.testing import CliRunner

from corpus_index import flat_exports, steps
from corpus_index.cli import main
from corpus_index.compaction import compact
from corpus_index.config import Settings
from corpus_index.deletion import audit_deletion
from corpus_index.embedders import make_embedder
from corpus_index.embedders.hashing import HashEmbedder
from corpus_index.errors import ExportError
from corpus_index.export_reader import load_export, search_blob
from corpus_index.flat_blob import write_export
from corpus_index.flat_exports import EXPORT_GATES, check_exports
from corpus_index.gates import Gate
from corpus_index.home import Home
from tests.support.http_server import running_server, serve_config

SPEC = "hash:v1-32"
PEOPLE = {
    "ada-okafor": {
        "expertise.md": "# Ada Okafor\n\nGraph kernels for molecules.\n\n## Methods\n\nSpectral.\n",
        "cv.md": "# CV\n\nPhD Lagos 2008. Postdoc Zurich.\n",
        "grant--nsf.md": "Three-year award for kernel learning.\n",
    },
    "bo-lindqvist": {
        "paper_summary--tides.md": "# Tides\n\nTidal mixing drives coastal upwelling.\n",
        "web.md": "Lab homepage: join us.\n",
    },
    "cy-tanaka": {"soul.txt": "I study soil microbes because soil is alive.\n"},
}


def _write(root: Path, people: dict[str, dict[str, str]]) -> Settings:
    for slug, files in people.items():
        (root / "people" / slug).mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (root / "people" / slug / name).write_text(text)
    coll = {"kind": "profiles", "tenant": "lab", "acl_groups": ["lab"], "tier": "public"}
    config = {
        "collections": {
            "people": {**coll, "path": "people", "namespace": "people"},
            # the same folder, its restricted chunks exported nowhere
            "people-public": {
                **coll,
                "path": "people",
                "namespace": "people",
                "processing": {"exports": {"restricted": "off"}},
            },
        },
        "profiles": {
            "h": {"embedder": SPEC, "namespace": "people", "input_format": "heading-context-v1"}
        },
        "namespaces": {"people": {"eval_gate": "off"}},
    }
    (root / "corpus.yaml").write_text(yaml.safe_dump(config))
    return Settings(config_path=root / "corpus.yaml", home=root / "home")


def _sync(home: Home, collection: str) -> None:
    for step in (steps.source_manifest, steps.parsed_blocks, steps.embedding_inputs):
        step.run(home, collection)
    steps.embeddings.run(home, "h", collection, run_id="test")
    assert steps.flat_exports.run(home, "h", collection).written


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Home:
    corpus = Home(_write(tmp_path_factory.mktemp("exports"), PEOPLE))
    for collection in ("people", "people-public"):
        _sync(corpus, collection)
    return corpus


def _folder(home: Home, slug: str, tree: str = "flat", collection: str = "people") -> Path:
    return home.settings.exports / tree / "h" / collection / slug / "embeddings"


def _read_blob_per_seed(folder: Path) -> tuple[dict[str, object], list[tuple[float, ...]]]:
    """A reader written from seed §3-§4 alone: raw little-endian float32, row-major, no header."""
    index = json.loads((folder / "index.json").read_text())
    blob = (folder / str(index["file"])).read_bytes()
    count, dim = int(index["count"]), int(index["dim"])  # type: ignore[call-overload]
    assert len(blob) == count * dim * 4
    assert hashlib.sha256(blob).hexdigest() == index["sha256"]
    values = struct.unpack(f"<{count * dim}f", blob)
    return index, [values[i * dim : (i + 1) * dim] for i in range(count)]


def test_the_blob_is_headerless_little_endian_float32_byte_for_byte(home: Home) -> None:
    folder = _folder(home, "ada-okafor")
    index, rows = _read_blob_per_seed(folder)
    assert set(index) == {
        "backend_spec", "file", "dtype", "byte_order", "dim", "count", "layout", "normalized",
        "metric", "row_key", "rows", "sha256", "probe",
    }  # fmt: skip
    assert index["file"] == "hash-v1-32.bin" and index["backend_spec"] == SPEC
    assert (index["dtype"], index["byte_order"], index["layout"]) == (
        "float32",
        "little",
        "row_major",
    )
    assert (index["normalized"], index["metric"], index["row_key"]) == (
        False,
        "cosine",
        "chunk_index",
    )
    chunks = json.loads((folder / "hash-v1-32.chunks.json").read_text())
    assert [set(c) for c in chunks] == [
        {"source_type", "source_id", "chunk_index", "section", "char_count"}
    ] * len(chunks)
    assert [(c["source_id"], c["chunk_index"], c["section"]) for c in chunks] == [
        ("people/ada-okafor/expertise.md", 0, "Ada Okafor"),
        ("people/ada-okafor/expertise.md", 1, "Ada Okafor > Methods"),
    ]
    assert index["rows"] == [0, 1]
    # each row is the embedder's vector of the chunk's input text, to the last bit
    inputs = home.read("embedding_inputs", ("people",)).to_pylist()
    texts = [i["text"] for i in inputs if i["chunk_ref"].split("/")[4] == "expertise.md"]
    expected = make_embedder(SPEC).embed(texts).astype("<f4").tobytes()
    assert (folder / "hash-v1-32.bin").read_bytes() == expected
    assert rows[1] == struct.unpack("<32f", expected[128:])
    assert "Spectral" not in (folder / "hash-v1-32.chunks.json").read_text()  # no chunk text


def test_restricted_chunks_live_apart_or_nowhere(home: Home) -> None:
    public = {
        c["source_type"]
        for slug in PEOPLE
        for c in json.loads((_folder(home, slug) / "hash-v1-32.chunks.json").read_text())
    }
    assert public == {"expertise", "paper_summary", "soul"}
    restricted = _folder(home, "ada-okafor", "flat-restricted")
    assert not restricted.is_relative_to(home.settings.exports / "flat")
    chunks = json.loads((restricted / "hash-v1-32.chunks.json").read_text())
    assert [c["source_type"] for c in chunks] == ["cv", "grant"]
    assert not _folder(home, "cy-tanaka", "flat-restricted").exists()  # nothing restricted
    off = home.settings.exports / "flat-restricted" / "h" / "people-public"
    assert _folder(home, "ada-okafor", collection="people-public").is_dir() and not off.exists()


def test_centroids_are_normalized_means_over_every_chunk(home: Home) -> None:
    folder = _folder(home, "collection")
    index, rows = _read_blob_per_seed(folder)
    assert (index["normalized"], index["row_key"], index["rows"]) == (True, "slug", sorted(PEOPLE))
    assert not list(folder.glob("*.chunks.json")) and "probe" in index
    for slug, row in zip(sorted(PEOPLE), rows, strict=True):
        every = [*_read_blob_per_seed(_folder(home, slug))[1]]
        if _folder(home, slug, "flat-restricted").is_dir():
            every += _read_blob_per_seed(_folder(home, slug, "flat-restricted"))[1]
        mean = np.mean(np.array(every, dtype=np.float64), axis=0)
        assert np.allclose(row, mean / np.linalg.norm(mean), atol=1e-6)
        assert abs(np.linalg.norm(row) - 1.0) < 1e-5
    public_only = np.mean(_read_blob_per_seed(_folder(home, "ada-okafor"))[1], axis=0)
    assert not np.allclose(rows[0], public_only / np.linalg.norm(public_only), atol=1e-3)


def test_the_checks_catch_a_broken_blob_a_leak_and_a_wrong_probe(
    home: Home, tmp_path: Path
) -> None:
    tree = tmp_path / "flat"
    shutil.copytree(home.settings.exports / "flat" / "h" / "people", tree)
    tiers = {("people/ada-okafor/expertise.md", i): "public" for i in (0, 1)}
    tiers[("people/ada-okafor/cv.md", 0)] = "restricted"
    ada = tree / "ada-okafor" / "embeddings"
    for path in (tree / "bo-lindqvist", tree / "cy-tanaka", tree / "collection"):
        shutil.rmtree(path)

    inputs = {
        (r["source_id"], r["chunk_index"]): r["input_hash"]
        for rows in flat_exports._chunks(home, "h", "people", "heading-context-v1", 32).values()
        for r in rows
    }

    def failed() -> set[str]:
        gates = check_exports(
            [tree], tiers, home, "h", "people", public_root=tree, input_hashes=inputs
        )
        return {g.name for g in gates if not g.passed}

    assert failed() == set()
    blob = bytearray((ada / "hash-v1-32.bin").read_bytes())
    blob[5] ^= 0x40
    (ada / "hash-v1-32.bin").write_bytes(bytes(blob))
    assert failed() == {"exports_match_their_index"}
    chunks = json.loads((ada / "hash-v1-32.chunks.json").read_text())
    chunks[0]["source_id"], chunks[0]["chunk_index"] = "people/ada-okafor/cv.md", 0
    (ada / "hash-v1-32.chunks.json").write_text(json.dumps(chunks))
    index = json.loads((ada / "index.json").read_text())
    index["probe"]["vector"] = [-x for x in index["probe"]["vector"]]
    index["backend_spec"] = "hash:v1-32-other"
    (ada / "index.json").write_text(json.dumps(index))
    assert failed() == {
        "exports_match_their_index",
        "no_restricted_chunk_in_public_blob",
        "probe_verifies_against_own_model",
        "exports_share_generation_backend_spec",
    }


def test_an_unchanged_build_writes_nothing_and_a_touched_one_is_rebuilt(home: Home) -> None:
    again = steps.flat_exports.run(home, "h", "people")
    assert again.unchanged and not again.written and all(g.passed for g in again.gates)
    probe = next(g for g in again.gates if g.name == "probe_verifies_against_own_model")
    assert probe.metadata["recorded_at_last_build"] is True
    blob = _folder(home, "cy-tanaka") / "hash-v1-32.bin"
    blob.write_bytes(blob.read_bytes()[:-4])  # someone truncated a served file
    rebuilt = steps.flat_exports.run(home, "h", "people")
    assert rebuilt.written and not rebuilt.unchanged
    assert len(blob.read_bytes()) == 32 * 4


@pytest.fixture
def http_root(home: Home) -> Iterator[str]:
    """A real HTTP server on loopback over the exports folder, stopped by its PID."""
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1"],
        cwd=home.settings.exports,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "Serving HTTP on 127.0.0.1 port N (http://...) ..."
        port = int(line.split(" port ")[1].split()[0])
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_consumer_verifies_and_searches_over_http(home: Home, http_root: str) -> None:
    url = f"{http_root}/flat/h/people/ada-okafor/embeddings/index.json"
    result = CliRunner().invoke(main, ["export", "verify", url, "--query", "spectral", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert (report["verdict"], report["similarity"], report["count"]) == ("verified", 1.0, 2)
    assert report["hits"][0]["source_id"] == "people/ada-okafor/expertise.md"
    assert report["hits"][0]["section"] == "Ada Okafor > Methods"
    folder_url = f"{http_root}/flat/h/people/collection/embeddings/"
    assert load_export(folder_url).index["rows"] == sorted(PEOPLE)
    with pytest.raises(ExportError, match="index.json"):
        load_export(f"{http_root}/flat/h/people/nobody/embeddings/")


def test_a_key_downloads_its_own_public_export_from_corpus_serve(
    home: Home, tmp_path: Path
) -> None:
    lab, outsider, stranger = "ck_lab", "ck_lab-other-group", "ck_other-tenant"
    keys = {lab: ("lab", ["lab"]), outsider: ("lab", ["elsewhere"]), stranger: ("else", ["lab"])}
    config = tmp_path / "corpus.yaml"
    shutil.copy(home.settings.config_path, config)
    doc = yaml.safe_load(config.read_text())
    for collection in doc["collections"].values():  # the module home's sources, by full path
        collection["path"] = str(home.settings.config_path.parent / collection["path"])
    config.write_text(yaml.safe_dump(doc))
    serve_config(config, keys)
    folder = _folder(home, "ada-okafor")
    index = json.loads((folder / "index.json").read_text())
    base = "/v1/namespaces/people/exports/people/ada-okafor"
    log = tmp_path / "server.log"
    with (
        running_server(config, home.settings.home, log=log) as url,
        httpx.Client(base_url=url, timeout=60) as client,
    ):

        def get(path: str, key: str | None = lab) -> httpx.Response:
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            return client.get(path, headers=headers)

        assert get(f"{base}/index.json").json() == index
        blob = get(f"{base}/{index['file']}")
        assert blob.status_code == 200
        assert blob.content == (folder / index["file"]).read_bytes()
        chunks = get(f"{base}/{index['file'].removesuffix('.bin')}.chunks.json")
        assert chunks.status_code == 200 and len(chunks.json()) == index["count"]
        # no key, a key of the tenant without its groups, another tenant's key: nothing
        assert get(f"{base}/index.json", None).status_code == 401
        assert get(f"{base}/index.json", outsider).status_code == 404
        assert get(f"{base}/index.json", stranger).status_code == 404
        # the restricted export, and the centroids (every chunk of everyone): the key sees
        # every source they hold
        restricted = _folder(home, "ada-okafor", "flat-restricted")
        kept = get(f"{base}/{index['file']}?tree=restricted")
        assert kept.status_code == 200
        assert kept.content == (restricted / index["file"]).read_bytes()
        assert get(f"{base}/index.json?tree=restricted", outsider).status_code == 404
        centroids = "/v1/namespaces/people/exports/people/collection"
        assert get(f"{centroids}/index.json").json()["rows"] == sorted(PEOPLE)
        centroid_blob = get(f"{centroids}/{index['file']}")
        assert centroid_blob.content == (_folder(home, "collection") / index["file"]).read_bytes()
        assert get(f"{centroids}/index.json", outsider).status_code == 404
        assert get(f"{centroids}/index.json?tree=restricted").status_code == 404
        # restricted chunks exported nowhere: no restricted tree to serve
        off = "/v1/namespaces/people/exports/people-public/ada-okafor/index.json?tree=restricted"
        assert get(off).status_code == 404
        # files that are not the export's: none served
        assert get(f"{base}/..%2F..%2Fcorpus.yaml").status_code == 404
        assert (
            get(f"{centroids}/{index['file'].removesuffix('.bin')}.chunks.json").status_code == 404
        )
        # a consumer verifies it from the server with its key (the query kept for each file)
        served = f"{url}{base}/index.json?profile=h"
        verify = ["export", "verify", served, "--query", "spectral", "--json"]
        checked = CliRunner().invoke(main, verify, env={"CORPUS_API_KEY": lab})
        assert checked.exit_code == 0, checked.output
        assert json.loads(checked.output)["verdict"] == "verified"
        keyless = CliRunner().invoke(main, verify, env={"CORPUS_API_KEY": ""})
        assert keyless.exit_code == 1 and "401" in keyless.output


def test_a_tampered_blob_is_refused_and_another_model_may_not_search(
    home: Home, tmp_path: Path
) -> None:
    folder = tmp_path / "embeddings"
    shutil.copytree(_folder(home, "bo-lindqvist"), folder)
    export = load_export(str(folder))
    with pytest.raises(Exception, match="cosine across models is meaningless"):
        search_blob(export, "tides", embedder=make_embedder("hash:v1-16"))
    (folder / "hash-v1-32.bin").write_bytes((folder / "hash-v1-32.bin").read_bytes()[:-4])
    result = CliRunner().invoke(main, ["export", "verify", str(folder)])
    assert result.exit_code == 1
    assert "count*dim*4 = 128 bytes" in result.output and "hash-v1-32.bin" in result.output


def test_change_and_deletion_reach_every_export(tmp_path: Path) -> None:
    people = {k: dict(v) for k, v in PEOPLE.items()}
    settings = _write(tmp_path, people)
    corpus = Home(settings)
    _sync(corpus, "people")
    old_chunks = (_folder(corpus, "bo-lindqvist") / "hash-v1-32.chunks.json").read_bytes()
    shutil.rmtree(tmp_path / "people" / "bo-lindqvist")  # a researcher leaves
    (tmp_path / "people" / "ada-okafor" / "cv.md").unlink()  # a restricted source goes
    (tmp_path / "people" / "cy-tanaka" / "soul.txt").write_text("I study fungi now.\n")
    _sync(corpus, "people")
    flat = corpus.settings.exports / "flat" / "h" / "people"
    assert sorted(p.name for p in flat.iterdir()) == ["ada-okafor", "collection", "cy-tanaka"]
    assert not _folder(corpus, "bo-lindqvist", "flat-restricted").exists()
    assert load_export(str(_folder(corpus, "collection"))).index["rows"] == [
        "ada-okafor",
        "cy-tanaka",
    ]
    restricted = json.loads(
        (_folder(corpus, "ada-okafor", "flat-restricted") / "hash-v1-32.chunks.json").read_text()
    )
    assert [c["source_type"] for c in restricted] == ["grant"]
    changed = load_export(str(_folder(corpus, "cy-tanaka")))
    assert (
        changed.vectors.tobytes()
        == make_embedder(SPEC).embed(["cy-tanaka soul\nI study fungi now."]).astype("<f4").tobytes()
    )
    compact(corpus)  # purges the cache entries only the deleted sources used
    for source in ("people/bo-lindqvist/web.md", "people/ada-okafor/cv.md"):
        audit = audit_deletion(corpus, source)
        assert audit["clean"], audit["remaining"]
    # an export left behind would be found: the audit reads the exports too
    stale = flat / "bo-lindqvist" / "embeddings"
    stale.mkdir(parents=True)
    (stale / "hash-v1-32.chunks.json").write_bytes(old_chunks)
    audit = audit_deletion(corpus, "people/bo-lindqvist/paper_summary--tides.md")
    assert not audit["clean"]
    assert any("bo-lindqvist" in str(r.get("path", "")) for r in audit["remaining"])


def test_an_unchanged_build_whose_probe_was_edited_is_rebuilt(home: Home) -> None:
    index_path = _folder(home, "ada-okafor") / "index.json"
    index = json.loads(index_path.read_text())
    index["probe"]["vector"] = [-x for x in index["probe"]["vector"]]
    index_path.write_text(json.dumps(index, indent=1))  # the blob and its sha256 untouched
    rebuilt = steps.flat_exports.run(home, "h", "people")
    assert rebuilt.written and not rebuilt.unchanged  # not the last build's probe result
    assert load_export(str(index_path.parent)).index["probe"]["vector"][0] == pytest.approx(
        -index["probe"]["vector"][0]
    )


def test_a_consumer_refuses_rows_the_format_does_not_allow(home: Home, tmp_path: Path) -> None:
    def damaged(change: str) -> Path:
        folder = tmp_path / change / "embeddings"
        shutil.copytree(_folder(home, "ada-okafor"), folder)
        index = json.loads((folder / "index.json").read_text())
        chunks_path = folder / "hash-v1-32.chunks.json"
        chunks = json.loads(chunks_path.read_text())
        if change == "no-probe":
            del index["probe"]
        elif change == "reversed-chunks":
            chunks.reverse()
        elif change == "chunks-not-entries":
            chunks = ["a", "b"]
        elif change == "not-unit":
            blob = np.frombuffer((folder / index["file"]).read_bytes(), "<f4").reshape(2, 32)
            index["normalized"] = True
            data = (blob * 3).astype("<f4").tobytes()
            (folder / index["file"]).write_bytes(data)
            index["sha256"] = hashlib.sha256(data).hexdigest()
        (folder / "index.json").write_text(json.dumps(index))
        chunks_path.write_text(json.dumps(chunks))
        return folder

    expected = {
        "no-probe": "has no probe",
        "reversed-chunks": "chunk indexes differ",
        "chunks-not-entries": "lacks a field",
        "not-unit": "not of unit length",
    }
    for change, message in expected.items():
        with pytest.raises(ExportError, match=message):
            load_export(str(damaged(change)))
    # centroids say they are unit length: a blob written big-endian is not, read as the format
    swapped = tmp_path / "centroids" / "embeddings"
    shutil.copytree(_folder(home, "collection"), swapped)
    index = json.loads((swapped / "index.json").read_text())
    data = np.frombuffer((swapped / index["file"]).read_bytes(), "<f4").astype(">f4").tobytes()
    (swapped / index["file"]).write_bytes(data)
    index["sha256"] = hashlib.sha256(data).hexdigest()
    (swapped / "index.json").write_text(json.dumps(index))
    with pytest.raises(ExportError, match="not of unit length|not finite"):
        load_export(str(swapped))
    reversed_chunks = str(tmp_path / "reversed-chunks" / "embeddings")
    result = CliRunner().invoke(main, ["export", "verify", reversed_chunks])
    assert result.exit_code == 1 and "chunk indexes differ" in result.output


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"probe": {"text": "p", "vector": ["0.1"] * 16}}, "'probe' must be {text, vector} of"),
        ({"probe": {"text": "p", "vector": [[0.1]] * 16}}, "'probe' must be {text, vector} of"),
        ({"probe": {"text": "p", "vector": [10**400] * 16}}, "'probe' must be {text, vector} of"),
        ({"probe": {"text": "p", "vector": [None] * 16}}, "'probe' must be {text, vector} of"),
        ({"dim": -3, "count": 0, "rows": []}, "'dim' is -3; it must be from 1 to 65536"),
        ({"dim": 10**30, "count": 0, "rows": []}, "'dim' is 1000000000000000000000000000000"),
        ({"dim": True}, "'dim' is True"),
        ({"count": -1}, "'count' is -1; it must be of at least 0"),
    ],
)
def test_a_consumer_names_an_index_json_of_the_wrong_shape(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    # each was a ValueError or a TypeError out of numpy (a traceback from `corpus export
    # verify`), or, for a probe of nulls, named as a fault of the chunks file
    e = make_embedder("hash:v1-16")
    folder = tmp_path / "embeddings"
    write_export(
        folder,
        backend_spec=e.backend_spec,
        vectors=e.embed(["a", "b"]),
        rows=["a", "b"],
        row_key="slug",
        normalized=False,
        probe={"text": "p", "vector": [float(x) for x in e.embed(["p"])[0]]},
    )
    index = json.loads((folder / "index.json").read_text())
    (folder / "index.json").write_text(json.dumps({**index, **change}))
    with pytest.raises(ExportError, match=re.escape(f"{folder / 'index.json'}: index.json")):
        load_export(str(folder))
    with pytest.raises(ExportError, match=re.escape(message)):
        load_export(str(folder))
    result = CliRunner().invoke(main, ["export", "verify", str(folder)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert message in result.output


def test_the_probe_check_fails_when_the_rows_are_not_the_models_vectors(tmp_path: Path) -> None:
    corpus = Home(_write(tmp_path, PEOPLE))
    for step in (steps.source_manifest, steps.parsed_blocks, steps.embedding_inputs):
        step.run(corpus, "people")
    assert steps.embeddings.run(corpus, "h", "people", run_id="test").passed
    # the partition's vectors replaced by unit vectors of no model, its record of the model
    # kept (what a stale cache or a bad copy leaves)
    key = ("embeddings", ("h", "people"))
    own = corpus.warehouse.read(*key)
    assert own is not None
    foreign = np.random.default_rng(7).normal(size=(own.num_rows, 32)).astype(np.float32)
    foreign /= np.linalg.norm(foreign, axis=1, keepdims=True)
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(foreign.ravel(), pa.float32()), 32)
    corpus.warehouse.write(
        *key,
        own.set_column(own.schema.get_field_index("vector"), own.schema.field("vector"), vectors),
    )
    out = steps.flat_exports.run(corpus, "h", "people")
    (gate,) = (g for g in out.gates if g.name == "probe_verifies_against_own_model")
    # the probe itself verifies (the model embeds it both times); the rows do not
    assert not gate.passed and not out.written
    assert "below_threshold" not in gate.metadata
    exported = out.public_rows + out.restricted_rows
    assert gate.metadata["rows_sampled"] == min(exported, flat_exports.SAMPLED_ROWS) > 1
    assert gate.metadata["min_row_cosine"] < 0.9 and gate.metadata["rows_below_threshold"]
    # the model's own vectors: the same rows verify
    corpus.warehouse.write(*key, own)
    again = steps.flat_exports.run(corpus, "h", "people")
    (gate,) = (g for g in again.gates if g.name == "probe_verifies_against_own_model")
    assert again.written and gate.passed and gate.metadata["min_row_cosine"] >= 0.99


def test_a_sample_of_rows_holds_the_first_and_the_last() -> None:
    assert flat_exports._sample(3) == [0, 1, 2]
    picked = flat_exports._sample(100)
    assert len(picked) == flat_exports.SAMPLED_ROWS and (picked[0], picked[-1]) == (0, 99)
    assert flat_exports._sample(100) == picked and flat_exports._sample(0) == []


class OtherModel(HashEmbedder):
    """The profile's model after a switch to another model of the same dimension."""

    revision = "v2"

    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.backend_spec = f"other:model-{dim}"

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return super().embed([t[::-1] for t in texts])


def test_exports_of_vectors_from_another_model_fail_the_backend_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = Home(_write(tmp_path, PEOPLE))
    _sync(corpus, "people")  # hash:v1-32 vectors, exported
    other = OtherModel(32)
    monkeypatch.setattr(corpus, "embedder", lambda _profile: other)
    # the profile now names other:model-32; its embeddings partition still holds (and
    # records) the old model's vectors, which the exports would take
    out = steps.flat_exports.run(corpus, "h", "people")
    (gate,) = (g for g in out.gates if g.name == "exports_share_generation_backend_spec")
    assert not gate.passed and not out.written
    assert gate.metadata["found"] == ["other:model-32"]  # index.json says the new model
    assert (gate.metadata["revision"], gate.metadata["vectors_from"]) == ("v2", "hash:v1-32 v1 32")
    index = json.loads((_folder(corpus, "ada-okafor") / "index.json").read_text())
    assert index["backend_spec"] == SPEC  # the last good exports stay


def test_a_consumer_refuses_a_chunks_file_whose_sources_are_swapped(tmp_path: Path) -> None:
    e = make_embedder("hash:v1-16")
    texts = {"a.md": "graph kernels for molecules", "b.md": "tidal mixing drives upwelling"}
    chunks = [
        {"source_type": "expertise", "source_id": s, "chunk_index": 0, "section": None,
         "char_count": len(t)}
        for s, t in texts.items()
    ]  # fmt: skip
    folder = tmp_path / "embeddings"
    options: dict[str, Any] = {
        "backend_spec": e.backend_spec,
        "vectors": e.embed(list(texts.values())),
        "rows": [0, 0],
        "row_key": "chunk_index",
        "normalized": False,
        "probe": {"text": "p", "vector": [float(x) for x in e.embed(["p"])[0]]},
    }
    write_export(folder, **options, chunks=chunks)
    hits = search_blob(load_export(str(folder)), "tidal upwelling", embedder=e)
    assert hits[0].source_id == "b.md"
    # index.json's rows (0, 0) cannot tell the two apart: only the order of the chunks file
    # ties a row to its source, so any other order than the writer's is refused
    chunks_file = folder / "hash-v1-16.chunks.json"
    chunks_file.write_text(json.dumps(chunks[::-1]))
    with pytest.raises(ExportError, match=r"hash-v1-16.chunks.json: entry 1 \(a.md#0\) comes"):
        load_export(str(folder))
    chunks_file.write_text(json.dumps([chunks[0], chunks[0]]))
    with pytest.raises(ExportError, match=r"entry 1 \(a.md#0\) repeats entry 0"):
        load_export(str(folder))
    # nor is such an export written
    with pytest.raises(ExportError, match="comes before entry 0"):
        write_export(tmp_path / "unordered", **options, chunks=chunks[::-1])


def test_a_killed_build_leaves_nothing_the_next_one_keeps(tmp_path: Path) -> None:
    corpus = Home(_write(tmp_path, PEOPLE))
    _sync(corpus, "people")
    profile = corpus.settings.exports / "flat" / "h"
    # what a build killed between its staging and its swap leaves
    shutil.copytree(profile / "people", profile / ".people.0badc0de")
    shutil.copytree(profile / "people", profile / ".people.old-0badc0de")
    shutil.rmtree(tmp_path / "people" / "cy-tanaka")  # the researcher leaves
    steps.source_manifest.run(corpus, "people")  # the deletion rebuilds the exports
    assert sorted(p.name for p in profile.iterdir() if p.is_dir()) == ["people"]
    compact(corpus)  # the cache entries only the deleted source used
    audit = audit_deletion(corpus, "people/cy-tanaka/soul.txt")
    assert audit["clean"], audit["remaining"]
    # a staging folder holding the researcher is found by the audit, not taken for clean
    shutil.copytree(profile / "people", profile / ".people.0badc0de")
    shutil.copytree(profile / "people" / "ada-okafor", profile / ".people.0badc0de" / "cy-tanaka")
    remaining = audit_deletion(corpus, "people/cy-tanaka/soul.txt")["remaining"]
    assert {r["match"] for r in remaining} == {"researcher folder"}


def test_a_deletion_removes_a_researchers_centroid_and_unmaintained_exports(
    tmp_path: Path,
) -> None:
    settings = _write(tmp_path, PEOPLE)
    corpus = Home(settings)
    _sync(corpus, "people")
    centroids = _folder(corpus, "collection")
    kept = tmp_path / "centroids-before"
    shutil.copytree(centroids, kept)
    # the profile is removed from the config (the end of a migration): its exports stay
    doc = yaml.safe_load(settings.config_path.read_text())
    doc["profiles"]["h2"] = {**doc["profiles"]["h"], "embedder": "hash:v1-16"}
    del doc["profiles"]["h"]
    settings.config_path.write_text(yaml.safe_dump(doc))
    corpus = Home(settings)
    old = corpus.settings.exports / "flat" / "h" / "people"
    assert (old / "cy-tanaka").is_dir()
    shutil.rmtree(tmp_path / "people" / "cy-tanaka")
    steps.source_manifest.run(corpus, "people")
    assert (
        not old.exists()
        and not (corpus.settings.exports / "flat-restricted" / "h" / "people").exists()
    )
    compact(corpus)  # the cache entries only the deleted source used
    audit = audit_deletion(corpus, "people/cy-tanaka/soul.txt")
    assert audit["clean"], audit["remaining"]
    # a centroid row left behind is found: it averages the deleted researcher's chunks
    centroids.parent.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(kept, old / "collection" / "embeddings")
    remaining = audit_deletion(corpus, "people/cy-tanaka/soul.txt")["remaining"]
    assert [r["match"] for r in remaining] == ["centroid row"]


def test_an_empty_export_is_served_only_to_a_key_that_sees_the_researcher(
    tmp_path: Path,
) -> None:
    settings = _write(tmp_path, {**PEOPLE, "dee-rivera": {"cv.md": "# CV\n\nOnly a CV.\n"}})
    corpus = Home(settings)
    _sync(corpus, "people")
    empty = json.loads((_folder(corpus, "dee-rivera") / "index.json").read_text())
    assert empty["count"] == 0
    lab, outsider = "ck_lab", "ck_lab-other-group"
    serve_config(settings.config_path, {lab: ("lab", ["lab"]), outsider: ("lab", ["elsewhere"])})
    path = "/v1/namespaces/people/exports/people/dee-rivera/index.json"
    with (
        running_server(settings.config_path, settings.home, log=tmp_path / "server.log") as url,
        httpx.Client(base_url=url, timeout=60) as client,
    ):
        seen = client.get(path, headers={"Authorization": f"Bearer {lab}"})
        assert seen.status_code == 200 and seen.json()["count"] == 0
        hidden = client.get(path, headers={"Authorization": f"Bearer {outsider}"})
        assert hidden.status_code == 404


def test_a_key_that_may_not_see_one_source_gets_no_export_or_centroid_holding_it(
    tmp_path: Path,
) -> None:
    """Eve's CV is for the hr group alone: a key of the lab group gets neither her restricted
    export nor the centroids (her row mixes the CV in), yet still Ada's restricted export;
    a key of both groups gets all of them."""
    eve = {"cv.md": "---\nacl: [hr]\n---\n# CV\n\nPayroll history.\n", "expertise.md": "Audits.\n"}
    settings = _write(tmp_path, {**PEOPLE, "eve-stone": eve})
    doc = yaml.safe_load(settings.config_path.read_text())
    doc["collections"]["people"]["acl_groups"] = ["lab", "hr"]
    settings.config_path.write_text(yaml.safe_dump(doc))
    corpus = Home(settings)
    _sync(corpus, "people")
    lab, both = "ck_lab", "ck_both"
    serve_config(settings.config_path, {lab: ("lab", ["lab"]), both: ("lab", ["lab", "hr"])})
    base = "/v1/namespaces/people/exports/people"
    with (
        running_server(settings.config_path, settings.home, log=tmp_path / "server.log") as url,
        httpx.Client(base_url=url, timeout=60) as client,
    ):

        def status(path: str, key: str) -> int:
            return client.get(path, headers={"Authorization": f"Bearer {key}"}).status_code

        eve_cv = f"{base}/eve-stone/index.json?tree=restricted"
        ada_cv = f"{base}/ada-okafor/index.json?tree=restricted"
        centroids = f"{base}/collection/index.json"
        assert [status(p, lab) for p in (eve_cv, ada_cv, centroids)] == [404, 200, 404]
        assert [status(p, both) for p in (eve_cv, ada_cv, centroids)] == [200, 200, 200]
        # her public export holds only what the lab may see
        assert status(f"{base}/eve-stone/index.json", lab) == 200


def test_a_deletion_whose_rebuild_fails_its_checks_removes_the_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last good exports may hold what was deleted: when the rebuild after a deletion
    fails its checks (here made to fail), the trees are removed, not left serving it."""
    corpus = Home(_write(tmp_path, PEOPLE))
    _sync(corpus, "people")
    public = corpus.settings.exports / "flat" / "h" / "people"
    assert (public / "cy-tanaka").is_dir()
    failing = Gate(EXPORT_GATES[0][0], False, "made to fail by the test")
    monkeypatch.setattr(flat_exports, "check_exports", lambda *_a, **_k: [failing])
    shutil.rmtree(tmp_path / "people" / "cy-tanaka")  # the researcher leaves
    steps.source_manifest.run(corpus, "people")  # the deletion rebuilds the exports
    assert not public.exists()
    assert not (corpus.settings.exports / "flat-restricted" / "h" / "people").exists()
    monkeypatch.undo()
    compact(corpus)  # the cache entries only the deleted source used
    audit = audit_deletion(corpus, "people/cy-tanaka/soul.txt")
    assert audit["clean"], audit["remaining"]
