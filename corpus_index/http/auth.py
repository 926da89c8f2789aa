"""Who is asking: the principal of the request's API key, narrowed to the groups it asks for.

The principal comes from the key only. A request may name a subset of the key's groups (to
search as less than it may); naming a group the key lacks, or any tenant, is refused (403).
``/metrics`` asks for a key whose scopes hold ``metrics`` (unless ``serve.open_metrics``),
and a key without ``search`` in its scopes reaches no ``/v1`` route.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from corpus_index.eligibility import Principal
from corpus_index.errors import ConfigError
from corpus_index.http.keys import METRICS, KeyEntry
from corpus_index.http.problems import (
    FORBIDDEN,
    KEYS_UNAVAILABLE,
    UNAUTHORIZED,
    VALIDATION,
    Problem,
)

log = logging.getLogger("corpus_index.http")
bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer <key>`.")


def caller(
    request: Request, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> Principal:
    """The principal of the request's key (401 when there is none, or it is not accepted;
    403 when its scopes hold no ``search``)."""
    if "tenant" in request.query_params:
        raise Problem(FORBIDDEN, "the tenant comes from the API key; a request cannot name one")
    entry = _entry(request, creds)
    if entry.principal is None:
        raise Problem(
            FORBIDDEN,
            f"the API key may not search (its scopes are {', '.join(sorted(entry.scopes))}); "
            "a key acts for a tenant only where its entry's scopes hold search",
        )
    return entry.principal


def metrics_reader(
    request: Request, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> None:
    """Return where the request may read ``/metrics``: ``serve.open_metrics`` is set, or its
    key's scopes hold ``metrics`` (401 without an accepted key, 403 with one that may not)."""
    if request.app.state.service.serve.open_metrics:
        return
    entry = _entry(request, creds)
    if METRICS not in entry.scopes:
        raise Problem(
            FORBIDDEN,
            "the API key may not read /metrics: its keys-file entry's scopes need metrics "
            "(`corpus api-key --metrics`)",
        )


def _entry(request: Request, creds: HTTPAuthorizationCredentials | None) -> KeyEntry:
    """The keys-file entry of the request's key (401 when there is none, or it is unknown)."""
    if creds is None or not creds.credentials:
        raise Problem(UNAUTHORIZED, "no API key: send `Authorization: Bearer <key>`")
    try:
        found: KeyEntry | None = request.app.state.service.keys.entry(creds.credentials)
    except ConfigError as exc:
        # the file's path and its lines are the operator's to read, not the caller's
        log.error("the API keys cannot be read: %s", exc)
        raise Problem(
            KEYS_UNAVAILABLE, "the server cannot read its API keys now; its log names the problem"
        ) from None
    if found is None:
        raise Problem(UNAUTHORIZED, "the API key is not valid (unknown or revoked)")
    request.state.key_name = found.name
    return found


def narrowed(principal: Principal, groups: Sequence[str] | None) -> Principal:
    """``principal`` with only ``groups`` (None: all of its groups; an empty list, as
    ``"groups": []`` sends, and an empty name, as ``?groups=`` sends, are refused 422 rather
    than read as no group, which would see nothing and answer an empty 200)."""
    if groups is None:
        return principal
    if not groups:
        raise Problem(
            VALIDATION,
            "groups: the list is empty; name some of the key's groups, or leave groups out "
            "to act as all of them",
        )
    if not all(groups):
        raise Problem(
            VALIDATION,
            "groups: a group name is empty (as `?groups=` with no value sends); name some of "
            "the key's groups, or leave groups out to act as all of them",
        )
    extra = sorted(set(groups) - set(principal.groups))
    if extra:
        raise Problem(
            FORBIDDEN,
            f"the API key does not grant group(s) {', '.join(extra)}; a request may only "
            "narrow the key's groups",
        )
    return Principal(principal.tenant, tuple(g for g in principal.groups if g in set(groups)))


Caller = Annotated[Principal, Depends(caller)]
MetricsReader = Annotated[None, Depends(metrics_reader)]
