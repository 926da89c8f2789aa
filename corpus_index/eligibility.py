"""Who may see a row: the tenant/ACL eligibility rule, written once.

A row is visible to a principal when it belongs to the principal's tenant, shares at least one
ACL group with the principal, and belongs to a collection still configured in the namespace.
The rule is one predicate in SQL that both engines run: LanceDB (DataFusion) as the prefilter
of every search, and DuckDB over the warehouse's parsed blocks behind the ``corpus sql`` views.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from corpus_index import predicates


@dataclass(frozen=True, slots=True)
class Principal:
    """Who asks: a tenant and the groups they belong to."""

    tenant: str
    groups: tuple[str, ...] = ()


def eligibility(principal: Principal, collections: Sequence[str]) -> str:
    """The predicate every read on behalf of ``principal`` runs inside: the principal's tenant,
    an ACL group in common, and one of the live ``collections``."""
    return predicates.all_of(
        [
            predicates.eq("tenant_id", principal.tenant),
            predicates.list_overlaps("acl_groups", list(principal.groups)),
            predicates.is_in("collection", list(collections)),
        ]
    )


def eligible_rows(table: pa.Table, principal: Principal, collections: Sequence[str]) -> pa.Table:
    """The rows of ``table`` (with ``tenant_id``, ``acl_groups``, ``collection``) that
    ``principal`` may see, selected by ``eligibility`` run in an in-memory DuckDB."""
    import duckdb

    con = duckdb.connect(":memory:")
    try:
        con.register("candidate_rows", table)
        where = eligibility(principal, collections)
        return con.sql(f"SELECT * FROM candidate_rows WHERE {where}").to_arrow_table()
    finally:
        con.close()
