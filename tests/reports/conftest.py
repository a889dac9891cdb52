"""The report tests' browser (Debian's chromium via Playwright), one per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.browser import chromium


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium() as instance:
        yield instance
