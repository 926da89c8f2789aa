"""The lifecycle of generations: which checks a promotion needs, promote, roll back, retire.

Promotion moves a namespace's ACTIVE pointer atomically, only to a generation that ran and
passed every required gate, and holds the rows its sources call for now; the registry
enforces the gates in the same transaction. It holds the home's lock (``homelock``) while it
does, so it never runs beside a sync in flight: a sync still changing the generations would
otherwise let it serve one that lacks a change the old one already served.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypedDict, Unpack

import pyarrow as pa
import pyarrow.compute as pc

from corpus_index import gates
from corpus_index.config import Settings
from corpus_index.errors import (
    ActiveMismatchError,
    ConfigError,
    DamagedStateError,
    MissingGenerationError,
    PromotionRefusedError,
    RetryableError,
    UnknownNamespaceError,
)
from corpus_index.group_gates import LINKED_GROUP_GATES
from corpus_index.hashing import sha256_hex
from corpus_index.home import Home
from corpus_index.homelock import home_lock_of
from corpus_index.registry import Generation, open_registry
from corpus_index.rows import generation_inputs, tombstoned_sources

EVAL_CHECK = gates.check_key("index_generation", gates.EVAL_GATE)
GROUP_ROWS_GATE = next(g for g in LINKED_GROUP_GATES if g[0] == "group_rows_have_groups")


def required_checks(home: Home, profile: str, *, for_rollback: bool = False) -> set[str]:
    """Every gate a generation of ``profile`` must have run and passed to be promoted:
    the embeddings and index_rows checks of each collection it covers (of each of its shards,
    for a sharded one), and its own.

    The eval gate is left out when rolling back (the rollback target served before, and
    comparing it with the generation it replaces is exactly what a rollback overrides) and
    for a namespace that declares ``eval_gate: off``. A promotion also needs each
    collection's ``group_rows_have_groups`` (no group row without its group); a rollback does
    not, as its target served before and may predate that check.
    """
    p = home.profile(profile)
    config = home.config
    row_gates = gates.INDEX_ROW_GATES + ([] if for_rollback else [GROUP_ROWS_GATE])
    required = {
        gates.check_key(asset, name, key)
        for c in config.collections_in(p.namespace)
        if config.profile_covers(profile, c.name)
        for key in c.partitions  # each shard's own checks
        for asset, checks in (
            ("embeddings", gates.EMBEDDING_GATES),
            ("index_rows", row_gates),
        )
        for name, _ in checks
    }
    ns = config.namespaces.get(p.namespace)
    eval_required = not for_rollback and (ns is None or ns.eval_gate)
    required |= {
        gates.check_key("index_generation", name)
        for name, _ in gates.GENERATION_GATES
        if eval_required or name != gates.EVAL_GATE
    }
    return required


class PointerMove(NamedTuple):
    """The generation that serves after a promotion or rollback, and whether this call moved
    the pointer (``False``: it already served, e.g. a retry of a move that committed)."""

    generation: Generation
    moved: bool
    note: str = ""


class MoveOptions(TypedDict, total=False):
    """The keyword options of ``promote``, as ``move_pointer`` documents them."""

    action: str
    run_id: str | None
    wait_s: float
    expect_active: str | None


def promote(
    home: Home,
    namespace: str,
    generation_id: str | None = None,
    **options: Unpack[MoveOptions],
) -> Generation:
    """Point ``namespace`` at a generation, atomically; the generation that serves after.

    ``action="promote"`` with no ``generation_id`` picks the newest READY generation of the
    namespace; ``action="rollback"`` goes back to the generation that was ACTIVE before.
    See ``move_pointer`` for the options and what it raises.
    """
    return move_pointer(home, namespace, generation_id, **options).generation


def move_pointer(
    home: Home,
    namespace: str,
    generation_id: str | None = None,
    *,
    action: str = "promote",
    run_id: str | None = None,
    wait_s: float = 0.0,
    expect_active: str | None = None,
) -> PointerMove:
    """Promote or roll back ``namespace`` (see ``promote``), saying whether the pointer moved.

    ``action="promote"`` with no ``generation_id`` picks the newest READY generation of the
    namespace (an explicit operator request, e.g. ``corpus promote``; the ``active_generation``
    asset never calls this without a named generation); ``action="rollback"`` goes back to the
    generation that was ACTIVE before.

    Holds the home's lock, waiting up to ``wait_s`` seconds for a sync in flight. With
    ``expect_active`` (the generation the caller believes serves now), a retry of a move that
    already committed is a no-op that returns the current state, and any other mismatch is
    refused, so a retried rollback never rolls back twice.

    Raises:
        UnknownNamespaceError, MissingGenerationError, PromotionRefusedError (among others:
        the eval gate did not run, for want of a golden set, and the namespace does not
        declare ``eval_gate: off``; the target lags its sources, see
        ``lagging_collections``), HomeBusyError (a sync or another promotion of the home
        is in flight), ActiveMismatchError (``expect_active`` does not serve and this very
        move was not its last one).
    """
    if namespace not in home.config.namespaces:
        raise UnknownNamespaceError(f"no namespace {namespace!r} is configured")
    with home_lock_of(home.settings, action, wait_s=wait_s):
        current = home.registry.active(namespace)
        if expect_active is not None and (current.id if current else "") != expect_active:
            return _already_moved(home, namespace, generation_id, current, action, expect_active)
        gen = _promote(home, namespace, generation_id, action=action, run_id=run_id)
        return PointerMove(gen, moved=current is None or current.id != gen.id)


def _already_moved(
    home: Home,
    namespace: str,
    generation_id: str | None,
    current: Generation | None,
    action: str,
    expect_active: str,
) -> PointerMove:
    """The current state, if the namespace's last pointer move was this very move from
    ``expect_active`` (a retry after it committed); else ActiveMismatchError."""
    history = home.registry.history(namespace)
    last = history[-1] if history else None
    if (
        current is not None
        and last is not None
        and last["action"] == action
        and last["from_generation"] == expect_active
        and last["to_generation"] == current.id
        and generation_id in (None, "", current.id)
    ):
        note = (
            f"namespace {namespace!r} already moved from {expect_active} to {current.id} "
            f"({action} at {last['changed_at']:%Y-%m-%d %H:%M:%S %Z}, run {last['run_id']}); "
            "nothing changed"
        )
        return PointerMove(current, moved=False, note=note)
    serving = current.id if current else "no generation"
    error = ActiveMismatchError(
        f"namespace {namespace!r} serves {serving}, not {expect_active} as expected, so the "
        f"{action} was refused; nothing changed"
    )
    error.add_note(
        "someone else moved the pointer since you looked: check `corpus generations`, then "
        f"retry with --expect-active {current.id if current else ''} if the {action} is still wanted"
    )
    raise error


def _promote(
    home: Home, namespace: str, generation_id: str | None, *, action: str, run_id: str | None
) -> Generation:
    target = _target(home, namespace, generation_id, action=action)
    if target.status in ("RETIRED", "FAILED"):
        raise PromotionRefusedError(
            f"generation {target.id} is {target.status}"
            + (": its table was dropped" if target.status == "RETIRED" else "")
            + f", so it cannot serve again; build a new generation (`corpus sync`) to {action} to"
        )
    unmaintained = home.unmaintained(target)
    if unmaintained is not None:
        # it would not be searched (Searcher.resolve_generation): the namespace would go dark
        raise PromotionRefusedError(
            f"{unmaintained}: its sources' edits and ACL changes no longer reach it, so it "
            f"cannot serve; restore its profile as it was and run `corpus sync` to {action} "
            "to it"
        )
    if target.row_count and not home.store.exists(target):
        # every search of the namespace would fail on it (DamagedTableError)
        raise PromotionRefusedError(
            f"generation {target.id} records {target.row_count:,} rows, but its table "
            f"{target.table_name} is not in the store, so it cannot serve; `corpus doctor` "
            "says what is damaged"
        )
    required = required_checks(home, target.spec.profile, for_rollback=action == "rollback")
    failed = sorted(
        name
        for name, check in target.checks.items()
        if name != EVAL_CHECK and not gates.not_run(check) and not check.get("passed")
    )
    if failed:
        # a check a rollback need not have run (its target may predate it) but that ran and
        # failed: what it guards is wrong in the table (group rows without their group)
        raise PromotionRefusedError(
            f"generation {target.id} failed check(s) {', '.join(failed)}, so it cannot serve"
        )
    lagging = lagging_collections(home, target)
    if lagging:
        # what reached the sources since its last index_rows run reached only the generations
        # whose runs came: serving it would drop a document, or widen a narrowed ACL again
        raise PromotionRefusedError(
            f"generation {target.id} does not hold the rows the current embedding_inputs of "
            f"{', '.join(lagging)} call for (a source added, edited or removed since its last "
            f"index_rows run there), so it cannot serve yet; run `corpus sync` (in the UI: "
            f"embeddings and index_rows of profile {target.spec.profile} for those "
            f"collections, then its index_generation), then {action} again"
        )
    eval_check = target.checks.get(EVAL_CHECK, {})
    if EVAL_CHECK in required and eval_check.get("not_compared"):
        raise PromotionRefusedError(
            f"generation {target.id} served before and was not compared with the ACTIVE "
            "generation since: promote it with `corpus promote` or the active_generation "
            "asset, which compare it first"
        )
    if EVAL_CHECK in required and gates.not_run(eval_check):
        raise PromotionRefusedError(
            f"the eval gate did not run for generation {target.id}: namespace {namespace!r} has "
            "no golden set. Set namespaces."
            f"{namespace}.golden_set, or declare `eval_gate: off` on namespace {namespace!r} "
            f"in {home.config.path} to promote without a retrieval evaluation"
        )
    stale = eval_not_current(home, target) if EVAL_CHECK in required else None
    if stale is not None and action == "promote":
        raise PromotionRefusedError(
            f"generation {target.id}'s eval gate does not stand now: {stale}. Promote it with "
            "`corpus promote` or the active_generation asset, which compare it first"
        )
    return home.registry.promote(target.id, run_id=run_id, action=action, required=required)


def lagging_collections(home: Home, target: Generation) -> list[str]:
    """The collections of ``target``'s namespace (those its profile covers) whose rows in it
    are not the ones their current ``embedding_inputs`` call for, sorted.

    Compared by ``chunk_ref`` (a chunk at one source version, which the configured scope is
    part of), as ``index_rows`` decides what to rewrite: a source added, edited (an ACL
    narrowed) or removed since its last run for ``target`` differs. Inputs of a tombstoned
    source, or in another generation's format, are left out as that step leaves them out.
    """
    spec, config = target.spec, home.config
    lagging = []
    for c in config.collections_in(spec.namespace):
        if not config.profile_covers(spec.profile, c.name):
            continue
        dead = tombstoned_sources(home.registry, spec.namespace, c.name)
        wanted: list[pa.Array] = []
        for key in c.partitions:  # a sharded collection's inputs: its shards'
            refs = home.warehouse.read(
                "embedding_inputs", (key,), columns=["chunk_ref", "source_id", "input_format"]
            )
            if refs is not None:
                wanted.extend(generation_inputs(refs, target, dead)["chunk_ref"].chunks)
        want = pc.unique(pa.chunked_array(wanted, pa.string()))
        held = pc.unique(home.store.collection_refs(target, c.name)["chunk_ref"])
        found = int(pc.sum(pc.is_in(held, value_set=want)).as_py() or 0)
        if not (len(held) == len(want) == found):
            lagging.append(c.name)
    return sorted(lagging)


def eval_not_current(home: Home, target: Generation) -> str | None:
    """Why the eval gate recorded on ``target`` (one that ran) does not stand for promoting it
    now, or None when it does: it compared ``target`` with another generation than the one
    ACTIVE now (with none, or with itself while it served), measured ``target``'s rows as
    they were at another table version (a sync wrote it since, and its index_generation has
    not run again), or ran under another ``eval_tolerance`` or golden set than the
    namespace's now. A pass measured against what served then, or over other rows, says
    nothing of promoting what is there now."""
    recorded = target.checks.get(EVAL_CHECK, {})
    if not recorded or gates.not_run(recorded):
        return None
    ns = home.config.namespaces[target.spec.namespace]
    active = home.registry.active(ns.name)
    current = active.id if active is not None else ""
    if current == target.id:
        return None  # it serves: nothing to compare it with
    baseline = str(recorded.get("baseline_generation") or "")
    if baseline != current:
        was = "itself" if baseline == target.id else (baseline or "no ACTIVE generation")
        return f"it was compared with {was}, and {current or 'none'} is ACTIVE now"
    measured = target.eval.get("golden", {}).get("table_version")
    now = home.store.version(target)
    if measured != now:
        return f"it measured its rows at table version {measured}, and they are at {now} now"
    if recorded.get("tolerance") != ns.eval_tolerance:
        return f"it ran under eval_tolerance {recorded.get('tolerance')}, not {ns.eval_tolerance}"
    kept = recorded.get("golden_sha256")
    if ns.golden_set is not None and kept != _file_sha256(ns.golden_set):
        return f"it ran on another golden set than {ns.golden_set}"
    return None


def _file_sha256(path: Path) -> str | None:
    try:
        return sha256_hex(path.read_bytes())
    except OSError:
        return None


def rollback(
    home: Home,
    namespace: str,
    *,
    run_id: str | None = None,
    wait_s: float = 0.0,
    expect_active: str | None = None,
) -> Generation:
    """Point ``namespace`` back at the generation that was ACTIVE before, in one step.

    With ``expect_active``, a retry after the rollback committed changes nothing.
    """
    return promote(
        home,
        namespace,
        action="rollback",
        run_id=run_id,
        wait_s=wait_s,
        expect_active=expect_active,
    )


def _target(home: Home, namespace: str, generation_id: str | None, *, action: str) -> Generation:
    """The generation a promotion or rollback of ``namespace`` points at."""
    reg = home.registry
    if action == "rollback":
        previous = reg.previous(namespace)
        if previous is None:
            raise MissingGenerationError(
                f"namespace {namespace!r} has no previous generation to roll back to"
            )
        if generation_id and generation_id != previous.id:
            # a rollback goes back one step; a named generation that is not that step would
            # be ignored, and the pointer moved somewhere the operator did not ask for
            raise PromotionRefusedError(
                f"a rollback of namespace {namespace!r} goes back to {previous.id}, not "
                f"{generation_id}; to serve {generation_id}, promote it"
            )
        return previous
    if generation_id:
        target = reg.require(generation_id)
        if target.spec.namespace != namespace:
            raise MissingGenerationError(
                f"generation {generation_id} serves namespace {target.spec.namespace!r}, "
                f"not {namespace!r}"
            )
        return target
    return newest_ready(home, namespace)


def newest_ready(home: Home, namespace: str) -> Generation:
    """The newest READY (or ACTIVE) generation of ``namespace`` that its profile still builds
    (one left by a migration abandoned cannot serve): what an operator who asks to promote
    without naming a generation gets (never chosen by materializing the graph).

    Raises:
        MissingGenerationError: the namespace has no READY generation.
    """
    candidates = [
        g
        for g in home.registry.generations(namespace=namespace)
        if g.status in ("READY", "ACTIVE") and home.unmaintained(g) is None
    ]
    if not candidates:
        raise MissingGenerationError(
            f"namespace {namespace!r} has no READY generation its profiles still build "
            "(run `corpus sync` first)"
        )
    return candidates[-1]


def registry_view(home: Home, namespace: str) -> list[dict[str, Any]]:
    """Every generation of ``namespace``, oldest first: id, profile, status, whether it serves,
    rows, golden-set metrics and a one-line summary of its checks (for the UI and reports)."""
    return [
        {
            "generation": g.id,
            "profile": g.spec.profile,
            "status": g.status,
            "serving": g.status == "ACTIVE",
            "rows": g.row_count,
            "backend_spec": g.spec.backend_spec,
            "input_format": g.spec.input_format,
            **{m: g.eval.get("golden", {}).get(m) for m in ("recall@5", "mrr@10", "ndcg@10")},
            "checks": gates.check_summary(g.checks),
        }
        for g in home.registry.generations(namespace=namespace)
    ]


class RetireChoice(NamedTuple):
    """A generation an operator may pick to retire, and what retiring it would do."""

    generation: str
    description: str


def retire_choices(settings: Settings) -> list[RetireChoice]:
    """Every generation of the home's registry, the ones that can be retired first (newest
    first), then the ones ``retire`` refuses (the serving one, a rollback target) and those
    already retired (retiring again drops a table a crash left behind). Empty when the home
    has no registry yet, or it cannot be read now (busy or damaged: the Dagster code location
    still loads, and `corpus doctor` names the damage); the safety window is not judged here
    (``retire`` does)."""
    if settings.registry_url is None and not settings.registry_path.exists():
        return []
    registry = open_registry(settings)
    try:
        gens = registry.generations()
        namespaces = {g.spec.namespace for g in gens}
        targets = {p.id for ns in namespaces if (p := registry.previous(ns))}
    except (RetryableError, DamagedStateError):
        return []
    try:  # a target its profile no longer writes can be retired (``retire``)
        home = Home(settings)
        by_id = {g.id: g for g in gens}
        targets = {t for t in targets if home.unmaintained(by_id[t]) is None}
    except ConfigError:
        pass  # the configuration names its own problem where it is loaded
    order = {"open": 0, "refused": 1, "RETIRED": 2}
    choices: list[tuple[int, RetireChoice]] = []
    for g in sorted(gens, key=lambda g: g.id, reverse=True):
        where = f"{g.spec.namespace}/{g.spec.profile}, {g.row_count} rows"
        if g.status == "ACTIVE":
            rank, note = "refused", f"ACTIVE, {where}: refused while it serves"
        elif g.id in targets:
            rank, note = "refused", f"{g.status}, {where}: refused, the rollback target"
        elif g.status == "RETIRED":
            rank, note = "RETIRED", f"RETIRED, {where}: drops its table if one is left"
        else:
            rank, note = "open", f"{g.status}, {where}"
        choices.append((order[rank], RetireChoice(g.id, note)))
    return [c for _, c in sorted(choices, key=lambda rc: rc[0])]


@dataclass(frozen=True, slots=True)
class RetireOutcome:
    """A retired generation and whether its table was dropped now."""

    generation: Generation
    table_dropped: bool


def retire(home: Home, generation_id: str) -> RetireOutcome:
    """Retire a generation and drop its table, once the namespace's safety window has passed.

    Never the ACTIVE generation nor the rollback target, unless its profile no longer writes
    it (a rollback to it is then refused too). Retiring again after a crash between the two
    steps finishes the job.

    Raises:
        MissingGenerationError, RetireRefusedError.
    """
    gen = home.registry.require(generation_id)
    ns = home.config.namespaces.get(gen.spec.namespace)
    window = ns.retire_after_hours if ns is not None else 0.0
    # a rollback target its profile no longer writes could not be rolled back to (``_promote``)
    retired = home.registry.retire(
        gen.id, window_hours=window, rollback_possible=home.unmaintained(gen) is None
    )
    dropped = home.store.drop(retired)
    return RetireOutcome(generation=retired, table_dropped=dropped)
