"""The process defaults every entry point sets first (:func:`configure_environment`), seen
from a process of their own: what they are for, shown happening."""

from __future__ import annotations

import os
import subprocess
import sys

# a vector index over fewer rows than its partitions want: LanceDB logs a warning as it builds
_SMALL_INDEX = """
import sys, tempfile
from corpus_index.environment import configure_environment
if sys.argv[1] == "configured":
    configure_environment()
import lancedb, numpy as np, pyarrow as pa
v = np.random.default_rng(0).random((600, 8), dtype=np.float32)
vectors = pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), 8)
db = lancedb.connect(tempfile.mkdtemp())
db.create_table("t", pa.table({"vector": vectors})).create_index(
    metric="cosine", num_partitions=64, num_sub_vectors=2
)
"""


def test_a_process_configured_first_builds_an_index_without_lancedbs_warnings() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANCE_", "LANCEDB_"))}

    def stderr(how: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", _SMALL_INDEX, how],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return done.stderr

    assert "WARN" in stderr("bare")  # the warning the defaults silence is there without them
    assert "WARN" not in stderr("configured")
