"""A generated corpus of English prose on eight topics from three sources, for tests that need many cells.

Each document is written on one topic (its own nouns, verbs and adjectives) in one of three styles
(its source): `python-docs` (long careful sentences: the demo's quality reference), `notes` and
`forum` (shorter, plainer ones). Topic and style are independent, so topic domains and quality
buckets cross into up to 8 x 5 cells. Word choices are drawn per slot from a seeded generator, so
documents share no long word runs and fuzzy dedup keeps them; nothing depends on the machine's files.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

TOPICS: dict[str, tuple[list[str], list[str], list[str]]] = {
    "rivers": (
        [
            "river",
            "bank",
            "bridge",
            "boat",
            "ferry",
            "harbour",
            "canal",
            "mill",
            "current",
            "delta",
            "flood",
            "stream",
            "dam",
            "lock",
            "shore",
            "estuary",
            "meadow",
            "barge",
            "pier",
            "quay",
        ],
        ["flows", "carries", "floods", "crosses", "drains", "feeds", "turns", "bends", "widens", "narrows"],
        ["muddy", "wide", "shallow", "deep", "swift", "calm", "northern", "tidal"],
    ),
    "kitchens": (
        [
            "bread",
            "oven",
            "flour",
            "butter",
            "soup",
            "recipe",
            "kettle",
            "pan",
            "onion",
            "garlic",
            "dough",
            "pastry",
            "sauce",
            "spoon",
            "bakery",
            "stew",
            "pepper",
            "salt",
            "honey",
            "cheese",
        ],
        ["bakes", "boils", "simmers", "stirs", "roasts", "slices", "kneads", "seasons", "tastes", "serves"],
        ["warm", "crusty", "savoury", "sweet", "fresh", "spicy", "golden", "tender"],
    ),
    "railways": (
        [
            "train",
            "station",
            "track",
            "engine",
            "carriage",
            "platform",
            "signal",
            "timetable",
            "tunnel",
            "viaduct",
            "freight",
            "locomotive",
            "junction",
            "ticket",
            "guard",
            "sleeper",
            "siding",
            "depot",
            "coach",
            "rail",
        ],
        ["departs", "arrives", "stops", "climbs", "shunts", "whistles", "brakes", "connects", "runs", "waits"],
        ["express", "local", "electric", "narrow", "steam", "crowded", "punctual", "late"],
    ),
    "gardens": (
        [
            "rose",
            "hedge",
            "lawn",
            "seed",
            "soil",
            "compost",
            "tulip",
            "orchard",
            "greenhouse",
            "shovel",
            "blossom",
            "vine",
            "bee",
            "fence",
            "pond",
            "path",
            "bulb",
            "weed",
            "root",
            "leaf",
        ],
        ["grows", "blooms", "wilts", "sprouts", "climbs", "spreads", "ripens", "withers", "flowers", "shades"],
        ["green", "fragrant", "thorny", "leafy", "wild", "tidy", "sunny", "damp"],
    ),
    "stars": (
        [
            "star",
            "planet",
            "telescope",
            "orbit",
            "comet",
            "galaxy",
            "moon",
            "nebula",
            "eclipse",
            "meteor",
            "observatory",
            "astronomer",
            "constellation",
            "satellite",
            "spectrum",
            "cluster",
            "horizon",
            "crater",
            "asteroid",
            "light",
        ],
        ["shines", "orbits", "rises", "sets", "dims", "flares", "drifts", "rotates", "glows", "wanders"],
        ["distant", "bright", "faint", "red", "giant", "dwarf", "icy", "luminous"],
    ),
    "music": (
        [
            "violin",
            "piano",
            "choir",
            "melody",
            "rhythm",
            "concert",
            "orchestra",
            "drum",
            "chord",
            "song",
            "tune",
            "composer",
            "harmony",
            "organ",
            "flute",
            "score",
            "rehearsal",
            "singer",
            "note",
            "cello",
        ],
        ["plays", "sings", "tunes", "rehearses", "composes", "performs", "echoes", "swells", "fades", "conducts"],
        ["loud", "quiet", "joyful", "solemn", "lively", "gentle", "minor", "major"],
    ),
    "markets": (
        [
            "price",
            "trader",
            "coin",
            "stall",
            "ledger",
            "merchant",
            "wage",
            "bargain",
            "cargo",
            "auction",
            "shop",
            "customer",
            "profit",
            "loan",
            "invoice",
            "tax",
            "supply",
            "demand",
            "broker",
            "share",
        ],
        ["sells", "buys", "trades", "lends", "rises", "falls", "pays", "borrows", "earns", "counts"],
        ["cheap", "costly", "busy", "weekly", "foreign", "local", "steady", "volatile"],
    ),
    "mountains": (
        [
            "peak",
            "ridge",
            "valley",
            "glacier",
            "summit",
            "slope",
            "cliff",
            "pass",
            "rock",
            "snow",
            "hut",
            "climber",
            "trail",
            "avalanche",
            "crag",
            "boulder",
            "cairn",
            "scree",
            "gorge",
            "plateau",
        ],
        ["towers", "rises", "erodes", "crumbles", "shelters", "looms", "slopes", "drops", "freezes", "thaws"],
        ["steep", "rocky", "snowy", "alpine", "jagged", "remote", "barren", "misty"],
    ),
}
DETERMINERS = ["the", "a", "this", "that", "every", "each", "our", "their", "one", "another"]
PREPOSITIONS = ["near", "beside", "under", "over", "through", "along", "behind", "across", "past", "around"]
CLAUSES = ["because", "while", "although", "when", "since", "until", "whereas", "unless"]
STYLES = {  # a sentence's frame per source; {d} a determiner, {p} a preposition, {c} a conjunction
    "python-docs": [
        "{D} {adj} {n1} {v1} {p} {d} {n2}, {c} {d} {n3} {v2} {p} {d} {n4}.",
        "{C} {d} {n1} {v1}, {d} {adj} {n2} {v2} {p} {d} {n3}; {d} {n4} follows.",
        "{D} {n1} of {d} {n2} {v1} {p} {d} {adj} {n3}, {c} {d} {n4} {v2}.",
    ],
    "notes": [
        "{D} {n1} {v1} {p} {d} {n2}.",
        "{D} {adj} {n1} {v1}.",
        "Saw {d} {n1} and {d} {n2} today.",
    ],
    "forum": [
        "Why does {d} {n1} {v1} {p} {d} {n2}?",
        "I think {d} {adj} {n1} {v1} {p} {d} {n2} lol.",
        "Same here, {d} {n1} {v1} {c} {d} {n2} {v2}!",
    ],
}
SENTENCES = {"python-docs": (9, 14), "notes": (14, 22), "forum": (12, 20)}


def document(topic: str, style: str, rng: random.Random) -> str:
    nouns, verbs, adjectives = TOPICS[topic]
    count = rng.randint(*SENTENCES[style])
    sentences = []
    for _ in range(count):
        n1, n2, n3, n4 = rng.sample(nouns, 4)
        v1, v2 = rng.sample(verbs, 2)
        d, clause = rng.choice(DETERMINERS), rng.choice(CLAUSES)
        slots = {
            "n1": n1,
            "n2": n2,
            "n3": n3,
            "n4": n4,
            "v1": v1,
            "v2": v2,
            "adj": rng.choice(adjectives),
            "D": d.capitalize(),
            "C": clause.capitalize(),
            "c": clause,
        }
        frame = rng.choice(STYLES[style])
        while "{d}" in frame or "{p}" in frame:  # each slot its own draw
            frame = frame.replace("{d}", rng.choice(DETERMINERS), 1).replace("{p}", rng.choice(PREPOSITIONS), 1)
        sentences.append(frame.format(**slots))
    lines = [" ".join(sentences[i : i + 3]) for i in range(0, count, 3)]
    return "\n".join(lines)


def write_topic_corpus(root: Path, per_topic_and_style: int, seed: int = 0) -> int:
    """Write `root/<style>/part-0.jsonl` (one source a style); returns the number of documents."""
    rng = random.Random(seed)
    written = 0
    for style in STYLES:
        records = [
            {"id": f"{topic}-{i}", "text": document(topic, style, rng)}
            for i in range(per_topic_and_style)
            for topic in TOPICS
        ]
        (root / style).mkdir(parents=True, exist_ok=True)
        (root / style / "part-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        written += len(records)
    return written
