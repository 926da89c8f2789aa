"""``corpus plan-migration PROFILE``: what backfilling a profile would cost, before it runs.

Reads the parsed blocks already in the warehouse, derives the profile's canonical inputs in
memory (nothing is written), and asks the profile's embedding cache which input hashes it
already holds. Tokens are counted with the model's own tokenizer where one is at hand (tiktoken
for OpenAI models, the local model's ``tokenizer.json``), else estimated at 4 characters each.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

from corpus_index import tokens
from corpus_index.embedding import build_inputs
from corpus_index.group_records import GROUP_SCHEMA, group_inputs
from corpus_index.home import Home
from corpus_index.records import BLOCK_SCHEMA


@dataclass(slots=True)
class CollectionPlan:
    """One collection's inputs in the profile's format, counted as if it were the only one:
    an input it shares with another collection (a boilerplate section) is in both one's
    ``to_embed`` and ``tokens_to_embed``, though the backfill embeds it once (the cache is
    shared); the plan's totals count it once."""

    collection: str
    inputs: int = 0
    distinct_inputs: int = 0
    cache_hits: int = 0
    to_embed: int = 0
    tokens_to_embed: int = 0
    ingested: bool = True


@dataclass(slots=True)
class MigrationPlan:
    """The estimate for one profile: each collection's, and the totals over the distinct
    inputs of all of them (what the backfill embeds, and what it costs)."""

    profile: str
    namespace: str
    backend_spec: str
    model_revision: str
    dim: int
    input_format: str
    existing_generation: str | None
    active_generation: str | None
    token_counter: str
    price_per_million_tokens: float | None
    collections: list[CollectionPlan] = field(default_factory=list)
    # the totals, each distinct input counted once however many collections hold it
    inputs: int = 0
    cache_hits: int = 0
    to_embed: int = 0
    tokens_to_embed: int = 0

    @property
    def shared_inputs(self) -> int:
        """How many more inputs the collections' rows count than the totals: those in more
        than one collection, counted in each one's row."""
        return sum(c.distinct_inputs for c in self.collections) - self.inputs

    @property
    def cost_usd(self) -> float | None:
        if self.price_per_million_tokens is None:
            return None
        return round(self.tokens_to_embed * self.price_per_million_tokens / 1e6, 10)

    def to_json(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "namespace": self.namespace,
            "backend_spec": self.backend_spec,
            "model_revision": self.model_revision,
            "dim": self.dim,
            "input_format": self.input_format,
            "existing_generation": self.existing_generation,
            "active_generation": self.active_generation,
            "inputs": self.inputs,
            "cache_hits": self.cache_hits,
            "to_embed": self.to_embed,
            "tokens_to_embed": self.tokens_to_embed,
            "shared_inputs": self.shared_inputs,
            "token_counter": self.token_counter,
            "price_per_million_tokens": self.price_per_million_tokens,
            "cost_usd": self.cost_usd,
            "collections": [asdict(c) for c in self.collections],
        }


def token_counter(corpus: Home, profile: str) -> tuple[Callable[[str], int], str]:
    """The best token counter available offline for ``profile``'s model, and its name."""
    return tokens.token_counter(corpus.profile(profile).embedder)


def plan_migration(corpus: Home, profile: str) -> MigrationPlan:
    """Estimate inputs, cache hits, tokens and cost of building ``profile``'s generation."""
    p = corpus.profile(profile)
    spec = corpus.spec(profile)
    live = corpus.registry.live_generation(profile)
    active = corpus.registry.active(p.namespace)
    count, counter_name = token_counter(corpus, profile)
    plan = MigrationPlan(
        profile=profile,
        namespace=p.namespace,
        backend_spec=spec.backend_spec,
        model_revision=spec.model_revision,
        dim=spec.dim,
        input_format=p.input_format,
        existing_generation=live.id
        if live is not None and live.spec.same_vectors_as(spec)
        else None,
        active_generation=active.id if active is not None else None,
        token_counter=counter_name,
        price_per_million_tokens=p.price_per_million_tokens,
    )
    cache = corpus.embedding_cache(spec)
    # every collection's distinct inputs, and the tokens of those the cache lacks: the
    # backfill embeds an input once, whichever collections hold it
    seen: set[str] = set()
    missing: dict[str, int] = {}
    for c in corpus.config.collections_in(p.namespace):
        if not corpus.config.profile_covers(profile, c.name):
            continue
        entry = CollectionPlan(collection=c.name)
        plan.collections.append(entry)
        blocks = corpus.collection_table("parsed_blocks", c.name, BLOCK_SCHEMA)
        if blocks is None:
            entry.ingested = False
            continue
        inputs = build_inputs(
            blocks, sections=corpus.config.sections, input_formats={p.input_format}
        )
        # a grouped collection's groups are embedded beside its units, under their own format
        groups = corpus.warehouse.read("linked_groups", (c.name,), GROUP_SCHEMA)
        if groups is not None and groups.num_rows:
            inputs = pa.concat_tables([inputs, group_inputs(groups).cast(inputs.schema)])
        texts = dict(zip(inputs["input_hash"].to_pylist(), inputs["text"].to_pylist(), strict=True))
        entry.inputs = inputs.num_rows
        entry.distinct_inputs = len(texts)
        cached = set(cache.lookup(list(texts)))
        entry.cache_hits = len(cached)
        for h in texts.keys() - cached:
            if h not in missing:
                missing[h] = count(texts[h])
            entry.to_embed += 1
            entry.tokens_to_embed += missing[h]
        seen.update(texts)
    plan.inputs = len(seen)
    plan.to_embed = len(missing)
    plan.cache_hits = plan.inputs - plan.to_embed
    plan.tokens_to_embed = sum(missing.values())
    return plan
