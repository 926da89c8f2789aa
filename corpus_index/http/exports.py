"""Flat-blob export downloads (seed "Embeddings") under ``/v1/namespaces/{namespace}/``.

A key downloads a researcher's export of a ``profiles`` collection of its own tenant
(``index.json``, the blob, the chunks file), public or (``tree=restricted``) restricted, only
when it may see every source the export holds: each chunk's source, as the chunks file names
it, must be of the key's tenant and share an ACL group with the key (read from the
collection's ``parsed_blocks``, the scope every row of the index comes from). A tier is not an
access rule here, as it is none in search: a key that may read a restricted chunk's source may
download its vector. An export holding no chunk (a researcher whose sources are all in the
other tree) is served only to a key that may see one of the researcher's sources: to any other
it would tell that the researcher is there.

The collection's centroids (``collection/embeddings/``: ``index.json`` and the blob) mix every
chunk of each researcher they list, restricted ones included, with no chunks file to say
which: they are served only to a key that may see every source of every researcher listed.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, Response

from corpus_index.eligibility import Principal
from corpus_index.flat_blob import chunks_name
from corpus_index.flat_exports import export_roots
from corpus_index.http.auth import Caller, narrowed
from corpus_index.http.problems import NOT_FOUND, Problem
from corpus_index.http.routes import own_namespace, service, stored_file
from corpus_index.http.service import Service
from corpus_index.kinds import kind_of
from corpus_index.kinds.profiles import CENTROIDS_SLUG

router = APIRouter(prefix="/v1/namespaces", tags=["exports"])


def _sources(svc: Service, collection: str, principal: Principal) -> tuple[set[str], set[str]]:
    """Every source of ``collection``, and those the principal may see (tenant and an ACL
    group in common)."""
    blocks = svc.corpus.read(
        "parsed_blocks", (collection,), columns=["source_id", "tenant_id", "acl_groups"]
    )
    mine = set(principal.groups)
    every: set[str] = set()
    visible: set[str] = set()
    for r in blocks.to_pylist():
        every.add(r["source_id"])
        if r["tenant_id"] == principal.tenant and mine & set(r["acl_groups"] or ()):
            visible.add(r["source_id"])
    return every, visible


def _of(collection: str, slug: str, sources: set[str]) -> set[str]:
    """The sources of researcher ``slug`` among ``sources`` (``<collection>/<slug>/<file>``)."""
    return {s for s in sources if s.startswith(f"{collection}/{slug}/")}


@router.get(
    "/{namespace}/exports/{collection}/{slug}/{file}",
    summary="A file of a researcher's flat-blob export (index.json, blob, chunks), or of the "
    "collection's centroids (slug `collection`)",
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
    tree: Annotated[
        Literal["public", "restricted"],
        Query(description="The researcher's public export, or their restricted one."),
    ] = "public",
) -> Response:
    svc = service(request)
    ns = own_namespace(svc, namespace, principal)
    who = narrowed(principal, groups)
    missing = Problem(NOT_FOUND, f"no export {collection}/{slug}/{file} is visible to this key")
    config = svc.corpus.config
    cfg = config.collections.get(collection)
    if cfg is None or cfg.namespace != ns or cfg.tenant != who.tenant:
        raise missing
    centroids = slug == CENTROIDS_SLUG
    if not kind_of(cfg).flat_exports or (centroids and tree != "public"):
        raise missing
    profiles = [p.name for p in config.profiles_in(ns)]
    profile = profile or (profiles[0] if profiles else "")
    if profile not in profiles:
        raise Problem(NOT_FOUND, f"namespace {ns!r} has no profile {profile!r}")
    public, restricted = export_roots(svc.corpus, profile, collection)
    root = public if tree == "public" else restricted
    folder = (root / slug / "embeddings").resolve()
    index_path = folder / "index.json"
    if not folder.is_relative_to(root.resolve()) or not index_path.is_file():
        raise missing
    index = json.loads(index_path.read_text(encoding="utf-8"))
    blob = str(index.get("file", ""))
    names = {"index.json", blob} if centroids else {"index.json", blob, chunks_name(blob)}
    if file not in names:
        raise missing
    every, visible = _sources(svc, collection, who)
    if centroids:
        # each row mixes every chunk of its researcher: all their sources, in either tree
        held = set().union(*(_of(collection, str(r), every) for r in index.get("rows", [])))
    else:
        chunks = json.loads((folder / chunks_name(blob)).read_text(encoding="utf-8"))
        held = {str(c.get("source_id", "")) for c in chunks}
    if not held <= visible:
        raise missing  # the export holds a source the key may not see: none of it is shown
    if not held and not _of(collection, slug, visible):
        raise missing  # an empty export would still tell that the researcher is there
    media = "application/octet-stream" if file == blob else "application/json"
    return stored_file(folder / file, media_type=media)
