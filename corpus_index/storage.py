"""Where the stores live: a folder on this machine, or a prefix on an S3-compatible object store.

A :class:`Location` is one file or folder under such a root, with the few pathlib operations
the stores use (join, read, write, list, delete, replace), done through pyarrow's filesystem
layer, so the warehouse, the exports and the receipts run the same code on a local folder and
on ``s3://bucket/prefix``. The endpoint, region and credentials of an object store are the
standard AWS environment variables (``AWS_ENDPOINT_URL``, ``AWS_REGION``,
``AWS_ACCESS_KEY_ID``...), which pyarrow and LanceDB read themselves: nothing secret passes
through the configuration or a run's recorded settings.

Atomicity: a local write goes to a temporary sibling that is renamed over the target; on an
object store one PUT (or one copy) replaces an object whole, so readers of a file see the old
bytes or the new ones on both. Folders are another matter: an object store has none, so
:meth:`Location.replace_tree` copies file by file there (readers may see a mix while it runs).
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import json
import os
import posixpath
import re
import secrets
from collections.abc import Iterator
from pathlib import Path, PurePath, PurePosixPath
from typing import NamedTuple

import pyarrow as pa
import pyarrow.fs as pafs

from corpus_index.errors import ConfigError, StoreUnreachableError

OBJECT_STORE_SCHEMES = ("s3",)
# under a prefix while ``corpus storage copy`` writes there, naming the stores it copies from
UNFINISHED_COPY = ".storage-copy-unfinished.json"

_LOCAL = pafs.LocalFileSystem()


def store_reason(exc: BaseException) -> str:
    """What an object store's error says, in a line: the S3 error code and message where it
    gives them (``NoSuchBucket: The specified bucket does not exist``), else the start of its
    text (the client's own error is a debug dump of its retries)."""
    text = str(exc)
    code = re.search(r"<Code>([^<]+)</Code>", text)
    if code:
        message = re.search(r"<Message>([^<]+)</Message>", text)
        return code.group(1) + (f": {message.group(1)}" if message else "")
    aws = _AWS_ERROR.search(text)
    if aws:  # pyarrow's: what it was doing comes before, what the store said after
        return text[aws.start() :].splitlines()[0][:200]
    if re.search(r"connection refused|error sending request|dns error|timed out", text, re.I):
        return "its endpoint does not answer"
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return first[:200]


# what pyarrow's S3 filesystem says when the store failed or refused a request (a 403, a 5xx,
# throttling, no answer): ``AWS Error ACCESS_DENIED during HeadObject operation: ...``
_AWS_ERROR = re.compile(r"AWS Error (\w+)")
# ... where it says the key is not there (the store answered: a file is missing)
_AWS_MISSING = frozenset({"NO_SUCH_KEY", "RESOURCE_NOT_FOUND"})


def is_store_failure(exc: BaseException) -> bool:
    """Whether pyarrow's object-store filesystem failed because the store failed or refused a
    request, not because a file is missing or unreadable."""
    if not isinstance(exc, OSError) or isinstance(
        exc, FileNotFoundError | NotADirectoryError | IsADirectoryError
    ):
        return False
    found = _AWS_ERROR.search(str(exc))
    return found is not None and found.group(1) not in _AWS_MISSING


def unreachable(where: object, exc: BaseException) -> StoreUnreachableError:
    """The error for a request the object store at ``where`` failed or refused."""
    return StoreUnreachableError(
        f"{where}: the object store failed a request ({store_reason(exc)}); run it again, and "
        "if it keeps failing check the store's endpoint, bucket and credentials"
    )


def parse_storage_uri(uri: str, *, key: str = "CORPUS_STORAGE") -> str:
    """``uri`` checked to be ``s3://bucket[/prefix]`` (trailing slashes dropped).

    Raises:
        ConfigError: another scheme, or no bucket; the message names ``key``.
    """
    scheme, sep, rest = uri.partition("://")
    bucket = rest.split("/", 1)[0]
    if not sep or scheme not in OBJECT_STORE_SCHEMES or not bucket:
        raise ConfigError(
            f"{key}={uri!r}: not an object-store URI; give s3://bucket/prefix "
            "(endpoint and credentials come from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...), "
            f"or unset {key} to keep the stores in the home folder"
        )
    return f"{scheme}://{rest.rstrip('/')}"


_FINISHED: set[str] = set()  # prefixes found without that marker, checked once per process


def finished_stores(uri: str) -> Location:
    """The stores under ``uri`` (``s3://bucket/prefix``), once found not to be what a
    ``corpus storage copy`` cut short left there (checked once per process; a store that
    fails to answer is not checked, as what reads it next meets the same failure and names it).

    Raises:
        ConfigError: the marker of a copy that did not finish is under ``uri`` (named): part
            of the tables and partitions are missing there.
    """
    root = Location.of(uri)
    if uri in _FINISHED:
        return root
    marker = root / UNFINISHED_COPY
    try:
        text = marker.read_text(errors="replace")
    except FileNotFoundError:
        _FINISHED.add(uri)
        return root
    except StoreUnreachableError:
        return root
    try:
        source = str(json.loads(text)["source"])
    except (ValueError, TypeError, KeyError):
        source = "named in that file"
    raise ConfigError(
        f"CORPUS_STORAGE={uri}: the stores there are an unfinished copy ({marker} is there: "
        "a `corpus storage copy` to this prefix was cut short, and part of them is missing); "
        f"run `corpus storage copy --to {uri}` again from the home it copies ({source}), or "
        "set CORPUS_STORAGE back to where the stores are"
    )


class FileStat(NamedTuple):
    """What the stores compare to tell a file changed (named as in ``os.stat_result``)."""

    st_size: int
    st_mtime_ns: int


class Location:
    """One file or folder on a local or object-store filesystem (see the module doc)."""

    __slots__ = ("_fs", "path", "scheme")

    def __init__(self, fs: pafs.FileSystem | None, path: str, *, scheme: str = "file") -> None:
        self._fs = fs  # an object store's is built on first use (see ``_object_store``)
        self.path = path.rstrip("/") or "/"
        self.scheme = scheme

    @property
    def fs(self) -> pafs.FileSystem:
        if self._fs is None:
            self._fs = _object_store(f"{self.scheme}://{self.path.split('/', 1)[0]}")
        return self._fs

    @classmethod
    def local(cls, path: Path | str) -> Location:
        """A location on this machine."""
        return cls(_LOCAL, str(Path(path).absolute()))

    @classmethod
    def of(cls, where: Location | Path | str) -> Location:
        """``where`` as a location: an ``s3://`` URI (the filesystem built from the standard
        AWS environment variables), a local path, or a location as it is."""
        if isinstance(where, Location):
            return where
        text = str(where)
        if "://" not in text:
            return cls.local(text)
        scheme, _, path = parse_storage_uri(text, key="location").partition("://")
        return cls(None, path, scheme=scheme)

    # -- names -------------------------------------------------------------------------------

    @property
    def is_local(self) -> bool:
        return self.scheme == "file"

    @property
    def name(self) -> str:
        return PurePosixPath(self.path).name

    @property
    def suffix(self) -> str:
        return PurePosixPath(self.path).suffix

    @property
    def stem(self) -> str:
        return PurePosixPath(self.path).stem

    @property
    def parent(self) -> Location:
        return self._at(str(PurePosixPath(self.path).parent))

    def __truediv__(self, part: str) -> Location:
        return self.joinpath(part)

    def joinpath(self, *parts: str) -> Location:
        return self._at(str(PurePosixPath(self.path).joinpath(*parts)))

    def with_name(self, name: str) -> Location:
        return self._at(str(PurePosixPath(self.path).with_name(name)))

    def is_relative_to(self, other: Location | Path) -> bool:
        other = Location.of(other)
        return self.scheme == other.scheme and PurePosixPath(self.path).is_relative_to(other.path)

    def relative_to(self, other: Location | Path) -> PurePosixPath:
        return PurePosixPath(self.path).relative_to(Location.of(other).path)

    def _at(self, path: str) -> Location:
        return Location(self._fs, path, scheme=self.scheme)

    def __str__(self) -> str:
        return self.path if self.is_local else f"{self.scheme}://{self.path}"

    def __repr__(self) -> str:
        return f"Location({str(self)!r})"

    def __fspath__(self) -> str:
        if not self.is_local:
            raise TypeError(f"{self} is on an object store, not a path on this machine")
        return self.path

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PurePath):  # a local location is the path it names
            return self.is_local and self.path == str(other)
        return isinstance(other, Location) and (self.scheme, self.path) == (
            other.scheme,
            other.path,
        )

    def __hash__(self) -> int:
        return hash((self.scheme, self.path))

    def __lt__(self, other: Location) -> bool:
        return (self.scheme, self.path) < (other.scheme, other.path)

    @contextlib.contextmanager
    def store_failures(self) -> Iterator[None]:
        """A request an object store failed or refused, as a StoreUnreachableError naming
        this location (a missing file stays FileNotFoundError, a local file's error as it
        is)."""
        try:
            yield
        except OSError as exc:
            if self.is_local or not is_store_failure(exc):
                raise
            raise unreachable(self, exc) from None

    # -- what is there -----------------------------------------------------------------------

    def info(self) -> pafs.FileInfo:
        with self.store_failures():
            return self.fs.get_file_info(self.path)

    def exists(self) -> bool:
        return bool(self.info().type != pafs.FileType.NotFound)

    def is_file(self) -> bool:
        return bool(self.info().type == pafs.FileType.File)

    def is_dir(self) -> bool:
        return bool(self.info().type == pafs.FileType.Directory)

    def size(self) -> int:
        return int(self.info().size or 0)

    def mtime(self) -> float:
        """Seconds since the epoch of the last write.

        Raises:
            FileNotFoundError: there is no such file (named).
        """
        st = self.file_stat()
        if st is None:
            raise FileNotFoundError(f"{self}: no such file")
        return st.st_mtime_ns / 1e9

    def file_stat(self) -> FileStat | None:
        """The file's size and time of last write; None if there is no such file (unlike
        ``Path.stat``, which raises)."""
        if self.is_local:  # one system call: the sidecar step stats every document's file
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                return None
            return FileStat(st.st_size, st.st_mtime_ns)
        info = self.info()
        if info.type != pafs.FileType.File:
            return None
        return FileStat(int(info.size or 0), int(info.mtime_ns or 0))

    def iterdir(self) -> list[Location]:
        """The entries directly under this folder, sorted by name (none if it is missing)."""
        return sorted(self._entries(recursive=False), key=lambda loc: loc.path)

    def walk(self) -> list[Location]:
        """Every file under this folder, at any depth, sorted by path (none if it is missing;
        symbolic links are neither followed nor listed)."""
        files = (loc for loc in self._entries(recursive=True) if loc._kind == pafs.FileType.File)
        return sorted(files, key=lambda loc: loc.path)

    def links(self) -> list[Location]:
        """The symbolic links under this folder, at any depth, sorted by path (the folder
        itself may be one); an object store has none."""
        found = (e for e in self._entries(recursive=True) if e._kind == pafs.FileType.Unknown)
        return sorted(found, key=lambda loc: loc.path)

    def rglob(self, pattern: str) -> list[Location]:
        """Files and folders at any depth whose name matches ``pattern``, sorted by path."""
        found = (e for e in self._entries(recursive=True) if fnmatch.fnmatchcase(e.name, pattern))
        return sorted(found, key=lambda loc: loc.path)

    def glob(self, pattern: str) -> list[Location]:
        """Entries matching ``pattern``, one ``/``-separated name pattern per level."""
        level = [self]
        for part in pattern.split("/"):
            level = [e for d in level for e in d.iterdir() if fnmatch.fnmatchcase(e.name, part)]
        return sorted(level, key=lambda loc: loc.path)

    def _entries(self, *, recursive: bool) -> Iterator[_Entry]:
        if self.is_local:  # pathlib: symbolic links are listed, never followed
            here = Path(self.path)
            if not here.is_dir():
                return
            for p in here.rglob("*") if recursive else here.iterdir():
                kind = (
                    pafs.FileType.Unknown
                    if p.is_symlink()
                    else pafs.FileType.Directory
                    if p.is_dir()
                    else pafs.FileType.File
                )
                yield _Entry(self.fs, str(p), scheme=self.scheme, kind=kind)
            return
        # an object store has no folders, only keys: a folder is the prefix of the files under
        # it (pyarrow's empty "folder/" markers, left where it removed a last file, are not)
        selector = pafs.FileSelector(self.path, allow_not_found=True, recursive=True)
        try:
            with self.store_failures():
                infos = self.fs.get_file_info(selector)
        except NotADirectoryError:
            return
        seen: set[str] = set()
        for info in infos:
            if info.type != pafs.FileType.File:
                continue
            parts = PurePosixPath(info.path).relative_to(self.path).parts
            depth = len(parts) if recursive else 1
            for n in range(1, depth + 1):
                path = str(PurePosixPath(self.path).joinpath(*parts[:n]))
                if path not in seen:
                    seen.add(path)
                    kind = pafs.FileType.File if n == len(parts) else pafs.FileType.Directory
                    yield _Entry(self.fs, path, scheme=self.scheme, kind=kind)

    # -- reading and writing -----------------------------------------------------------------

    def open_input(self) -> pa.NativeFile:
        with self.store_failures():
            return self.fs.open_input_file(self.path)

    def read_bytes(self) -> bytes:
        with self.store_failures(), self.open_input() as fh:
            return bytes(fh.read())

    def read_text(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return self.read_bytes().decode(encoding, errors)

    def write_bytes(self, data: bytes) -> None:
        """Replace the file with ``data``: readers see the old bytes or the new ones."""
        self.parent.mkdir()
        tmp = self.temp_sibling()
        try:
            if self.is_local:  # synced before the rename, so a crash leaves old or new bytes
                with open(tmp.path, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
            else:
                with tmp.store_failures(), tmp.fs.open_output_stream(tmp.path) as out:
                    out.write(data)
            tmp.replace(self)
        except BaseException:
            # the temporary file is removed where it can be; the write's own error is the one
            # raised (a removal that fails too, as it does for a name too long, would hide it)
            with contextlib.suppress(OSError, StoreUnreachableError):
                tmp.unlink(missing_ok=True)
            raise

    def write_text(self, text: str, encoding: str = "utf-8") -> None:
        self.write_bytes(text.encode(encoding))

    def temp_sibling(self) -> Location:
        """A fresh name beside this one, ``.<name>.<random>.tmp`` (compaction removes old ones)."""
        return self.with_name(f".{self.name}.{secrets.token_hex(6)}.tmp")

    def mkdir(self, parents: bool = True, exist_ok: bool = True) -> None:
        """Create the folder (and its parents); an object store has no folders: nothing to do."""
        if self.is_local:
            self.fs.create_dir(self.path, recursive=parents)

    # -- removing and moving -----------------------------------------------------------------

    def unlink(self, missing_ok: bool = False) -> None:
        try:
            with self.store_failures():
                self.fs.delete_file(self.path)
        except FileNotFoundError:
            if not missing_ok:
                raise

    def rmtree(self) -> None:
        """Remove the folder and everything under it (nothing if it is missing)."""
        if self.is_dir():
            with self.store_failures():
                self.fs.delete_dir(self.path)

    def replace(self, target: Location) -> Location:
        """Move this file over ``target`` (same filesystem): a rename here, a copy on an object
        store, where readers see the old object or the new one."""
        with self.store_failures():
            self.fs.move(self.path, target.path)
        return target

    def replace_tree(self, target: Location) -> None:
        """Put this folder where ``target`` is, the old ``target`` removed. Here: two renames
        (readers see the old tree or the new one). On an object store, which has no folders:
        each file copied over, then the files the new tree lacks removed, then this one."""
        if self.is_local:
            old = target.with_name(f".{target.name}.old-{secrets.token_hex(4)}")
            if target.exists():
                self.fs.move(target.path, old.path)
            target.parent.mkdir()
            self.fs.move(self.path, target.path)
            old.rmtree()
            return
        kept = {target.joinpath(str(item.relative_to(self))) for item in self.walk()}
        copy_tree(self, target)
        for item in target.walk():
            if item not in kept:
                item.unlink(missing_ok=True)
        self.rmtree()

    def resolve(self) -> Location:
        """The location with ``..`` and (here) symbolic links resolved, to check that a name
        taken from a request stays inside a folder."""
        if self.is_local:
            return Location.local(Path(self.path).resolve())
        return self._at(posixpath.normpath(self.path))


class _Entry(Location):
    """A listed location that remembers whether the listing saw a file or a folder."""

    __slots__ = ("_kind",)

    def __init__(self, fs: pafs.FileSystem, path: str, *, scheme: str, kind: pafs.FileType) -> None:
        super().__init__(fs, path, scheme=scheme)
        self._kind = kind

    def is_file(self) -> bool:
        return bool(self._kind == pafs.FileType.File)

    def is_dir(self) -> bool:
        return bool(self._kind == pafs.FileType.Directory)


@functools.cache
def _object_store(bucket_uri: str) -> pafs.FileSystem:
    """The filesystem of one bucket, built once per process by pyarrow from the standard AWS
    environment variables (without ``AWS_REGION`` it asks the store for the bucket's region)."""
    fs, _ = pafs.FileSystem.from_uri(bucket_uri)
    return fs


def copy_tree(source: Location, target: Location) -> list[Location]:
    """Copy every file under ``source`` to the same relative path under ``target`` (across
    filesystems: a local folder to an object store, or back); returns the files written."""
    written: list[Location] = []
    for item in source.walk():
        dest = target.joinpath(str(item.relative_to(source)))
        dest.parent.mkdir()
        pafs.copy_files(
            item.path, dest.path, source_filesystem=source.fs, destination_filesystem=target.fs
        )
        written.append(dest)
    return written
