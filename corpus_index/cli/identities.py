"""``corpus identities``: the people each tenant's messages name, and merging two of them.

``list`` reads what the last sync of each messages collection wrote (see
:mod:`corpus_index.identity_store`); ``merge`` records a merge in the home, which the next
``corpus sync`` applies: mentions move to the survivor, the groups they are in are anchored
to it and, where their text names the person differently, embedded again.
"""

from __future__ import annotations

import click

from corpus_index.cli.app import emit_json, handle_errors, main, settings_of
from corpus_index.errors import ConfigError, IdentityError
from corpus_index.home import Home
from corpus_index.identity_store import (
    KnownIdentity,
    find_identity,
    known_identities,
    merges_file,
    record_merge,
)


@main.group("identities")
def identities() -> None:
    """The people of each tenant's messages: list them, merge two that are one person."""


@identities.command("list")
@click.option("--tenant", help="Only this tenant's identities.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON list.")
@click.pass_context
@handle_errors
def list_identities(ctx: click.Context, tenant: str | None, as_json: bool) -> None:
    """Every identity per tenant, with its aliases, details and mention count, as the last
    sync left them (discovered ones marked), so an operator can see what to merge."""
    home = Home(settings_of(ctx))
    tenants = {c.tenant for c in home.config.collections.values()}
    if tenant is not None and tenant not in tenants:
        raise ConfigError(
            f"no collection of tenant {tenant!r} is configured (tenants: "
            f"{', '.join(sorted(tenants)) or 'none'})"
        )
    people = known_identities(home, tenant=tenant)
    if as_json:
        emit_json([p._asdict() for p in people])
        return
    if not people:
        click.echo("no identities: sync a messages collection first")
        return
    current = None
    for p in people:
        if p.tenant_id != current:
            current = p.tenant_id
            click.echo(f"tenant {current}")
        click.echo(f"  {_line(p)}")


def _line(p: KnownIdentity) -> str:
    details = ", ".join([*p.aliases, *p.emails, *p.phones])
    origin = "" if p.origin == "people_file" else f" [{p.origin} {p.confidence:.2f}]"
    known_as = f" ({details})" if details else ""
    return f"{p.identity_id}  {p.key}  {p.name}{known_as}{origin}  mentions: {p.mentions}"


@identities.command("merge")
@click.argument("merged")
@click.argument("survivor")
@click.option("--tenant", help="The tenant both belong to (needed when a key is in several).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_context
@handle_errors
def merge(
    ctx: click.Context, merged: str, survivor: str, tenant: str | None, as_json: bool
) -> None:
    """Merge identity MERGED into SURVIVOR (identity ids or keys, as `list` shows them).

    The merge is recorded in the home; the next `corpus sync` moves MERGED's mentions to
    SURVIVOR, re-anchors the groups they are in and re-embeds those whose text changes.
    Both must be identities of one tenant, and one of its collections must hold both (a merge
    is applied within a collection).
    """
    home = Home(settings_of(ctx))
    a, a_elsewhere = find_identity(home, merged, tenant=tenant)
    tenant = tenant or (a.tenant_id if a is not None else None)
    b, b_elsewhere = find_identity(home, survivor, tenant=tenant)
    if a is None or b is None:
        missing, elsewhere = (merged, a_elsewhere) if a is None else (survivor, b_elsewhere)
        if elsewhere:
            others = ", ".join(sorted({p.tenant_id for p in elsewhere}))
            raise IdentityError(
                f"{missing!r} is an identity of tenant {others}, not {tenant!r}: "
                "merges never cross tenants"
            )
        where = f"tenant {tenant!r}" if tenant else "any tenant"
        raise IdentityError(
            f"no identity {missing!r} in {where}; see `corpus identities list` (after a sync)"
        )
    if a.tenant_id != b.tenant_id:
        raise IdentityError(
            f"{merged!r} is of tenant {a.tenant_id!r} and {survivor!r} of {b.tenant_id!r}: "
            "merges never cross tenants"
        )
    if a.identity_id == b.identity_id:
        raise IdentityError(f"cannot merge identity {a.identity_id!r} ({a.name}) into itself")
    if not set(a.collections) & set(b.collections):
        # each collection's identity pass applies the tenant's merges to its own registry:
        # one holding only one side sets the merge aside, so no sync would ever apply it
        raise IdentityError(
            f"no collection of tenant {a.tenant_id!r} holds both {merged!r} (in "
            f"{', '.join(a.collections)}) and {survivor!r} (in {', '.join(b.collections)}): "
            "a merge is applied within a collection that holds both, so this one would never "
            "take effect; identities of different collections are not merged"
        )
    path = record_merge(home, a.tenant_id, a.identity_id, b.identity_id)
    out = {
        "tenant": a.tenant_id,
        "merged": a.identity_id,
        "survivor": b.identity_id,
        "mentions": a.mentions,
        "recorded_in": str(path),
    }
    if as_json:
        emit_json(out)
        return
    click.echo(
        f"recorded: {a.name} ({a.identity_id}, {a.mentions} mentions) into {b.name} "
        f"({b.identity_id}) for tenant {a.tenant_id}, in {merges_file(home, a.tenant_id)}; "
        "run `corpus sync` to re-anchor and re-embed the groups concerned"
    )
