"""A cell's name with its domain's label, wherever a cell is shown (store info, run summary, mix plan).

Cells are named `cNN` (domains only) or `cNNqQ` (domains and quality buckets); the store records each
domain's label (its distinctive terms) under `stats.domains.labels`, keyed `cNN`
(`StoreStats.domain_labels()`). A source cell has none.
"""

from __future__ import annotations

import re

DOMAIN = re.compile(r"(c\d+)(q\d+)?")


def labelled(cell: str, labels: dict[str, str], width: int | None = None) -> str:
    """'c03q1 (sql queries table)', or the bare name where its domain has no label; cut to `width` if given."""
    match = DOMAIN.fullmatch(cell)
    label = labels.get(match.group(1)) if match else None
    text = f"{cell} ({label})" if label and label != (match.group(1) if match else None) else cell
    return text if width is None or len(text) <= width else text[: width - 1] + "…"
