"""The identity pass of a one-message sync: resumed from the last pass's state
(``corpus_index.identity_resume``) beside the full pass over every unit, in the same run.

For each size N (``--sizes``, default 5,000 and 50,000), on the generated staff-chat stream of
``bench/linked_cost.py`` (``tests/streamgen.py``, five channels, stream files of 10,000
messages), read through the real ``source_manifest`` and ``parsed_blocks`` steps into the
records the ``linked_groups`` step hands the pass:

1. the full pass over the N units, its state written to the ``identity_pass`` partition;
2. one message appended (``linked_cost.one_more``), the two steps run again;
3. timed, each ``--repeat`` times, interleaved, the fastest kept (other processes share the
   cores): **full**, the pass over all N + 1 units as the step ran it before
   (``identity_pass.identify``); **resumed**, the state read from the partition, the pass
   from it (``identity_resume.identify_since``: the record digests, the checks, the new unit
   read, merges and corroboration over all) and the new state written.

Both give the same registry, mentions and sightings (checked here). CPU seconds of the process
(``time.process_time``) are the steadier figure; wall seconds are printed beside them.

    .venv/bin/python bench/identity_resume.py [--sizes 5000,50000] [--repeat 3] [--json]
"""

from __future__ import annotations

import _common

_common.configure(threads=2)

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

from linked_cost import COLLECTION, one_more, write_chat_config, write_streams  # noqa: E402

from tests.streamgen import stream  # noqa: E402

TENANT = "bench"  # the tenant of linked_cost.write_chat_config


def _records(home: Any) -> list[dict[str, Any]]:
    """The records the ``linked_groups`` step hands the identity pass (one tenant)."""
    from corpus_index import steps
    from corpus_index.records import BLOCK_SCHEMA
    from corpus_index.steps.linked_groups import unit_reading

    steps.source_manifest.run(home, COLLECTION)
    steps.parsed_blocks.run(home, COLLECTION)
    blocks = home.read("parsed_blocks", (COLLECTION,), BLOCK_SCHEMA)
    return list(unit_reading(blocks).records.values())


def _timed(run: Callable[[], Any]) -> tuple[float, float, Any]:
    cpu, wall = time.process_time(), time.perf_counter()
    out = run()
    return time.process_time() - cpu, time.perf_counter() - wall, out


def measure(n: int, *, repeat: int) -> dict[str, Any]:
    """Full and resumed identity pass of a one-message append to ``n`` messages."""
    from corpus_index import identity_store
    from corpus_index.config import Settings
    from corpus_index.home import Home
    from corpus_index.identity_pass import identify
    from corpus_index.identity_resume import identify_since, read_states, state_table

    with _common.bench_home(None, "identity-resume-") as root:
        source = root / "source"
        config = write_chat_config(root, embedder="hash:v1-64")
        home = Home(Settings(config_path=config, home=root / "home"))
        wh = home.warehouse
        messages = stream(n, channels=5, seed=1)
        write_streams(messages, source)
        records = _records(home)
        first_cpu, _, (_, state) = _timed(
            lambda: identify_since(None, TENANT, records, people=None)
        )
        wh.write(identity_store.PASS, (COLLECTION,), state_table({TENANT: state}))
        messages.append(one_more(messages, 0))
        write_streams(messages, source)
        grown = _records(home)
        assert len(grown) == n + 1

        def resumed() -> Any:
            last = read_states(wh.read(identity_store.PASS, (COLLECTION,)))[TENANT]
            found, after = identify_since(last, TENANT, grown, people=None)
            wh.write(identity_store.PASS, ("scratch",), state_table({TENANT: after}))
            return found

        fulls, resumes = [], []
        for _ in range(repeat):
            fulls.append(_timed(lambda: identify(TENANT, grown, people=None)))
            resumes.append(_timed(resumed))
        full = min(fulls, key=lambda t: t[0])
        back = min(resumes, key=lambda t: t[0])
        a, b = full[2], back[2]
        assert b.read == 1 and a.read == n + 1, (a.read, b.read)
        assert (a.mentions, a.sightings, list(a.registry)) == (
            b.mentions,
            b.sightings,
            list(b.registry),
        )
        state_mib = wh.path(identity_store.PASS, COLLECTION).size() / 2**20
        return {
            "messages": n,
            "first_pass_cpu_s": round(first_cpu, 3),
            "full_cpu_s": round(full[0], 3),
            "full_wall_s": round(full[1], 3),
            "resumed_cpu_s": round(back[0], 3),
            "resumed_wall_s": round(back[1], 3),
            "speedup_cpu": round(full[0] / max(back[0], 1e-9), 1),
            "units_read": {"full": a.read, "resumed": b.read},
            "mentions": len(b.mentions),
            "state_mib": round(state_mib, 2),
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="5000,50000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = [measure(int(s), repeat=args.repeat) for s in args.sizes.split(",") if s]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for row in rows:
        print(json.dumps(row))
        print(
            f"{row['messages']} messages, one appended: identity pass {row['full_cpu_s']:.2f} s "
            f"CPU full, {row['resumed_cpu_s']:.2f} s resumed ({row['speedup_cpu']}x; "
            f"wall {row['full_wall_s']:.2f} s / {row['resumed_wall_s']:.2f} s)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
