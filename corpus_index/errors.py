"""Named exceptions. Permanent errors and retryable errors are distinct types."""

from __future__ import annotations


class CorpusError(Exception):
    """Base class of every error corpus-index raises on purpose."""


class ConfigError(CorpusError, ValueError):
    """The configuration file is invalid; the message names the key and the problem."""


class ParseError(CorpusError, ValueError):
    """A source document could not be parsed; the message names the file and line."""

    def __init__(self, path: str, message: str, *, line: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}")
        self.path = path
        self.line = line
        self.reason = message


class UnreadableDocumentError(ParseError):
    """A source document could not be read (a broken or outside symlink, a special file, I/O)."""


class LimitExceededError(ParseError):
    """A source document exceeds a configured limit; the message names the limit and its value."""


class PermanentError(CorpusError):
    """An error that retrying will not fix."""


class DimensionMismatchError(PermanentError, ValueError):
    """A vector's dimension differs from what its profile or generation declares."""


class DimensionProbeError(DimensionMismatchError):
    """A model's learned vector length contradicts the generations the home holds of it."""


class IncompatibleEmbedderError(PermanentError, ValueError):
    """A query embedder differs from the generation's backend_spec."""


class UnknownNamespaceError(PermanentError, KeyError):
    """The namespace is not configured."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else "unknown namespace"


class MissingGenerationError(PermanentError, LookupError):
    """No generation exists (or none is ACTIVE) where one is required."""


class UnmaintainedGenerationError(MissingGenerationError):
    """The generation exists, but the pipeline no longer writes it (its profile was removed or
    builds other vectors now, or it failed): its sources' edits and ACL changes do not reach
    it, so it is not searched."""


class SidecarError(PermanentError, ValueError):
    """An embedding sidecar is non-conformant; the message names the JSON path of the problem."""

    def __init__(self, json_path: str, message: str, *, source: str | None = None) -> None:
        where = f"{source}: {json_path}" if source else json_path
        super().__init__(f"{where}: {message}")
        self.json_path = json_path
        self.source = source
        self.reason = message


class InvalidFilterError(PermanentError, ValueError):
    """A search filter is malformed."""


class EmbedderError(PermanentError, RuntimeError):
    """An embedder failed permanently (bad request, bad credentials, bad response)."""


class NonFiniteVectorError(EmbedderError):
    """An embedder answered with NaN or infinite values."""


class RefusedInputError(EmbedderError):
    """An embedder's server refused a request for what it holds (HTTP 400, 413 or 422): an
    input of it (too long, invalid for the model), not the server, is at fault."""


class VerifierError(PermanentError, RuntimeError):
    """The answer verifier's server refused it for good (a bad key, an unknown model or API
    root): every answer would go unverified, so the grouping stops instead."""


class RetryableError(CorpusError, RuntimeError):
    """A transient failure (I/O, rate limit, server error) that may succeed on retry."""


class StoreUnreachableError(RetryableError):
    """The object store that holds the home's stores cannot be listed, or failed or refused a
    request (endpoint, bucket, credentials, throttling, a server error): no damage of what it
    holds; the message names the store's URI, never a secret."""


class RegistryConflictError(RetryableError):
    """A registry transaction lost a race with another process's; running it again is safe."""


class CheckFailedError(PermanentError, RuntimeError):
    """A blocking data-quality check failed."""


class PromotionRefusedError(PermanentError, RuntimeError):
    """A generation may not be promoted; the message names the failed or missing checks."""


class RetireRefusedError(PermanentError, RuntimeError):
    """A generation may not be retired yet; the message says why."""


class InvalidQueryError(PermanentError, ValueError):
    """A search request is malformed (unknown mode, empty text where text is needed, bad options)."""


class MissingIndexError(PermanentError, LookupError):
    """A generation lacks an index a search mode needs (e.g. the full-text index)."""


class ReadOnlyQueryError(PermanentError, ValueError):
    """A SQL statement other than a read-only SELECT was given to the calibration views."""


class QueryLimitError(PermanentError, RuntimeError):
    """A user's SQL query ran past its time limit or needed more than its memory limit."""


class IndexUpdateError(CorpusError, RuntimeError):
    """A sync run that an index update (``CorpusIndex.add``/``remove``) started did not succeed."""


class CommitConflictError(RetryableError):
    """A LanceDB commit kept losing the race to another writer of the same table."""


class HomeBusyError(RetryableError):
    """Another process holds the home's lock (a sync or a promotion is in flight)."""


class HomeHeldSharedError(PermanentError, RuntimeError):
    """Work that needs the home alone was asked for by a thread that holds its lock shared (a
    step of a run beside others): the hold cannot be raised in place, and granting it would
    let the work run beside the other runs."""


class LockLostError(RetryableError):
    """A lock held across machines (in the registry's PostgreSQL database) was lost while
    held, its session ended; what was written under it was not published."""


class ActiveMismatchError(PermanentError, RuntimeError):
    """The namespace's ACTIVE generation is not the one a promotion or rollback expected."""


REPAIR_HINT = (
    "run `corpus doctor` to see what is damaged and `corpus doctor --repair` to rebuild it"
)


class DamagedStateError(PermanentError, RuntimeError):
    """A file of the home is damaged (truncated, garbage, missing); the message names it."""

    def __init__(self, what: str, path: object, reason: str) -> None:
        super().__init__(f"{path}: {what} is damaged ({reason}); {REPAIR_HINT}")
        self.what = what
        self.path = str(path)
        self.reason = reason


class DamagedWarehouseError(DamagedStateError):
    """A warehouse Parquet partition cannot be read or lacks its expected schema."""


class DamagedTableError(DamagedStateError):
    """A LanceDB table (a generation's or the embedding cache's) cannot be read."""


class DamagedRegistryError(DamagedStateError):
    """``registry.duckdb`` is not a readable DuckDB database."""


class IdentityError(PermanentError, ValueError):
    """An identity operation would cross tenants, or names an identity the tenant lacks."""


class ExportError(PermanentError, ValueError):
    """A flat-blob export is malformed, or does not match its index.json."""
