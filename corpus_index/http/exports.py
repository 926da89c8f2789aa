"""Flat-blob export downloads (seed "Embeddings") under ``/v1/namespaces/{namespace}/``.

A key downloads a researcher's public export of a ``profiles`` collection of its own tenant
(``index.json``, the blob, the chunks file) only when it may see every source the export holds:
each chunk's source, as the chunks file names it, must be of the key's tenant and share an ACL
group with the key (read from the collection's ``parsed_blocks``, the scope every row of the
index comes from). An export holding no chunk (a researcher whose sources are all restricted)
is served only to a key that may see one of the researcher's sources: to any other it would
tell that the researcher is there. Restricted exports and collection centroids (which mix every chunk of a
researcher, restricted ones included) are not served over HTTP.
"""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, Response

from corpus_index.eligibility import Principal
from corpus_index.flat_blob import chunks_name
from corpus_index.flat_exports import export_roots
from corpus_index.http.auth import Caller, narrowed
from corpus_index.http.problems import NOT_FOUND, Problem
from corpus_index.http.routes import known_namespace, service, stored_file
from corpus_index.http.service import Service
from corpus_index.kinds import kind_of
from corpus_index.kinds.profiles import CENTROIDS_SLUG

router = APIRouter(prefix="/v1/namespaces", tags=["exports"])


def _visible_sources(svc: Service, collection: str, principal: Principal) -> set[str]:
    """The sources of ``collection`` the principal may see (tenant and an ACL group in common)."""
    blocks = svc.corpus.read(
        "parsed_blocks", (collection,), columns=["source_id", "tenant_id", "acl_groups"]
    )
    mine = set(principal.groups)
    return {
        r["source_id"]
        for r in blocks.to_pylist()
        if r["tenant_id"] == principal.tenant and mine & set(r["acl_groups"] or ())
    }


@router.get(
    "/{namespace}/exports/{collection}/{slug}/{file}",
    summary="A file of one researcher's public flat-blob export (index.json, blob, chunks)",
    response_class=FileResponse,
)
def export_file(
    namespace: str,
    collection: str,
    slug: str,
    file: str,
    request: Request,
    principal: Caller,
    profile: Annotated[
        str | None, Query(description="Profile (default: the namespace's first).")
    ] = None,
    groups: Annotated[list[str] | None, Query(description="Narrow the key's groups.")] = None,
) -> Response:
    svc = service(request)
    ns = known_namespace(svc, namespace)
    who = narrowed(principal, groups)
    missing = Problem(NOT_FOUND, f"no export {collection}/{slug}/{file} is visible to this key")
    config = svc.corpus.config
    cfg = config.collections.get(collection)
    if cfg is None or cfg.namespace != ns or cfg.tenant != who.tenant:
        raise missing
    if not kind_of(cfg).flat_exports or slug == CENTROIDS_SLUG:
        raise missing
    profiles = [p.name for p in config.profiles_in(ns)]
    profile = profile or (profiles[0] if profiles else "")
    if profile not in profiles:
        raise Problem(NOT_FOUND, f"namespace {ns!r} has no profile {profile!r}")
    public, _ = export_roots(svc.corpus, profile, collection)
    folder = (public / slug / "embeddings").resolve()
    index_path = folder / "index.json"
    if not folder.is_relative_to(public.resolve()) or not index_path.is_file():
        raise missing
    index = json.loads(index_path.read_text(encoding="utf-8"))
    blob = str(index.get("file", ""))
    names = {"index.json", blob, chunks_name(blob)}
    if file not in names:
        raise missing
    chunks = json.loads((folder / chunks_name(blob)).read_text(encoding="utf-8"))
    held = {str(c.get("source_id", "")) for c in chunks}
    visible = _visible_sources(svc, collection, who)
    if not held <= visible:
        raise missing  # the export holds a source the key may not see: none of it is shown
    if not held and not any(s.startswith(f"{collection}/{slug}/") for s in visible):
        raise missing  # an empty export would still tell that the researcher is there
    media = "application/octet-stream" if file == blob else "application/json"
    return stored_file(folder / file, media_type=media)
