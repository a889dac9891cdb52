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
    "rivers": ("river bank bridge boat ferry harbour canal mill current delta flood stream dam lock "
               "shore estuary meadow barge pier quay".split(),
               "flows carries floods crosses drains feeds turns bends widens narrows".split(),
               "muddy wide shallow deep swift calm northern tidal".split()),
    "kitchens": ("bread oven flour butter soup recipe kettle pan onion garlic dough pastry sauce spoon "
                 "bakery stew pepper salt honey cheese".split(),
                 "bakes boils simmers stirs roasts slices kneads seasons tastes serves".split(),
                 "warm crusty savoury sweet fresh spicy golden tender".split()),
    "railways": ("train station track engine carriage platform signal timetable tunnel viaduct freight "
                 "locomotive junction ticket guard sleeper siding depot coach rail".split(),
                 "departs arrives stops climbs shunts whistles brakes connects runs waits".split(),
                 "express local electric narrow steam crowded punctual late".split()),
    "gardens": ("rose hedge lawn seed soil compost tulip orchard greenhouse shovel blossom vine bee "
                "fence pond path bulb weed root leaf".split(),
                "grows blooms wilts sprouts climbs spreads ripens withers flowers shades".split(),
                "green fragrant thorny leafy wild tidy sunny damp".split()),
    "stars": ("star planet telescope orbit comet galaxy moon nebula eclipse meteor observatory "
              "astronomer constellation satellite spectrum cluster horizon crater asteroid light".split(),
              "shines orbits rises sets dims flares drifts rotates glows wanders".split(),
              "distant bright faint red giant dwarf icy luminous".split()),
    "music": ("violin piano choir melody rhythm concert orchestra drum chord song tune composer "
              "harmony organ flute score rehearsal singer note cello".split(),
              "plays sings tunes rehearses composes performs echoes swells fades conducts".split(),
              "loud quiet joyful solemn lively gentle minor major".split()),
    "markets": ("price trader coin stall ledger merchant wage bargain cargo auction shop customer "
                "profit loan invoice tax supply demand broker share".split(),
                "sells buys trades lends rises falls pays borrows earns counts".split(),
                "cheap costly busy weekly foreign local steady volatile".split()),
    "mountains": ("peak ridge valley glacier summit slope cliff pass rock snow hut climber trail "
                  "avalanche crag boulder cairn scree gorge plateau".split(),
                  "towers rises erodes crumbles shelters looms slopes drops freezes thaws".split(),
                  "steep rocky snowy alpine jagged remote barren misty".split()),
}
STYLES = {
    "python-docs": [
        "The {adj} {n1} {v1} beside the {n2}, and for that reason the {n3} of the {n4} is described here in full.",
        "In most cases a {n1} {v1} when the {n2} is {adj}; this section explains why the {n3} matters to the {n4}.",
        "Each {n1} that {v1} near a {n2} also changes the {n3}, which is why the {adj} {n4} is considered first.",
        "It is worth noting that the {n1} of a {adj} {n2} {v1} more slowly than the {n3} would suggest.",
    ],
    "notes": [
        "Saw a {adj} {n1} by the {n2} today.",
        "The {n1} {v1} again, so the {n2} was {adj}.",
        "Need more {n1} and a {n2} for the {n3}.",
        "Our {n1} {v1} and then the {n2} {v2}.",
    ],
    "forum": [
        "Anyone know why my {n1} {v1} after the {n2}? It was {adj} yesterday.",
        "I think the {n1} is fine but the {n2} {v1} way too much.",
        "Try a {adj} {n1} instead of the {n2}, it worked for me with the {n3}.",
        "Same here, the {n1} {v1} whenever the {n2} gets {adj}.",
    ],
}
SENTENCES = {"python-docs": (10, 16), "notes": (10, 18), "forum": (10, 18)}


def document(topic: str, style: str, rng: random.Random) -> str:
    nouns, verbs, adjectives = TOPICS[topic]
    count = rng.randint(*SENTENCES[style])
    sentences = []
    for _ in range(count):
        n1, n2, n3, n4 = rng.sample(nouns, 4)
        v1, v2 = rng.sample(verbs, 2)
        sentences.append(rng.choice(STYLES[style]).format(n1=n1, n2=n2, n3=n3, n4=n4, v1=v1, v2=v2,
                                                          adj=rng.choice(adjectives)))
    lines = [" ".join(sentences[i:i + 3]) for i in range(0, count, 3)]
    return "\n".join(lines)


def write_topic_corpus(root: Path, per_topic_and_style: int, seed: int = 0) -> int:
    """Write `root/<style>/part-0.jsonl` (one source a style); returns the number of documents."""
    rng = random.Random(seed)
    written = 0
    for style in STYLES:
        records = [{"id": f"{topic}-{i}", "text": document(topic, style, rng)}
                   for i in range(per_topic_and_style) for topic in TOPICS]
        (root / style).mkdir(parents=True, exist_ok=True)
        (root / style / "part-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        written += len(records)
    return written
