"""The Parquet warehouse: one file per asset and partition, written atomically.

Vector columns (fixed-size lists of float32) are stored packed, one fixed-size binary value of
``4 * dim`` little-endian bytes per row, and unpacked on read: Parquet's nested-list encoding
makes a 40,000 x 384 column take ~0.4 s to write and to read, the packed form a tenth of that.
The packed field carries its dimension in its metadata, so any Parquet reader can unpack it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from corpus_index.errors import DamagedWarehouseError
from corpus_index.held_locks import confirm_held
from corpus_index.storage import Location

PACKED_DIM_KEY = b"corpus_index.packed_float32_dim"
# rows per Parquet row group: a filtered read holds one group at a time, not the partition
ROW_GROUP_ROWS = 8192
# LZ4: the warehouse is rewritten by every sync that changes a partition, and LZ4 writes and
# reads a partition in roughly 60% of zstd's time, for twice its size (at 10,000 deals, 30 MiB
# against 16 MiB of warehouse, beside 140 MiB of LanceDB tables)
COMPRESSION = "lz4"
# no dictionary pages: most columns are ids, hashes and texts that rarely repeat, where
# Parquet builds a dictionary only to fall back from it, and LZ4 already packs the few that
# repeat (a tenant, a type). At 50,000 messages the ``linked_groups`` step's nine partitions
# were written in 0.29 s without against 0.44 s with, a tenth larger (38 MB against 35).
USE_DICTIONARY = False
# partitions Warehouse.read_cached keeps in memory (whole columns of small per-query tables)
CACHED_PARTITIONS = 32

T = TypeVar("T")


class Warehouse:
    """Parquet files under ``root/<asset>/<partition...>.parquet`` (a local folder or an
    object-store prefix, see ``corpus_index.storage``)."""

    def __init__(self, root: Location | Path | str) -> None:
        self.root = Location.of(root)
        self._cache: dict[tuple[Any, ...], tuple[Any, pa.Table]] = {}
        self._cache_lock = threading.Lock()

    def path(self, asset: str, *partition: str) -> Location:
        if not partition:
            return self.root / asset / "data.parquet"
        *dirs, last = partition
        return self.root.joinpath(asset, *dirs, f"{last}.parquet")

    def write(self, asset: str, partition: tuple[str, ...], table: pa.Table) -> Location:
        """Replace one partition; readers see the old file or the new one, never half of either."""
        return self.stage(asset, partition, table).publish()

    def stage(self, asset: str, partition: tuple[str, ...], table: pa.Table) -> StagedPartition:
        """Write one partition's new table beside its file, under a name no reader looks at:
        readers see the old file (or none) until :meth:`StagedPartition.publish` puts the new
        one in its place, atomically; :meth:`StagedPartition.discard` removes it instead. A
        write that fails leaves nothing behind."""
        with self._staging(asset, partition, table.schema) as (out, staged):
            out.write(table)
        return staged

    @contextlib.contextmanager
    def writer(
        self, asset: str, partition: tuple[str, ...], schema: pa.Schema
    ) -> Iterator[PartitionWriter]:
        """Write one partition piece by piece; it replaces the old file atomically when the
        block exits without an error and ``commit()`` was called, else the old file stays."""
        with self._staging(asset, partition, schema) as (out, staged):
            yield out
        if out.committed:
            staged.publish()
        else:
            staged.discard()

    @contextlib.contextmanager
    def _staging(
        self, asset: str, partition: tuple[str, ...], schema: pa.Schema
    ) -> Iterator[tuple[PartitionWriter, StagedPartition]]:
        """A new file for one partition, beside its file, written through the writer the
        block is given and closed when it ends; removed when the block fails."""
        path = self.path(asset, *partition)
        path.parent.mkdir()
        staged = StagedPartition(path.temp_sibling(), path)
        out = PartitionWriter(staged.temp, schema)
        try:
            yield out, staged
            out.close()
        except BaseException:
            with contextlib.suppress(Exception):
                out.close()
            staged.discard()
            raise

    def read(
        self,
        asset: str,
        partition: tuple[str, ...],
        schema: pa.Schema | None = None,
        *,
        where: pc.Expression | None = None,
        columns: list[str] | None = None,
    ) -> pa.Table | None:
        """The partition's table (only the rows matching ``where``; only ``columns`` if given),
        or None if it was never written.

        A filtered read holds one row group and the rows kept so far, never the whole file, and
        decodes only the row groups whose statistics do not rule ``where`` out.
        """
        path = self.path(asset, *partition)
        if not path.is_file():
            return None
        with damage(asset, path):
            return self._read(path, schema, where=where, columns=columns)

    def read_cached(
        self,
        asset: str,
        partition: tuple[str, ...],
        *,
        columns: list[str],
        where: pc.Expression | None = None,
    ) -> pa.Table | None:
        """As :meth:`read`, from ``columns`` of the whole partition kept in memory while its
        file is unchanged (same size and time of last write; a partition is replaced whole).

        For the small tables a search reads on every query (group members, identity mentions
        and names): the file is decoded once per change instead of once per query, and
        ``where`` is applied in memory. The last :data:`CACHED_PARTITIONS` are kept.
        """
        path = self.path(asset, *partition)
        state = path.file_stat()
        if state is None:
            return None
        key = (asset, partition, tuple(columns))
        with self._cache_lock:
            hit = self._cache.get(key)
        if hit is not None and hit[0] == state:
            table = hit[1]
        else:
            with damage(asset, path):
                table = self._read(path, None, where=None, columns=columns)
            with self._cache_lock:
                self._cache[key] = (state, table)
                while len(self._cache) > CACHED_PARTITIONS:
                    self._cache.pop(next(iter(self._cache)))
        return table if where is None else table.filter(where)

    def _read(
        self,
        path: Location,
        schema: pa.Schema | None,
        *,
        where: pc.Expression | None,
        columns: list[str] | None,
    ) -> pa.Table:
        if where is None:
            table = pq.read_table(path.path, columns=columns, filesystem=path.fs)
        else:
            # row groups whose statistics rule ``where`` out are skipped undecoded (partitions
            # in doc_id order: a few sources' rows sit in a row group or two); one row group
            # is decoded at a time, on this thread
            table = ds.dataset(path.path, format="parquet", filesystem=path.fs).to_table(
                columns=columns,
                filter=where,
                batch_size=ROW_GROUP_ROWS,
                batch_readahead=1,
                fragment_readahead=1,
                use_threads=False,
            )
        table = unpack_vectors(table)
        return table.cast(schema) if schema is not None else table

    def batches(
        self,
        asset: str,
        partition: tuple[str, ...],
        schema: pa.Schema | None = None,
        *,
        columns: list[str] | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """The partition's rows in file order, a row group at a time (none if never written)."""
        path = self.path(asset, *partition)
        if not path.is_file():
            return
        with damage(asset, path), pq.ParquetFile(path.path, filesystem=path.fs) as pf:
            for batch in pf.iter_batches(batch_size=ROW_GROUP_ROWS, columns=columns):
                table = unpack_vectors(pa.Table.from_batches([batch]))
                yield from (table.cast(schema) if schema is not None else table).to_batches()

    def keyed(
        self, asset: str, partition: tuple[str, ...], key: str, *, columns: list[str] | None = None
    ) -> KeyedReader | None:
        """A reader of the partition's rows by ``key`` (None if the partition was never
        written); see :class:`KeyedReader`."""
        path = self.path(asset, *partition)
        if not path.is_file():
            return None
        with damage(asset, path):
            return KeyedReader(path, key, columns=columns)

    def metadata(self, asset: str, partition: tuple[str, ...]) -> dict[bytes, bytes] | None:
        """The partition's schema metadata, read from the file's footer (None if never written)."""
        path = self.path(asset, *partition)
        if not path.is_file():
            return None
        with damage(asset, path):
            return dict(pq.read_schema(path.path, filesystem=path.fs).metadata or {})

    def delete(self, asset: str, partition: tuple[str, ...]) -> bool:
        """Remove a partition file (once the locks this thread holds are confirmed, as for a
        write); returns whether there was one."""
        path = self.path(asset, *partition)
        if path.is_file():
            confirm_held()
            path.unlink()
            return True
        return False

    def delete_collection(self, collection: str) -> list[str]:
        """Remove every partition file of ``collection`` across assets (once the locks this
        thread holds are confirmed); returns what was removed."""
        confirm_held()
        removed: list[str] = []
        for path in self.root.rglob(f"{collection}.parquet"):
            if path.is_file():
                path.unlink()
                removed.append(str(path))
        for path in self.root.rglob(collection):
            if path.is_dir():
                path.rmtree()
                removed.append(str(path))
        return removed


@contextlib.contextmanager
def damage(asset: str, path: Location) -> Iterator[None]:
    """Turns an unreadable partition file (truncated, garbage, another schema) into a
    DamagedWarehouseError naming it; a file removed meanwhile stays FileNotFoundError, and a
    request its object store failed or refused is a StoreUnreachableError (no damage)."""
    try:
        with path.store_failures():
            yield
    except FileNotFoundError:
        raise
    except (pa.ArrowException, OSError) as exc:
        raise DamagedWarehouseError(
            f"the warehouse partition of {asset}", path, str(exc).splitlines()[0]
        ) from None  # the message carries the cause; run reports show the innermost error


class KeyedReader:
    """The rows of one partition file whose ``key`` is among given keys, reading only the row
    groups that hold them.

    The key column is read once, whole (only that column: 64-character hashes take ~11 MiB
    per 160,000 rows). A lookup finds the wanted keys among them and decodes only the row
    groups where some sit, so looking up keys that sit together in the file (the inputs of a
    range of documents, the vectors embedded in their order) decodes a row group or two, not
    the whole file, and a step that looks up every key a batch at a time does linear work.
    The file stays open: a partition replaced meanwhile is still read as it was.
    """

    def __init__(self, path: Location, key: str, *, columns: list[str] | None = None) -> None:
        self.path = path
        self.columns = columns
        if columns is not None and key not in columns:
            raise ValueError(f"{path}: the columns read must include the key {key!r}")
        self._file = pq.ParquetFile(path.path, filesystem=path.fs)
        groups = range(self._file.num_row_groups)
        self._rows = [self._file.metadata.row_group(i).num_rows for i in groups]
        self._keys = pa.concat_arrays(
            [
                self._file.read_row_group(i, columns=[key]).column(key).combine_chunks()
                for i in groups
            ]
            or [pa.array([], self._file.schema_arrow.field(key).type)]
        )

    @property
    def keys(self) -> pa.Array:
        """The key column, whole, in file order."""
        return self._keys

    @property
    def metadata(self) -> dict[bytes, bytes]:
        """The file's schema metadata."""
        return dict(self._file.schema_arrow.metadata or {})

    def lookup(self, keys: pa.Array | pa.ChunkedArray) -> pa.Table:
        """Every row whose key is in ``keys``, in file order (vector columns unpacked)."""
        parts = list(self.select(pc.is_in(self._keys, value_set=pc.unique(keys))))
        if not parts:
            empty = self._file.schema_arrow.empty_table()
            parts = [empty.select(self.columns) if self.columns is not None else empty]
        return unpack_vectors(pa.concat_tables(parts))

    def select(self, mask: pa.Array | pa.ChunkedArray) -> Iterator[pa.Table]:
        """The rows where ``mask`` (one boolean per row of the file, as :attr:`keys`) is true,
        a row group at a time, in file order; row groups with none are not decoded. Vector
        columns stay packed (see :func:`unpack_vectors`)."""
        if len(mask) != len(self._keys):
            raise ValueError(f"{self.path}: a mask of {len(mask)} rows for {len(self._keys)}")
        if isinstance(mask, pa.ChunkedArray):
            mask = mask.combine_chunks()
        start = 0
        for i, n in enumerate(self._rows):
            part = mask.slice(start, n)
            start += n
            if part.true_count:
                table = self._file.read_row_group(i, columns=self.columns)
                yield table if part.true_count == n else table.filter(part)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> KeyedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class StagedPartition:
    """A partition's new file, written beside the one readers see (:meth:`Warehouse.stage`)."""

    temp: Location
    path: Location

    def publish(self) -> Location:
        """Put the new file in the partition's place (atomically: readers see the old file
        or the new one); returns the partition's path. The new file is removed if it cannot
        be put there.

        Raises:
            LockLostError: a lock this thread holds across machines was lost (see
                :mod:`corpus_index.held_locks`); the partition is left as it was.
        """
        try:
            confirm_held()
        except BaseException:
            self.discard()
            raise
        return self.put()

    def put(self) -> Location:
        """:meth:`publish` without confirming the thread's locks (its caller did, once for
        several files)."""
        try:
            self.temp.replace(self.path)
        except BaseException:
            self.discard()
            raise
        return self.path

    def discard(self) -> None:
        """Remove the new file (if it is still there), leaving the partition as it was."""
        self.temp.unlink(missing_ok=True)


class PartitionWriter:
    """Appends tables (in ``schema``) to one partition file, a row group at a time.

    The file's own schema is that of the first table as packed (a vector column with nulls
    stays unpacked), so every later table must pack the same way.
    """

    def __init__(self, path: Location, schema: pa.Schema) -> None:
        self.path = path
        self.schema = schema
        self.rows = 0
        self.committed = False
        self._writer: pq.ParquetWriter | None = None
        self._closed = False

    def write(self, table: pa.Table) -> None:
        assert not self._closed, "the partition writer is closed"
        packed = pack_vectors(table.cast(self.schema))
        # a request the object store fails or refuses (a part's upload throttled) is named as
        # the store's failure, retryable, not left as pyarrow's OSError
        with self.path.store_failures():
            if self._writer is None:
                self._writer = pq.ParquetWriter(
                    self.path.path,
                    packed.schema,
                    filesystem=self.path.fs,
                    compression=COMPRESSION,
                    use_dictionary=USE_DICTIONARY,
                )
            if table.num_rows:
                self._writer.write_table(packed, row_group_size=ROW_GROUP_ROWS)
        self.rows += table.num_rows

    def commit(self) -> None:
        self.committed = True

    def close(self) -> None:
        if self._closed:
            return
        if self._writer is None:  # nothing written: the file still carries the schema
            self.write(self.schema.empty_table())
        assert self._writer is not None
        with self.path.store_failures():  # the last part is uploaded as the file closes
            self._writer.close()
        self._closed = True


def pack_vectors(table: pa.Table) -> pa.Table:
    """Each non-null float32 fixed-size-list column as fixed-size binary (see the module doc)."""
    for i, field in enumerate(table.schema):
        t = field.type
        if not (pa.types.is_fixed_size_list(t) and t.value_type == pa.float32()):
            continue
        column = table.column(i).combine_chunks()
        if column.null_count:
            continue
        flat = column.flatten()
        if flat.null_count:
            continue
        values = np.ascontiguousarray(flat.to_numpy(zero_copy_only=False), dtype="<f4")
        dim = t.list_size
        packed = pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(4 * dim), len(column), [None, pa.py_buffer(values)]
        )
        meta = {**(field.metadata or {}), PACKED_DIM_KEY: str(dim).encode()}
        table = table.set_column(i, pa.field(field.name, packed.type, metadata=meta), packed)
    return table


def unpack_vectors(table: pa.Table) -> pa.Table:
    """The inverse of :func:`pack_vectors`; other tables are returned as they are."""
    for i, field in enumerate(table.schema):
        meta = field.metadata or {}
        if PACKED_DIM_KEY not in meta:
            continue
        dim = int(meta[PACKED_DIM_KEY])
        chunks = []
        for chunk in table.column(i).chunks:
            values = pa.Array.from_buffers(
                pa.float32(),
                len(chunk) * dim,
                [None, chunk.buffers()[1]],
                offset=chunk.offset * dim,
            )
            chunks.append(pa.FixedSizeListArray.from_arrays(values, dim))
        rest = {k: v for k, v in meta.items() if k != PACKED_DIM_KEY}
        unpacked = pa.chunked_array(chunks, pa.list_(pa.float32(), dim))
        table = table.set_column(
            i, pa.field(field.name, unpacked.type, metadata=rest or None), unpacked
        )
    return table


class Background:
    """Partition reads and writes beside the caller's own work: a step reads the partitions
    it needs later while it decodes its input, and writes each table while it makes the
    next. Parquet's decoding and encoding release the interpreter's lock, so on two cores
    they overlap the step's Python (at 50,000 messages the ``linked_groups`` step spends
    about 0.2 s reading its partitions and 0.45 s writing them, beside seconds of Python).

    Reads run on one worker thread, in the order asked. A table is staged (:meth:`stage`:
    written beside its partition's file, under a name no reader looks at) as soon as it is
    made, on one of ``writers`` threads, and the staged files are put in place together
    (:meth:`publish`) once the step knows they should be (its checks passed): writing
    overlaps the work after it, the checks included; the last tables, made when the step's
    Python is done, are written side by side; and no reader sees a new file before the
    checks pass, so reads and stages need no order between them. The files are put in place
    in the order they were staged (but those named last, see :meth:`publish`), so a step
    that publishes a result before what is kept beside it never keeps the second without
    the first; a stage that failed publishes nothing. Leaving the ``with`` block waits for
    both, removes what is staged and not published, and raises the first failure unless the
    block raised its own.
    """

    def __init__(self, writers: int = 2) -> None:
        self._reads = ThreadPoolExecutor(max_workers=1, thread_name_prefix="warehouse-read")
        self._writes = ThreadPoolExecutor(max_workers=writers, thread_name_prefix="warehouse-write")
        self._staged: list[tuple[str, Future[StagedPartition]]] = []  # (asset, its stage)

    def read(self, read: Callable[[], T]) -> Future[T]:
        """``read()`` on the reading worker; its result (or its error) when the future is
        asked."""
        return self._reads.submit(read)

    def stage(
        self, warehouse: Warehouse, asset: str, partition: tuple[str, ...], table: pa.Table
    ) -> None:
        """:meth:`Warehouse.stage` of ``table`` on a writing worker; in place at
        :meth:`publish`."""
        self._staged.append((asset, self._writes.submit(warehouse.stage, asset, partition, table)))

    def publish(self, *, last: Sequence[str] = ()) -> None:
        """Wait for every stage asked for, then put each staged partition in place, in the
        order staged, but those of the assets in ``last``, which go after the others, in the
        order of ``last``. When a stage failed, none is put in place and its error is
        raised; a file that cannot be put in place stops those after it (its error raised).
        A staged file removed before it is published (by a compaction clearing temporary
        files that ran beside the step without the home's lock, say: a compaction run holds
        the home alone, see :mod:`corpus_index.homelock`) publishes none of them, nor does a
        lock lost by the calling thread (it confirms its locks once, before the first).

        Raises:
            FileNotFoundError: a staged file is gone (nothing was published).
            LockLostError: a lock this thread holds across machines was lost (nothing was
                published; see :mod:`corpus_index.held_locks`).
        """
        staged = self._finished()
        order = [s for a, s in staged if a not in last]
        order += [s for name in last for a, s in staged if a == name]
        lost = [s for s in order if not s.temp.is_file()]
        if lost:
            for one in order:
                one.discard()
            raise FileNotFoundError(
                f"{lost[0].temp}: the staged file of {lost[0].path} was removed before it was "
                "published; nothing was published"
            )
        try:
            confirm_held()
        except BaseException:
            for one in order:
                one.discard()
            raise
        for k, one in enumerate(order):
            try:
                one.put()
            except BaseException:
                for rest in order[k:]:
                    rest.discard()
                raise

    def _finished(self) -> list[tuple[str, StagedPartition]]:
        """Every stage asked for and not yet taken, once each has ended; when one failed,
        the others are removed and its error raised."""
        asked, self._staged = self._staged, []
        done: list[tuple[str, StagedPartition]] = []
        failed: BaseException | None = None
        for asset, stage in asked:
            try:
                done.append((asset, stage.result()))
            except BaseException as exc:
                failed = failed or exc
        if failed is not None:
            for _, one in done:
                one.discard()
            raise failed
        return done

    def wait(self) -> None:
        """Wait for every read and stage asked for, remove what is staged and not published,
        and raise the first stage's failure."""
        self._reads.shutdown(wait=True)
        self._writes.shutdown(wait=True)
        for _, one in self._finished():
            one.discard()

    def __enter__(self) -> Background:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if kind is None:
            self.wait()
            return
        with contextlib.suppress(Exception):  # the block's own error is the one raised
            self.wait()
