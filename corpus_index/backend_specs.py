"""What a well-formed ``backend_spec`` is: ``st:<model>``, ``openai:<model>``, ``hash:v1-<dim>``.

Apart from the embedders (no numpy, no backend), so validating a configuration stays cheap.
"""

from __future__ import annotations

import re

HASH_SPEC = re.compile(r"^hash:v1-(\d+)$")
ST_MODELS = {"all-MiniLM-L6-v2": 384}


def validate_backend_spec(spec: str) -> str | None:
    """A description of what is wrong with ``spec``, or None if it is well formed."""
    if m := HASH_SPEC.match(spec):
        dim = int(m.group(1))
        return None if 1 <= dim <= 8192 else f"hash dimension must be 1..8192 (got {dim})"
    if spec.startswith("st:"):
        name = spec[3:]
        if name not in ST_MODELS:
            return f"unknown sentence-transformers model {name!r} (bundled: {', '.join(ST_MODELS)})"
        return None
    if spec.startswith("openai:"):
        return (
            None if spec[7:] else "openai: needs a model name, e.g. openai:text-embedding-3-small"
        )
    return f"unknown backend {spec!r} (use st:<model>, openai:<model> or hash:v1-<dim>)"
