"""The dimension probe checked against the home: a model whose vector length is learned from
its server's answer (an ``openai:`` model with no ``dimensions``) must answer with the length
the home's generations of that model already hold.

One replica of a load-balanced server serving another model would otherwise give a process
another dimension for the profile: a sync would open a generation of that dimension beside the
right one, and a search process would judge the serving generation not maintained. A probe that
contradicts the home is asked again; a contradiction is refused either way, since a server that
answers with two lengths cannot be trusted with a new generation, and a model that changed
under the same name must be named differently (or given ``dimensions``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from corpus_index.embedders.base import Embedder, LearnsDim
from corpus_index.errors import DimensionProbeError

PROBE_ATTEMPTS = 3  # answers asked for, the first included, before a contradiction is refused


def learns_dim(embedder: Embedder) -> bool:
    """Whether ``embedder``'s dimension is learned from its server's answers."""
    return isinstance(embedder, LearnsDim) and embedder.dim_learned


def forget_learned_dim(embedder: Embedder) -> None:
    """Forget ``embedder``'s learned dimension, if it has one, so it is probed again."""
    if isinstance(embedder, LearnsDim):
        embedder.forget_dim()


def checked_dim(
    embedder: Embedder,
    held: Collection[int],
    *,
    profile: str,
    where: str,
    generations: Sequence[str],
) -> int:
    """``embedder.dim``, checked against the dimensions ``held`` by the home's generations of
    the same model (backend_spec and revision).

    A configured or known dimension, a model the home holds no generation of, or a learned one
    among ``held`` is returned as it is. Otherwise the server is probed again, up to
    ``PROBE_ATTEMPTS`` answers in all, and the contradiction is refused; the learned dimension
    is forgotten, so the next read probes again.

    Args:
        embedder: the profile's embedder.
        held: the dimensions the home's generations of its model hold.
        profile: the profile's name, for the message.
        where: the configuration file, for the message.
        generations: the ids of those generations, for the message.

    Raises:
        DimensionProbeError: the learned dimension is not one the home's generations hold.
    """
    dim = embedder.dim
    if not held or dim in held or not learns_dim(embedder):
        return dim
    seen = [dim]
    for _ in range(PROBE_ATTEMPTS - 1):
        forget_learned_dim(embedder)
        seen.append(embedder.dim)
    forget_learned_dim(embedder)
    holds = " or ".join(str(d) for d in sorted(held))
    answers = ", ".join(str(d) for d in seen)
    if len(set(seen)) > 1:
        why = (
            f"its server answered the dimension probe with vectors of {answers} dimensions in "
            f"{len(seen)} requests: one of its replicas serves another model"
        )
    else:
        why = (
            f"its server answered the dimension probe with {dim}-dimensional vectors "
            f"{len(seen)} times in a row, another model than the one that built them"
        )
    setting = f"`dimensions: {holds}`" if len(held) == 1 else "`dimensions`"
    raise DimensionProbeError(
        f"{where}: profile {profile!r} ({embedder.backend_spec}): generations "
        f"{', '.join(generations)} of this model hold {holds}-dimensional vectors, but {why}; "
        "no generation is opened and the ones there keep serving. Fix the server and run "
        f"again, or set {setting} in the profile, so that every answer is checked against it "
        "(a new backend_spec: the next sync builds a new generation); a model that changed "
        "under the same name needs another name in the profile's embedder, or `dimensions`"
    )
