"""Small generated corpora for tests: valid ``.uw.md`` files written from a few parameters."""

from __future__ import annotations

import random
from pathlib import Path

import yaml

RISKS = [
    "Roofs and boilers are past their useful life; the capital plan funds replacement in year one.",
    "The anchor tenant's lease expires next year and renewal talks have not started.",
    "Windstorm insurance premiums doubled at the last renewal along the coast.",
    "The sponsor has never operated an asset of this size before.",
]


MARKET = "Rents grew four percent last year on steady job growth."
OWN_WORDS = ("basement", "boiler", "cornice", "drainage", "easement", "facade", "gutter", "joist")


def deal_text(
    deal_id: str,
    *,
    tenant: str,
    acl: list[str],
    asset_class: str = "multifamily",
    state: str = "AZ",
    metro: str = "Phoenix",
    units: int = 40,
    date: str = "2026-01-15",
    risk: str = RISKS[0],
    market: str = MARKET,
) -> str:
    """One valid underwriting file."""
    front = {
        "uw_version": "1.1",
        "deal_id": deal_id,
        "title": f"{deal_id} property",
        "asset_class": asset_class,
        "geo": {"state": state, "metro": metro},
        "units": units,
        "date": date,
        "tenant": tenant,
        "acl": acl,
    }
    sections = {
        "property": {
            "name": f"{deal_id} property",
            "description": f"A {asset_class} asset in {metro}.",
        },
        "market_analysis": {"summary": market},
        "risk_assessment": {"flags": [{"id": "risk", "description": risk, "severity": "high"}]},
        "borrower_sponsor": {
            "sponsor": f"{tenant.title()} Sponsor LLC",
            "experience": "Ten years in the market.",
        },
        "debt_terms": {"loan_amount": 1000000 + units, "ltv_pct": 65.0, "exit_cap_rate_pct": 6.25},
    }
    body = "\n".join(
        f"## {name}\n```yaml\n{yaml.safe_dump(content, sort_keys=False).strip()}\n```\n"
        for name, content in sections.items()
    )
    return f"---\n{yaml.safe_dump(front, sort_keys=False).strip()}\n---\n\n# {deal_id}\n\n{body}"


def write_home(
    root: Path,
    *,
    deals_per_tenant: int = 3,
    embedder: str = "hash:v1-64",
    extra_profiles: dict[str, dict[str, object]] | None = None,
    eval_gate: str | None = "off",
) -> Path:
    """A config with two tenants' collections, one profile, and generated deals; returns corpus.yaml.

    Namespace ``deals`` has no golden set, so it declares ``eval_gate: off`` (promotion is
    refused otherwise); ``eval_gate=None`` leaves the key out.
    """
    tenants = {"alpha": ["alpha-uw", "alpha-credit"], "beta": ["beta-team"]}
    collections = {}
    for t_i, (tenant, groups) in enumerate(tenants.items()):
        folder = root / "sources" / tenant
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(deals_per_tenant):
            deal = f"deal-{tenant}-{i:03d}"
            (folder / f"{deal}.uw.md").write_text(
                deal_text(
                    deal.upper(),
                    tenant=tenant,
                    acl=groups,
                    units=20 + 10 * i,
                    risk=RISKS[(i + t_i) % len(RISKS)],
                    metro=["Phoenix", "Dallas", "Atlanta"][i % 3],
                    state=["AZ", "TX", "GA"][i % 3],
                ),
                encoding="utf-8",
            )
        collections[f"{tenant}-deals"] = {
            "kind": "uw_deals",
            "path": f"sources/{tenant}",
            "tenant": tenant,
            "acl_groups": groups,
            "namespace": "deals",
        }
    profiles: dict[str, dict[str, object]] = {"main": {"embedder": embedder, "namespace": "deals"}}
    profiles.update(extra_profiles or {})
    deals = {} if eval_gate is None else {"eval_gate": eval_gate}
    config = {"collections": collections, "profiles": profiles, "namespaces": {"deals": deals}}
    path = root / "corpus.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def give_words_of_its_own(deal: Path, *, seed: str, words: int = 300) -> str:
    """Replace a generated deal's market summary (every generated deal's) with prose of its own.

    Generated deals share most of their words, so a deletion audit keeps few fingerprints of one
    once the windows live deals share are dropped (4 to 10 for a deal of ``write_home``), and
    its hash-embedder vectors are too sparse for any. The windows are sampled under the home's
    random key, so a test expecting the byte scan to find the deal in LanceDB's files failed
    about one run in many; with its own words the deal keeps 26 to 42, text and vector.
    Returns the summary written."""
    rng = random.Random(seed)
    text = deal.read_text(encoding="utf-8")
    if MARKET not in text:
        raise ValueError(f"{deal}: not a generated deal with the default market summary")
    own = " ".join(rng.choice(OWN_WORDS) for _ in range(words)) + "."
    deal.write_text(text.replace(MARKET, own), encoding="utf-8")
    return own
