import math

import pytest

from reports.numbers import human_bytes, human_count, human_epochs, human_float, human_percent


@pytest.mark.parametrize(
    "value, text",
    [
        (0, "0"),
        (842, "842"),
        (1000, "1K"),
        (1234, "1.23K"),
        (999_960, "1M"),
        (845e6, "845M"),
        (1.24e12, "1.24T"),
        (23.1e12, "23.1T"),
        (18.75e12, "18.8T"),
        (2.5e15, "2.5P"),
        (-1500, "-1.5K"),
        (None, "—"),
    ],
)
def test_counts_read_like_a_person_writes_them(value, text):
    assert human_count(value) == text


@pytest.mark.parametrize(
    "value, text",
    [
        (0.031, "3.1%"),
        (0.5, "50%"),
        (1.0, "100%"),
        (0.125, "12.5%"),
        (0.0000012, "0.00012%"),
        (0, "0%"),
        (float("nan"), "—"),
    ],
)
def test_percentages_keep_tiny_shares_visible(value, text):
    assert human_percent(value) == text


def test_epochs_bytes_and_measurements():
    assert human_epochs(8) == "8×"
    assert human_epochs(0.4249) == "0.42×"
    assert human_epochs(0.001234) == "0.0012×"
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(3 * 1024**3) == "3 GiB"
    assert human_float(3.14159) == "3.142"
    assert human_float(math.inf) == "—"
