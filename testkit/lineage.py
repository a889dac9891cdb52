"""A small real store with a parent revision, a child that continues it and a grandchild (lineage tests)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from millrace.home import Home
from testkit.stores import EVEN, make_store

# Cell c02q0 is small: it runs through several epochs, across the switch.
CELLS = {"c00q0": 30000, "c00q1": 22000, "c01q0": 9000, "c01q1": 4100, "c02q0": 1700}
FRAME = 'seed = 7\nseq_len = 16\nglobal_batch = 8\nepoch_cap = 12\n[store]\nname = "local"\n'
PARENT = (
    'mixture = "mix"\nrevision = "natural"\n'
    + FRAME
    + """
[[phases]]
name = "main"
tokens = 51200
strategy = "natural"
"""
)
AT_STEP = 170  # inside the parent's only phase (400 steps)


def continuing(revision: str, parent: str, at_step: int) -> str:
    """The head of a revision of "mix" that continues `parent` from `at_step`."""
    return (
        f'mixture = "mix"\nrevision = "{revision}"\n{FRAME}\n[continues]\nrevision = "{parent}"\nat_step = {at_step}\n'
    )


CHILD = (
    continuing("swap", "natural", AT_STEP)
    + """
[[phases]]
name = "main"
tokens = 20480
[phases.weights]
c00q0 = 0.2
c01q1 = 0.3
c02q0 = 0.5

[[phases]]
name = "cooldown"
tokens = 6144
strategy = "uniform"
cells = ["c01*", "c02*"]
"""
)
GRAND_AT = 300  # inside the child's main phase
GRANDCHILD = (
    continuing("late", "swap", GRAND_AT)
    + """
[[phases]]
name = "main"
tokens = 4096
strategy = "uniform"
"""
)


def write_revision(home: Home, text: str, name: str) -> Path:
    path = home.revisions / "mix" / f"{name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def lineage_home(root: Path) -> Home:
    home = Home.resolve(root)
    make_store(home, CELLS, replace(EVEN, doc_tokens=53))
    for name, text in (("natural", PARENT), ("swap", CHILD), ("late", GRANDCHILD)):
        write_revision(home, text, name)
    return home
