"""The home: one home folder, its configuration, its stores and the embedder of each profile.

Every step (``corpus_index.steps``), the lifecycle of generations and the faces (search, CLI,
API) work on a ``Home``; it holds no step logic of its own.
"""

from __future__ import annotations

import functools

import pyarrow as pa
import pyarrow.compute as pc

from corpus_index import memory
from corpus_index.cache import EmbeddingCache
from corpus_index.config import CollectionConfig, CorpusConfig, ProfileConfig, Settings
from corpus_index.dimension_probe import checked_dim, learns_dim
from corpus_index.embedders import Embedder, make_embedder
from corpus_index.embedders.weights import MEMO_NAME
from corpus_index.errors import ConfigError, DimensionProbeError
from corpus_index.index_store import GenerationStore
from corpus_index.refusal_memo import RefusalMemo
from corpus_index.registry import LIVE, Generation, GenerationSpec, open_registry
from corpus_index.shards import split_key
from corpus_index.warehouse import KeyedReader, Warehouse


class Home:
    """One home folder and its configuration."""

    def __init__(self, settings: Settings, config: CorpusConfig | None = None) -> None:
        memory.configure()
        self.settings = settings
        self.config = config or settings.load()
        self.warehouse = Warehouse(settings.warehouse)
        self.registry = open_registry(settings)
        self._store: GenerationStore | None = None
        self._dims_checked: dict[str, int] = {}  # profile -> learned dim its generations hold

    @property
    def store(self) -> GenerationStore:
        """The LanceDB generation tables, connected on first use."""
        if self._store is None:
            self._store = GenerationStore(self.settings.lance_uri)
        return self._store

    def collection(self, name: str) -> CollectionConfig:
        """The configured collection ``name`` (all of it), or, for a shard's partition key
        (``deals~03``), the view of the collection that shard holds (``CollectionConfig.owns``).

        Raises:
            ConfigError: naming the file, when no such collection, or no such shard of it, is
                configured (a partition of an earlier shard count, say).
        """
        try:
            key = split_key(name)
            found = self.config.collections[key.collection]
        except (KeyError, ValueError):
            raise ConfigError(f"{self.config.path}: no collection {name!r} is configured") from None
        if key.shard is None:
            return found
        if name not in found.partitions:
            raise ConfigError(
                f"{self.config.path}: collections.{found.name}.shards is {found.shards}: "
                f"{name!r} is not one of its partitions ({', '.join(found.partitions[:3])}, ...)"
            )
        return found.shard_view(key.shard)

    def profile(self, name: str) -> ProfileConfig:
        """The configured profile ``name``; ConfigError naming the file if there is none."""
        try:
            return self.config.profiles[name]
        except KeyError:
            raise ConfigError(f"{self.config.path}: no profile {name!r} is configured") from None

    @functools.cache  # noqa: B019 - one embedder per profile for this object's lifetime
    def embedder(self, profile: str) -> Embedder:
        """The embedder ``profile`` names, built once per home object."""
        p = self.profile(profile)
        return make_embedder(
            p.embedder,
            base_url=p.base_url,
            api_key_env=p.api_key_env,
            dimensions=p.dimensions,
            batch_size=p.batch_size,
            max_batch_tokens=p.max_batch_tokens,
            price_per_million_tokens=p.price_per_million_tokens,
            weights_digests=self.settings.home / MEMO_NAME,
        )

    def spec(self, profile: str) -> GenerationSpec:
        """The generation spec ``profile`` builds: its embedder's identity and its input rule."""
        p = self.profile(profile)
        e = self.embedder(profile)
        dim = self._dim(profile, e)
        normalized = p.normalized if p.normalized is not None else e.normalized
        return GenerationSpec(
            namespace=p.namespace,
            profile=p.name,
            backend_spec=e.backend_spec,
            model_revision=e.revision,
            dim=dim,
            normalized=normalized,
            input_format=p.input_format,
            chunking=p.chunking,
        )

    def _dim(self, profile: str, embedder: Embedder) -> int:
        """``embedder.dim``; a learned one checked against the dimensions the home's
        generations of the same model hold (``dimension_probe.checked_dim``), once a dimension
        per profile for this object's lifetime."""
        if not learns_dim(embedder) or self._dims_checked.get(profile) == embedder.dim:
            return embedder.dim
        same = [
            g
            for g in self.registry.generations()
            if g.status != "FAILED"
            and g.spec.backend_spec == embedder.backend_spec
            and g.spec.model_revision == embedder.revision
        ]
        dim = checked_dim(
            embedder,
            {g.spec.dim for g in same},
            profile=profile,
            where=str(self.config.path),
            generations=[g.id for g in same],
        )
        if same:  # with none yet, the first generation's dimension is checked when it is there
            self._dims_checked[profile] = dim
        return dim

    def embedding_cache(self, spec: GenerationSpec) -> EmbeddingCache:
        """The embedding cache of ``spec``'s model and revision; a table a home made before
        cache names were exact keeps serving the model the home's generations say it was
        built for (see :class:`EmbeddingCache`)."""
        return EmbeddingCache(
            self.settings.lance_uri,
            backend_spec=spec.backend_spec,
            revision=spec.model_revision,
            dim=spec.dim,
            claimants={
                (g.spec.backend_spec, g.spec.model_revision) for g in self.registry.generations()
            },
        )

    def refusal_memo(self, spec: GenerationSpec) -> RefusalMemo:
        """The inputs the server of ``spec``'s model refused at its dimension (see
        :mod:`corpus_index.refusal_memo`)."""
        return RefusalMemo(
            self.settings.lance_uri,
            backend_spec=spec.backend_spec,
            revision=spec.model_revision,
            dim=spec.dim,
        )

    def unmaintained(self, generation: Generation) -> str | None:
        """Why the pipeline no longer writes ``generation`` (its profile gone or building other
        vectors now, or it failed or was retired), so edits and ACL changes of its sources no
        longer reach it; None while its profile's runs write it, or while this process cannot
        build its profile's embedder to tell (a remote model's key is not set here: the runs
        that write it have it), or while its server's answer to the dimension probe contradicts
        the home's generations of the model (``DimensionProbeError``: a wrong answer tells
        nothing of them, and the next call probes again)."""
        spec, profile = generation.spec, generation.spec.profile
        if generation.status not in LIVE:
            return f"generation {generation.id} is {generation.status}"
        if profile not in self.config.profiles:
            return (
                f"generation {generation.id} was built by profile {profile!r}, which is no "
                "longer configured"
            )
        try:
            current = self.spec(profile)
        except (ConfigError, DimensionProbeError):
            # a probe of the model that contradicts its generations tells nothing about them:
            # it is forgotten, and asked again on the next call
            return None
        if current.namespace != spec.namespace or not current.same_vectors_as(spec):
            return (
                f"profile {profile!r} now builds another generation than {generation.id} "
                "(its embedder, input format or chunking changed)"
            )
        return None

    def input_formats(self) -> set[str]:
        """Every input format some profile embeds."""
        return {p.input_format for p in self.config.profiles.values()}

    def keyed(
        self, asset: str, partition: tuple[str, ...], *, columns: list[str] | None = None
    ) -> KeyedReader:
        """``Warehouse.keyed`` by ``input_hash``; a partition never written is an error naming
        its file."""
        self.require(asset, partition)
        reader = self.warehouse.keyed(asset, partition, "input_hash", columns=columns)
        if reader is None:  # removed between the check and the read
            raise FileNotFoundError(self.warehouse.path(asset, *partition))
        return reader

    def read(
        self,
        asset: str,
        partition: tuple[str, ...],
        schema: pa.Schema | None = None,
        *,
        where: pc.Expression | None = None,
        columns: list[str] | None = None,
    ) -> pa.Table:
        """Like ``Warehouse.read``, but a partition never written is an error naming its file."""
        self.require(asset, partition)
        table = self.warehouse.read(asset, partition, schema, where=where, columns=columns)
        if table is None:  # removed between the check and the read
            raise FileNotFoundError(self.warehouse.path(asset, *partition))
        return table

    def partitions_of(self, collection: str) -> tuple[str, ...]:
        """The partition keys of ``collection``: each shard's when it is sharded, else its name
        (also for a collection no longer configured, whose partition may still be there)."""
        found = self.config.collections.get(collection)
        return found.partitions if found is not None else (collection,)

    def collection_table(
        self,
        asset: str,
        collection: str,
        schema: pa.Schema | None = None,
        *,
        columns: list[str] | None = None,
    ) -> pa.Table | None:
        """``asset`` of every partition of ``collection`` (all its shards) as one table, or
        None when none was ever written."""
        parts = [
            t
            for key in self.partitions_of(collection)
            if (t := self.warehouse.read(asset, (key,), schema, columns=columns)) is not None
        ]
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts, promote_options="default")

    def require(self, asset: str, partition: tuple[str, ...]) -> None:
        """Raises FileNotFoundError, naming the file, if the partition was never written."""
        path = self.warehouse.path(asset, *partition)
        if not path.is_file():
            raise FileNotFoundError(
                f"{path}: {asset} for {'/'.join(partition)} "
                "has not been materialized yet (run `corpus sync`)"
            )
