"""Domain and topic tags of a group's text, from a small keyword table (seed §3.1:
``domain_tags`` such as hr, incidents, roster; ``topic_tags`` such as meal_planning, vehicle,
participant_care). A tag is given when its keywords occur; the most frequent come first."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from corpus_index.linked.topic import tokens

# fmt: off
DOMAINS: dict[str, tuple[str, ...]] = {
    "incidents": ("incident", "seizure", "fall", "slipped", "choked", "choking", "injury",
                  "near miss", "missing", "anaphylaxis", "allergic", "reaction", "damage"),
    "health": ("medication", "meds", "gp", "doctor", "rn", "hospital", "physio", "dentist",
               "epipen", "epilim", "webster", "mar", "fluids", "thickener", "obs", "dose"),
    "roster": ("roster", "shift", "swap", "handover", "on shift", "night shift"),
    "maintenance": ("repair", "repairer", "broken", "hoist", "window", "fridge", "alarm",
                    "battery", "gate", "latch", "glazier", "handyman", "charger", "service"),
    "admin": ("portal", "form", "forms", "policy", "procedure", "password", "wifi",
              "insurance", "quote", "invoice", "audit", "email", "plan review"),
    "hr": ("training", "refresher", "team meeting", "secret santa", "leave"),
}
TOPICS: dict[str, tuple[str, ...]] = {
    "meal_planning": ("lunch", "dinner", "breakfast", "roast", "pumpkin", "menu", "custard",
                      "pavlova", "cake", "bbq", "chicken", "pork", "woolies", "scones", "salad"),
    "vehicle": ("van", "brake", "brakes", "bumper", "rotor", "pads", "bollard", "reversing",
                "drive", "car"),
    "medication": ("medication", "meds", "dose", "webster", "epilim", "mar", "epipen", "prn",
                   "chemist", "pharmacy"),
    "participant_care": ("seizure", "fall", "choking", "mealtime", "swallowing", "behaviour",
                         "support plan", "hoist", "transfer", "sling", "allergy", "recovery"),
    "christmas": ("christmas", "xmas", "santa", "boxing day", "new year", "nye", "fireworks"),
    "outings": ("pool", "cricket", "party", "shops", "park", "picnic", "walk", "hydrotherapy",
                "visit", "visitors"),
    "household": ("bins", "couch", "laundry", "keys", "key safe", "fridge", "umbrella", "esky"),
}
SOURCE_DOMAINS = {"incident_report": "incidents", "shift_note": "shift_notes",
                  "resource_doc": "policy"}
# fmt: on
MAX_TAGS = 3


def _hits(words: list[str], table: Mapping[str, tuple[str, ...]]) -> Counter[str]:
    """Each tag of ``table`` whose keywords occur in ``words``, by how often."""
    joined = " " + " ".join(words) + " "
    single = Counter(words)
    hits: Counter[str] = Counter()
    for tag, keys in table.items():
        n = sum(joined.count(f" {k} ") if " " in k else single[k] for k in keys)
        if n:
            hits[tag] = n
    return hits


def tags_of(text: str, sources: tuple[str, ...] = ()) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(domain_tags, topic_tags)`` of ``text`` (a group's members together); the members'
    sources add their domain (an incident report makes ``incidents``)."""
    words = tokens(text)
    domains = _hits(words, DOMAINS)
    for s in sources:
        if s in SOURCE_DOMAINS:
            domains[SOURCE_DOMAINS[s]] += 100  # what the units are outranks what they say
    topics = _hits(words, TOPICS)

    def top(c: Counter[str]) -> tuple[str, ...]:
        return tuple(t for t, _ in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_TAGS])

    return top(domains), top(topics)
