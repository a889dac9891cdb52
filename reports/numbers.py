"""Numbers as a person writes them: 1.24T tokens, 3.1%, 7.9x.

The page's script (templates/format.js) formats the numbers it draws with the same
rules, so a figure reads the same in a server-rendered table and in a chart.
"""

from __future__ import annotations

import math


def finite(value: object) -> float | None:
    """A number as a float, or None for a bool, a non-number, NaN or an infinity."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


_SUFFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K"))


def _trim(text: str) -> str:
    return text.rstrip("0").rstrip(".") if "." in text else text


def _significant(value: float, digits: int = 3) -> str:
    """`value` with `digits` significant digits and no trailing zeros (1.2, 23.1, 845)."""
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return _trim(f"{value:.{decimals}f}")


def human_count(value: float | None) -> str:
    """1234 -> 1.23K, 1.24e12 -> 1.24T; below a thousand the integer itself."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    magnitude = abs(value)
    for scale, suffix in _SUFFIXES:
        if magnitude >= scale * 0.9995:
            text = _significant(value / scale)
            if abs(float(text)) >= 1000 and suffix != "P":  # 999.96K rounds up to the next suffix
                continue
            return text + suffix
    return str(round(value)) if float(value).is_integer() or magnitude >= 100 else _significant(value)


def human_percent(fraction: float | None) -> str:
    """0.031 -> 3.1%, 0.5 -> 50%, 0.0000012 -> 0.00012%: tiny shares stay visible, never 0%."""
    if fraction is None or not math.isfinite(fraction):
        return "—"
    if fraction == 0:
        return "0%"
    value = fraction * 100
    if abs(value) >= 1:
        return _trim(f"{value:.1f}") + "%"
    return _significant(value, 2) + "%"


def human_epochs(epochs: float | None) -> str:
    """How many times a cell is read: 0.42×, 8×."""
    if epochs is None or not math.isfinite(epochs):
        return "—"
    if epochs == 0:
        return "0×"
    return (_trim(f"{epochs:.2f}") if epochs >= 0.01 else _significant(epochs, 2)) + "×"


def human_bytes(size: float | None) -> str:
    """1536 -> 1.5 KiB."""
    if size is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{_significant(size)} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def human_float(value: float | None, digits: int = 4) -> str:
    """A measured quantity (a loss, a norm) with `digits` significant digits."""
    if value is None or not math.isfinite(value):
        return "—"
    if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-4):
        return f"{value:.{digits - 1}e}"
    return _significant(value, digits)


FILTERS = {
    "count": human_count,
    "pct": human_percent,
    "epochs": human_epochs,
    "bytes": human_bytes,
    "num": human_float,
}
