"""Generated message streams for tests and benches: staff chat channels at a few places, with
several conversations running at once, questions, answers that name the asker, and replies.

Deterministic for a seed. Texts are short workplace chat built from a topic's words, so TF-IDF
topic similarity and the mention features have something to read.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path

from corpus_index.linked.messages import Message

TOPICS = {
    "van": "van brakes service booking garage pads tyres rego fuel keys",
    "meds": "medication webster pack chemist dose prn chart pharmacy script",
    "roster": "roster shift swap sick cover weekend night overtime leave",
    "meals": "lunch dinner roast pumpkin chicken soft texture menu shopping",
    "outing": "outing beach pool bus tickets picnic weather sunscreen hat",
    "repairs": "window hoist sling repair plumber leak bathroom door lock",
    "health": "seizure appointment doctor bloods review nurse epilim obs",
    "admin": "portal login form incident report email policy training",
}
STAFF = ["Sarah J", "mikeb", "Jane O.", "Tom H", "DanK", "Grace F", "Leanne W", "Priya", "Bob"]
OPENERS = ["does anyone know", "quick one:", "heads up,", "can someone check", "reminder:"]
REPLIES = ["yep", "on it", "thanks", "sounds good", "I'll sort it", "not sure, will ask"]


def stream(n: int, *, channels: int = 5, seed: int = 1, start: float = 1.75e9) -> list[Message]:
    """``n`` chat messages over ``channels`` channels (places), in time order, a few minutes
    apart within a conversation and hours between quiet spells; unit ids ``m<i>``."""
    rnd = random.Random(seed)
    names = list(TOPICS)
    open_threads: dict[int, list[tuple[str, str, str]]] = {c: [] for c in range(channels)}
    clock = [start + c * 600.0 for c in range(channels)]
    out: list[Message] = []
    for i in range(n):
        c = rnd.randrange(channels)
        clock[c] += rnd.choice((60, 120, 180, 300, 420, 600)) * (30 if rnd.random() < 0.03 else 1)
        threads = open_threads[c]
        author = rnd.choice(STAFF)
        reply_to = None
        if threads and rnd.random() < 0.75:
            unit, asker, topic = rnd.choice(threads[-3:])
            words = rnd.sample(TOPICS[topic].split(), 3)
            text = f"{rnd.choice(REPLIES)} {' '.join(words)}"
            if rnd.random() < 0.4:
                text = f"{asker.split()[0]}: {text}"
            if rnd.random() < 0.1:
                reply_to = unit
        else:
            topic = rnd.choice(names)
            words = rnd.sample(TOPICS[topic].split(), 4)
            text = f"{rnd.choice(OPENERS)} {' '.join(words)}?"
            threads.append((f"m{i}", author, topic))
            del threads[:-4]
        out.append(
            Message(
                f"m{i}",
                f"#site-{c}",
                author,
                text,
                clock[c],
                reply_to=reply_to,
                source="discord_chat",
                location=f"Site {c}",
            )
        )
    return sorted(out, key=lambda m: (m.timestamp, m.unit_id))


def write_jsonl(messages: list[Message], path: Path) -> None:
    """The messages as one JSONL stream of the ``messages`` kind (DESIGN §3)."""
    with path.open("w", encoding="utf-8") as f:
        for m in messages:
            when = dt.datetime.fromtimestamp(m.timestamp, dt.UTC).isoformat()
            record = {
                "id": m.unit_id,
                "source": m.source or "discord_chat",
                "channel": m.channel,
                "author": m.author,
                "timestamp": when,
                "location": m.location,
                "text": m.text,
                "recipients": [],
                "cc": [],
            }
            if m.reply_to:
                record["reply_to"] = m.reply_to
            f.write(json.dumps(record) + "\n")
