"""A domain's label comes from its majority: a domain that is 83% fortunes is not labelled by the long,
repetitive npm pages that make up the rest of it."""

import random

import numpy as np

from pipeline.cells.labels import distinctive_terms

FORTUNE_WORDS = [
    "wisdom",
    "fortune",
    "patience",
    "friend",
    "heart",
    "journey",
    "river",
    "laughter",
    "kindness",
    "courage",
    "dream",
    "morning",
    "lantern",
    "harvest",
    "garden",
    "silence",
]
NPM_WORDS = ["npm", "type", "value", "package", "module", "install", "dependency", "version", "registry", "script"]


def fortune(rng: random.Random) -> str:  # short, varied, but drawn from one vocabulary
    return " ".join(rng.choice(FORTUNE_WORDS) for _ in range(12)) + "."


def npm_page(rng: random.Random) -> str:  # long and repetitive: most of the domain's words
    return " ".join(rng.choice(NPM_WORDS) for _ in range(400))


def corpus(rng: random.Random) -> tuple[list[str], np.ndarray, list[str]]:
    texts = [fortune(rng) for _ in range(50)] + [npm_page(rng) for _ in range(10)]  # domain 0: 83% fortunes
    sources = ["fortunes"] * 50 + ["npm-docs"] * 10
    other = [
        " ".join(rng.choice(["kernel", "driver", "memory", "interrupt", "device"]) for _ in range(30))
        for _ in range(40)
    ]  # domain 1: something else, so the terms are distinctive against it
    return texts + other, np.array([0] * 60 + [1] * 40), sources + ["kernel-docs"] * 40


def test_a_domain_is_labelled_by_its_majority_not_a_long_minority():
    texts, domains, sources = corpus(random.Random(0))
    labels = distinctive_terms(texts, domains, 2, 3, groups=sources)
    assert labels[0] and set(labels[0]) <= set(FORTUNE_WORDS), labels
    assert set(labels[1]) <= {"kernel", "driver", "memory", "interrupt", "device"}


def test_without_groups_the_term_counts_decide():  # what the page showed before: the minority's words
    texts, domains, _ = corpus(random.Random(0))
    assert set(distinctive_terms(texts, domains, 2, 3)[0]) <= set(NPM_WORDS)
