"""RFC 0013's use cases over the search layer, each inside the principal's tenant and groups.

- :func:`similar_deals` — "find similar deals": query by a deal's own section vectors, itself
  excluded, results grouped per deal.
- :func:`run_sql` — cross-deal calibration: read-only SQL over DuckDB views of the deals,
  blocks (every section, financial ones included), indexed chunks and vector neighbours the
  principal may see, and nothing else.
- :func:`risk_patterns` — every prior deal whose risk section matches a flag, with the flag's
  mitigant and resolution.

Every row these functions read from LanceDB passes the same eligibility prefilter as a search;
rows from the warehouse are filtered by the same rule (tenant, ACL overlap, the namespace's
collections) before any user SQL can see them.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from corpus_index import predicates
from corpus_index.eligibility import eligible_rows
from corpus_index.errors import (
    InvalidQueryError,
    QueryLimitError,
    ReadOnlyQueryError,
    RetryableError,
)
from corpus_index.filters import Condition, FilterSpec, as_filter
from corpus_index.index_store import vector_entry_schema
from corpus_index.records import BLOCK_SCHEMA
from corpus_index.registry import Generation
from corpus_index.search import Principal, Searcher, candidate_depth

DEAL_COLUMNS = ["deal_id", "asset_class", "state", "metro", "units", "deal_date"]
RISK_SECTION = "risk_assessment"
DEFAULT_NEIGHBOURS = 10
MAX_SQL_ROWS = 10_000
# a user's SQL is bounded: wall time, DuckDB memory (no spilling to disk) and threads; sized for
# a 2-core machine that also serves searches and syncs
SQL_TIMEOUT_S = 30.0
SQL_MEMORY_LIMIT = "1GB"
SQL_THREADS = 2
_SIZE = re.compile(r"^\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)$", re.IGNORECASE)


# -- finding one deal ------------------------------------------------------------------------


def deal_rows(
    searcher: Searcher,
    deal: str,
    *,
    principal: Principal,
    namespace: str | None = None,
    generation: str | None = None,
) -> tuple[str, Generation, list[dict[str, Any]]]:
    """The indexed rows (with vectors) of one deal the principal may see.

    ``deal`` may be a deal_id (``DEAL-2026-0042``), a doc_id (``deal-2026-0042``) or a
    source_id (``meridian-deals/deal-2026-0042``). An empty list means not found (or not visible).

    Raises:
        InvalidQueryError: ``deal`` names documents in more than one collection.
    """
    ns, gen, where = searcher.scope(principal, namespace, generation)
    if searcher.corpus.store.searched(gen) is None:
        return ns, gen, []
    names = sorted({deal, deal.upper(), deal.lower()})
    match = predicates.any_of(
        [
            predicates.is_in("deal_id", names),
            predicates.is_in("doc_id", names),
            predicates.eq("source_id", deal),
        ]
    )
    rows = _read(searcher.corpus.store.table(gen), predicates.all_of([where, match]))
    sources = sorted({r["source_id"] for r in rows})
    if len(sources) > 1:
        raise InvalidQueryError(
            f"{deal!r} names {len(sources)} documents ({', '.join(sources)}); give a source_id"
        )
    return ns, gen, rows


def _read(table: Any, where: str, columns: list[str] | None = None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = _read_arrow(table, where, columns).to_pylist()
    return rows


def _read_arrow(table: Any, where: str, columns: list[str] | None = None) -> pa.Table:
    """Every row matching ``where`` (a plain scan inside the prefilter, not a top-k)."""
    n = int(table.count_rows(where))
    query = table.search().where(where, prefilter=True)
    if columns is not None:
        query = query.select(columns)
    result: pa.Table = query.limit(max(n, 1)).to_arrow()
    return result


# -- similar deals ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SimilarDeal:
    """A deal near the query deal: its mean best-section similarity and each section's."""

    source_id: str
    deal_id: str | None
    score: float
    sections: dict[str, float]
    asset_class: str | None
    state: str | None
    metro: str | None
    units: int | None
    deal_date: str | None


@dataclass(slots=True)
class SimilarResult:
    """The query deal, its neighbours best first, and a trace."""

    source_id: str
    deal_id: str | None
    sections: list[str]
    deals: list[SimilarDeal]
    trace: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "source_id": self.source_id,
            "deal_id": self.deal_id,
            "sections": self.sections,
            "deals": [asdict(d) for d in self.deals],
            "trace": self.trace,
        }


def similar_deals(
    searcher: Searcher,
    deal: str,
    *,
    principal: Principal,
    k: int = 5,
    namespace: str | None = None,
    generation: str | None = None,
    filters: FilterSpec = None,
    sections: list[str] | None = None,
) -> SimilarResult | None:
    """Deals most like ``deal``, found with the deal's own vectors (no re-embedding).

    For each of the deal's embedded sections, a dense search (inside the principal's prefilter
    and ``filters``, the deal itself excluded) finds the nearest chunks of the same section in
    other deals. A deal's score is the mean over the query deal's sections of its best
    similarity in that section (0 where it has none among the candidates).

    Returns:
        None when the deal is not found among the rows the principal may see.
    """
    if k < 1:
        raise InvalidQueryError(f"k must be >= 1 (got {k})")
    t0 = time.perf_counter()
    ns, gen, rows = deal_rows(
        searcher, deal, principal=principal, namespace=namespace, generation=generation
    )
    if not rows:
        return None
    own, deal_id = rows[0]["source_id"], rows[0].get("deal_id")
    if sections is not None:
        present = sorted({r["section"] for r in rows})
        unknown = sorted(set(sections) - set(present))
        if not sections or unknown:
            what = f"deal {deal} has no section {', '.join(unknown)}" if unknown else "no section"
            raise InvalidQueryError(
                f"{what}: name some of its sections ({', '.join(present)}) or leave them out"
            )
        rows = [r for r in rows if r["section"] in sections]
    query_sections = sorted({r["section"] for r in rows})
    base = as_filter(filters).with_conditions(Condition("source_id", "!=", own))
    inner = Searcher(searcher.corpus)  # one trace for the whole request, not one per section
    depth = candidate_depth(k)
    best: dict[str, dict[str, float]] = {}
    meta: dict[str, dict[str, Any]] = {}
    stage_ms: dict[str, float] = {}
    for row in rows:
        result = inner.search(
            "",
            principal=principal,
            namespace=ns,
            generation=gen.id,
            mode="dense",
            vector=row["vector"],
            filters=base.with_conditions(Condition("section", "=", row["section"])),
            k=depth,
            candidates=depth,
            dedupe=False,
            per_doc_cap=None,
        )
        stage_ms[row["block_key"]] = result.trace["total_ms"]
        for hit in result.hits:
            per = best.setdefault(hit.source_id, {})
            per[hit.section] = max(per.get(hit.section, -1.0), hit.scores["dense"])
            meta.setdefault(hit.source_id, {"deal_id": hit.deal_id})
    _attach_metadata(searcher, gen, principal, meta)
    deals = [
        SimilarDeal(
            source_id=src,
            deal_id=meta[src].get("deal_id"),
            score=round(sum(per.get(s, 0.0) for s in query_sections) / len(query_sections), 6),
            sections={s: per[s] for s in sorted(per)},
            asset_class=meta[src].get("asset_class"),
            state=meta[src].get("state"),
            metro=meta[src].get("metro"),
            units=meta[src].get("units"),
            deal_date=meta[src].get("deal_date"),
        )
        for src, per in best.items()
    ]
    deals.sort(key=lambda d: (-d.score, d.source_id))
    total = round((time.perf_counter() - t0) * 1000, 2)
    trace = {
        "kind": "similar",
        "namespace": ns,
        "generation": gen.id,
        "mode": "dense",
        "k": k,
        "query_chunks": len(rows),
        "section_search_ms": stage_ms,
        "total_ms": total,
    }
    out = SimilarResult(
        source_id=own,
        deal_id=deal_id,
        sections=query_sections,
        deals=deals[:k],
        trace=trace,
    )
    _record(searcher, f"similar:{deal}", principal, trace, len(out.deals), kind="similar")
    return out


def _attach_metadata(
    searcher: Searcher, gen: Generation, principal: Principal, meta: dict[str, dict[str, Any]]
) -> None:
    if not meta:
        return
    _, _, where = searcher.scope(principal, gen.spec.namespace, gen.id)
    rows = _read(
        searcher.corpus.store.table(gen),
        predicates.all_of([where, predicates.is_in("source_id", sorted(meta))]),
        ["source_id", *DEAL_COLUMNS],
    )
    for r in rows:
        meta[r["source_id"]].update({c: r.get(c) for c in DEAL_COLUMNS})


def _record(
    searcher: Searcher,
    query: str,
    principal: Principal,
    trace: dict[str, Any],
    hits: int,
    *,
    kind: str,
) -> None:
    if searcher.traces is None:
        return
    try:
        trace["trace_id"] = searcher.traces.record(
            query=query,
            tenant=principal.tenant,
            groups=principal.groups,
            trace=trace,
            hits=hits,
            kind=kind,
        )
    except RetryableError as exc:
        trace["trace_error"] = str(exc)


# -- cross-deal calibration: SQL over the principal's views ---------------------------------


@dataclass(slots=True)
class SqlResult:
    """Column names and rows of one read-only query, and the views it could see."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    views: dict[str, int]
    truncated: bool = False
    trace: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "columns": self.columns,
            "rows": [dict(zip(self.columns, r, strict=True)) for r in self.rows],
            "truncated": self.truncated,
            "views": self.views,
            "trace": self.trace,
        }


VIEW_HELP = {
    "deals": "one row per deal: source_id, collection, doc_id, deal_id, title, asset_class, "
    "subtype, state, metro, units, deal_date, uw_version",
    "blocks": "every parsed block of those deals, financial sections included: source_id, "
    "deal_id, section, block_key, chunk_ref, content_hash, source_version, content (JSON)",
    "chunks": "the generation's indexed rows without vectors (text, provenance, promoted columns)",
    "neighbours": "deal_id, neighbour_deal_id, section, score (cosine), rank, source_id, "
    "neighbour_source_id: each deal's nearest deals per embedded section",
}


def calibration_views(
    searcher: Searcher,
    *,
    principal: Principal,
    namespace: str | None = None,
    generation: str | None = None,
    neighbours: int = DEFAULT_NEIGHBOURS,
) -> tuple[Generation, dict[str, pa.Table]]:
    """The tables behind the SQL views, holding only rows the principal may see."""
    ns, gen, where = searcher.scope(principal, namespace, generation)
    corpus = searcher.corpus
    if corpus.store.exists(gen):
        rows = _read_arrow(corpus.store.table(gen), where)
    else:
        rows = vector_entry_schema(gen).empty_table()
    chunks = rows.drop_columns(["vector"])
    blocks = _visible_blocks(searcher, principal, ns)
    return gen, {
        "deals": _deals_table(blocks),
        "blocks": blocks,
        "chunks": chunks,
        "neighbours": neighbour_table(rows, neighbours),
    }


def _visible_blocks(searcher: Searcher, principal: Principal, namespace: str) -> pa.Table:
    """The parsed blocks of the namespace that the search eligibility rule lets ``principal`` see."""
    out: list[dict[str, Any]] = []
    collections = [c.name for c in searcher.corpus.config.collections_in(namespace)]
    for c in searcher.corpus.config.collections_in(namespace):
        if c.tenant != principal.tenant:
            continue  # the rule would drop every row: skip reading the partition
        table = searcher.corpus.collection_table("parsed_blocks", c.name, BLOCK_SCHEMA)
        if table is None:
            continue
        for b in eligible_rows(table, principal, collections).to_pylist():
            meta = json.loads(b["metadata"] or "{}")
            out.append(
                {
                    "source_id": b["source_id"],
                    "collection": b["collection"],
                    "doc_id": b["doc_id"],
                    "deal_id": meta.get("deal_id"),
                    "section": b["section"],
                    "block_key": b["block_key"],
                    "chunk_ref": b["chunk_ref"],
                    "content_hash": b["content_hash"],
                    "source_version": b["source_version"],
                    "content": b["content"],
                    "metadata": b["metadata"],
                }
            )
    schema = pa.schema(
        [
            ("source_id", pa.string()),
            ("collection", pa.string()),
            ("doc_id", pa.string()),
            ("deal_id", pa.string()),
            ("section", pa.string()),
            ("block_key", pa.string()),
            ("chunk_ref", pa.string()),
            ("content_hash", pa.string()),
            ("source_version", pa.string()),
            ("content", pa.string()),
            ("metadata", pa.string()),
        ]
    )
    return pa.Table.from_pylist(out, schema=schema)


def _deals_table(blocks: pa.Table) -> pa.Table:
    seen: dict[str, dict[str, Any]] = {}
    for b in blocks.to_pylist():
        if b["source_id"] in seen or not b["deal_id"]:
            continue
        meta = json.loads(b["metadata"] or "{}")
        seen[b["source_id"]] = {
            "source_id": b["source_id"],
            "collection": b["collection"],
            "doc_id": b["doc_id"],
            "deal_id": meta.get("deal_id"),
            "title": meta.get("title"),
            "asset_class": meta.get("asset_class"),
            "subtype": meta.get("subtype") or None,
            "state": meta.get("state"),
            "metro": meta.get("metro"),
            "units": meta.get("units"),
            "deal_date": meta.get("deal_date"),
            "uw_version": meta.get("uw_version"),
        }
    schema = pa.schema(
        [
            ("source_id", pa.string()),
            ("collection", pa.string()),
            ("doc_id", pa.string()),
            ("deal_id", pa.string()),
            ("title", pa.string()),
            ("asset_class", pa.string()),
            ("subtype", pa.string()),
            ("state", pa.string()),
            ("metro", pa.string()),
            ("units", pa.int64()),
            ("deal_date", pa.date32()),
            ("uw_version", pa.string()),
        ]
    )
    rows = [
        {**r, "deal_date": _date(r["deal_date"])} for r in sorted(seen.values(), key=_by_source)
    ]
    return pa.Table.from_pylist(rows, schema=schema)


def _by_source(r: dict[str, Any]) -> str:
    return str(r["source_id"])


def _date(value: Any) -> Any:
    import datetime as dt

    try:
        return dt.date.fromisoformat(str(value)) if value else None
    except ValueError:
        return None


NEIGHBOUR_SCHEMA = pa.schema(
    [
        ("deal_id", pa.string()),
        ("neighbour_deal_id", pa.string()),
        ("section", pa.string()),
        ("score", pa.float64()),
        ("rank", pa.int32()),
        ("source_id", pa.string()),
        ("neighbour_source_id", pa.string()),
    ]
)


def neighbour_table(rows: pa.Table, per_deal: int = DEFAULT_NEIGHBOURS) -> pa.Table:
    """Each deal's ``per_deal`` nearest other deals in every embedded section.

    A deal's section vector is the normalized mean of that section's chunk vectors, so a
    section split into several blocks or paragraphs still counts once. Similarity is cosine.
    ``rows`` must already be restricted to what the principal may see.
    """
    if rows.num_rows == 0 or per_deal < 1:
        return NEIGHBOUR_SCHEMA.empty_table()
    dim = rows.schema.field("vector").type.list_size
    flat = rows.column("vector").combine_chunks()
    matrix = flat.values.to_numpy(zero_copy_only=False).reshape(-1, dim).astype(np.float32)
    sources = rows.column("source_id").to_pylist()
    sections = rows.column("section").to_pylist()
    deal_ids = rows.column("deal_id").to_pylist()
    label = {s: (d or s) for s, d in zip(sources, deal_ids, strict=True)}
    out: dict[str, list[Any]] = {name: [] for name in NEIGHBOUR_SCHEMA.names}
    for section in sorted(set(sections)):
        idx_by_source: dict[str, list[int]] = {}
        for i, (s, sec) in enumerate(zip(sources, sections, strict=True)):
            if sec == section:
                idx_by_source.setdefault(s, []).append(i)
        names = sorted(idx_by_source)
        if len(names) < 2:
            continue
        vecs = np.stack([matrix[idx_by_source[n]].mean(axis=0) for n in names])
        vecs = _normalize(vecs)
        m = min(per_deal, len(names) - 1)
        for start in range(0, len(names), 1024):
            sims = vecs[start : start + 1024] @ vecs.T
            for row_i in range(sims.shape[0]):
                i = start + row_i
                sims[row_i, i] = -np.inf  # never your own neighbour
                top = np.argpartition(-sims[row_i], m - 1)[:m]
                top = top[np.lexsort((top, -sims[row_i, top]))]
                for rank, j in enumerate(top, start=1):
                    out["deal_id"].append(label[names[i]])
                    out["neighbour_deal_id"].append(label[names[j]])
                    out["section"].append(section)
                    out["score"].append(round(float(sims[row_i, j]), 6))
                    out["rank"].append(rank)
                    out["source_id"].append(names[i])
                    out["neighbour_source_id"].append(names[j])
    return pa.table(out, schema=NEIGHBOUR_SCHEMA)


def _normalize(vecs: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    result: npt.NDArray[np.float32] = (vecs / norms).astype(np.float32)
    return result


def run_sql(
    searcher: Searcher,
    sql: str,
    *,
    principal: Principal,
    namespace: str | None = None,
    generation: str | None = None,
    neighbours: int = DEFAULT_NEIGHBOURS,
    max_rows: int = MAX_SQL_ROWS,
    timeout_s: float = SQL_TIMEOUT_S,
    memory_limit: str = SQL_MEMORY_LIMIT,
    threads: int = SQL_THREADS,
) -> SqlResult:
    """Run one read-only SELECT over the principal's views ``deals``, ``blocks``, ``chunks`` and
    ``neighbours`` (see ``VIEW_HELP``).

    The query runs in a private in-memory DuckDB that holds only those views; file, network and
    extension access are switched off and the configuration (with the memory limit, the
    threads and no spilling to disk) is locked before the user's SQL runs, so it cannot read
    the registry, the warehouse or another tenant's rows, nor raise its own limits. A query
    still running after ``timeout_s`` is interrupted.

    Raises:
        ReadOnlyQueryError: the text is not exactly one SELECT statement.
        InvalidQueryError: DuckDB rejected the query (syntax, unknown column, ...), or a limit
            is not valid.
        QueryLimitError: the query ran past ``timeout_s`` or needed more than ``memory_limit``.
    """
    import duckdb

    _check_sql_limits(timeout_s=timeout_s, memory_limit=memory_limit, threads=threads)
    t0 = time.perf_counter()
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise InvalidQueryError(f"cannot parse the SQL: {_first_line(exc)}") from None
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        kinds = ", ".join(s.type.name for s in statements) or "nothing"
        raise ReadOnlyQueryError(
            f"only one read-only SELECT statement is allowed (got {kinds}); "
            f"views: {', '.join(VIEW_HELP)}"
        )
    gen, tables = calibration_views(
        searcher,
        principal=principal,
        namespace=namespace,
        generation=generation,
        neighbours=neighbours,
    )
    t1 = time.perf_counter()
    con = duckdb.connect(
        ":memory:",
        config={
            "memory_limit": memory_limit,
            "threads": threads,
            "temp_directory": "",  # nothing spills to disk: past the limit the query fails
        },
    )
    try:
        con.execute("SET enable_progress_bar = false")
        for name, table in tables.items():
            con.register(f"_{name}", table)
        con.execute("CREATE VIEW deals AS SELECT * FROM _deals")
        con.execute(
            "CREATE VIEW blocks AS SELECT * REPLACE (content::JSON AS content) FROM _blocks"
        )
        con.execute("CREATE VIEW chunks AS SELECT * FROM _chunks")
        con.execute("CREATE VIEW neighbours AS SELECT * FROM _neighbours")
        con.execute("SET enable_external_access = false")
        con.execute("SET autoinstall_known_extensions = false")
        con.execute("SET autoload_known_extensions = false")
        con.execute("SET lock_configuration = true")
        timer = threading.Timer(timeout_s, con.interrupt)
        timer.daemon = True
        timer.start()
        try:
            cur = con.execute(sql)
            columns = [d[0] for d in cur.description or []]
            rows = cur.fetchmany(max_rows + 1)
        except duckdb.InterruptException:
            raise QueryLimitError(
                f"the SQL ran past its time limit of {timeout_s:g} s and was stopped; narrow "
                "it (a WHERE, fewer joins, a LIMIT) or give a longer --timeout"
            ) from None
        except duckdb.OutOfMemoryException:
            raise QueryLimitError(
                f"the SQL needed more than its memory limit of {memory_limit} and was "
                "stopped; narrow it (fewer rows or columns, fewer joins) or give a larger "
                "--memory-limit"
            ) from None
        except duckdb.Error as exc:
            raise InvalidQueryError(f"the SQL failed: {_first_line(exc)}") from None
        finally:
            timer.cancel()
    finally:
        con.close()
    t2 = time.perf_counter()
    truncated = len(rows) > max_rows
    trace = {
        "kind": "sql",
        "namespace": gen.spec.namespace,
        "generation": gen.id,
        "views_ms": round((t1 - t0) * 1000, 2),
        "query_ms": round((t2 - t1) * 1000, 2),
        "total_ms": round((t2 - t0) * 1000, 2),
    }
    result = SqlResult(
        columns=columns,
        rows=[tuple(r) for r in rows[:max_rows]],
        views={name: t.num_rows for name, t in tables.items()},
        truncated=truncated,
        trace=trace,
    )
    _record(searcher, sql, principal, trace, len(result.rows), kind="sql")
    return result


def _check_sql_limits(*, timeout_s: float, memory_limit: str, threads: int) -> None:
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise InvalidQueryError(
            f"the SQL time limit must be a positive number of seconds, not {timeout_s}"
        )
    if not _SIZE.match(memory_limit.strip()):
        raise InvalidQueryError(
            f"the SQL memory limit {memory_limit!r} is not a size such as 512MB or 2GB"
        )
    if threads < 1:
        raise InvalidQueryError(f"the SQL needs at least one thread, not {threads}")


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().split("\n")[0]


# -- risk patterns ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RiskMatch:
    """A prior deal whose risk section matches, and the flag in it that matches best."""

    source_id: str
    deal_id: str | None
    deal_date: str | None
    score: float
    flag_id: str | None
    severity: str | None
    description: str | None
    mitigant: str | None
    resolution: str | None
    summary: str | None
    chunk_ref: str
    excerpt: str


@dataclass(slots=True)
class RiskPatternResult:
    """The risk query and every matching prior deal, best first."""

    query: str
    matches: list[RiskMatch]
    trace: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "matches": [asdict(m) for m in self.matches],
            "trace": self.trace,
        }


def risk_patterns(
    searcher: Searcher,
    query: str | None = None,
    *,
    principal: Principal,
    deal: str | None = None,
    flag: str | None = None,
    before: str | None = None,
    k: int = 10,
    mode: str = "hybrid",
    namespace: str | None = None,
    generation: str | None = None,
    filters: FilterSpec = None,
) -> RiskPatternResult:
    """Prior deals whose ``risk_assessment`` matches a risk, each with its mitigant and resolution.

    Give the risk as text (``query``), or as a flag of a deal (``deal`` + ``flag``): the flag's
    own words become the query, that deal is excluded, and "prior" means dated before it.

    Args:
        before: only deals dated before this ISO date (default: the flag's deal's date, if any).

    Raises:
        InvalidQueryError: neither a query nor a deal flag, the deal is not visible, or it has
            no such flag.
    """
    t0 = time.perf_counter()
    conditions = [Condition("section", "=", RISK_SECTION)]
    if deal is not None:
        if not flag:
            raise InvalidQueryError("give the flag id of the deal's risk to look for (--flag)")
        ns, gen, rows = deal_rows(
            searcher, deal, principal=principal, namespace=namespace, generation=generation
        )
        risk_rows = [r for r in rows if r["section"] == RISK_SECTION]
        if not risk_rows:
            raise InvalidQueryError(
                f"no risk_assessment of deal {deal!r} is visible to tenant {principal.tenant!r} "
                "with the given groups"
            )
        flags = _flags_of(searcher, risk_rows)
        wanted = _norm_flag(flag)
        found = [f for f in flags if _norm_flag(str(f.get("id", ""))) == wanted]
        if not found:
            known = ", ".join(str(f.get("id")) for f in flags) or "none"
            raise InvalidQueryError(f"deal {deal!r} has no risk flag {flag!r} (its flags: {known})")
        query = _flag_text(found[0])
        conditions.append(Condition("source_id", "!=", risk_rows[0]["source_id"]))
        if before is None and risk_rows[0].get("deal_date"):
            before = str(risk_rows[0]["deal_date"])
        namespace, generation = ns, gen.id
    if not query or not query.strip():
        raise InvalidQueryError("give the risk to look for as text, or a deal and its flag")
    if before is not None:
        conditions.append(Condition("deal_date", "<", before))
    inner = Searcher(searcher.corpus)
    result = inner.search(
        query,
        principal=principal,
        k=k,
        namespace=namespace,
        generation=generation,
        mode=mode,
        filters=as_filter(filters).with_conditions(*conditions),
        per_doc_cap=1,
    )
    t1 = time.perf_counter()
    matches: list[RiskMatch] = []
    if result.hits:
        gen = searcher.corpus.registry.require(result.trace["generation"])
        blocks = _block_contents(searcher, [h.provenance.chunk_ref for h in result.hits])
        chooser = _FlagChooser(searcher, gen, query)
        for hit in result.hits:
            content, meta = blocks.get(hit.provenance.chunk_ref.split("#", 1)[0], ({}, {}))
            flags = [f for f in content.get("flags", []) if isinstance(f, dict)]
            best = chooser.best(flags)
            matches.append(
                RiskMatch(
                    source_id=hit.source_id,
                    deal_id=hit.deal_id,
                    deal_date=_opt(meta.get("deal_date")),
                    score=hit.score,
                    flag_id=_opt(best.get("id")),
                    severity=_opt(best.get("severity")),
                    description=_opt(best.get("description")),
                    mitigant=_opt(best.get("mitigant")),
                    resolution=_opt(best.get("resolution")),
                    summary=_opt(content.get("summary")),
                    chunk_ref=hit.provenance.chunk_ref,
                    excerpt=hit.excerpt,
                )
            )
    t2 = time.perf_counter()
    trace = {
        **result.trace,
        "kind": "risk_patterns",
        "flag_ms": round((t2 - t1) * 1000, 2),
        "total_ms": round((t2 - t0) * 1000, 2),
    }
    _record(searcher, query, principal, trace, len(matches), kind="risk_patterns")
    return RiskPatternResult(query=query, matches=matches, trace=trace)


def _opt(value: Any) -> str | None:
    return None if value is None else " ".join(str(value).split())


def _norm_flag(text: str) -> str:
    return re.sub(r"[\s\-]+", "_", text.strip().lower())


def _flag_text(f: dict[str, Any]) -> str:
    words = str(f.get("id", "")).replace("_", " ")
    return " ".join(f"{words}. {f.get('description', '')}".split())


def _block_contents(
    searcher: Searcher, chunk_refs: list[str]
) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """(content, document metadata) of each chunk's parsed block, from the warehouse, keyed by
    the block's chunk_ref. The chunk_ref pins the source version, so a block that changed since
    the generation was written is simply not found."""
    wanted = {ref.split("#", 1)[0] for ref in chunk_refs}
    collections = sorted({ref.removeprefix("chunk://").split("/", 1)[0] for ref in wanted})
    out: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for name in collections:
        table = searcher.corpus.collection_table("parsed_blocks", name, BLOCK_SCHEMA)
        if table is None:
            continue
        for b in table.select(["chunk_ref", "content", "metadata"]).to_pylist():
            if b["chunk_ref"] in wanted:
                out[b["chunk_ref"]] = (json.loads(b["content"]), json.loads(b["metadata"] or "{}"))
    return out


def _flags_of(searcher: Searcher, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    blocks = _block_contents(searcher, [r["chunk_ref"] for r in rows])
    flags: list[dict[str, Any]] = []
    for content, _meta in blocks.values():
        flags.extend(f for f in content.get("flags", []) if isinstance(f, dict))
    return flags


class _FlagChooser:
    """Picks the flag of a risk block that matches the query: an exact flag id, else the flag
    whose text is nearest the query under the generation's own embedder."""

    def __init__(self, searcher: Searcher, gen: Generation, query: str) -> None:
        self.searcher = searcher
        self.gen = gen
        self.query = query
        self._qvec: npt.NDArray[np.float32] | None = None

    def best(self, flags: list[dict[str, Any]]) -> dict[str, Any]:
        if not flags:
            return {}
        wanted = _norm_flag(self.query)
        exact = [f for f in flags if _norm_flag(str(f.get("id", ""))) == wanted]
        if exact:
            return exact[0]
        if len(flags) == 1:
            return flags[0]
        if self._qvec is None:
            self._qvec = self.searcher.embed_query(self.query, self.gen)
        embedder = self.searcher.corpus.embedder(self.gen.spec.profile)
        texts = [
            " ".join(str(f.get(key, "")) for key in ("id", "description", "mitigant"))
            for f in flags
        ]
        vecs = _normalize(np.asarray(embedder.embed(texts), dtype=np.float32))
        q = _normalize(self._qvec.reshape(1, -1))[0]
        return flags[int(np.argmax(vecs @ q))]
