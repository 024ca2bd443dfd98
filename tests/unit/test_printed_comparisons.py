"""A value printed against its bound reads true (lab.facts.numbers.beside; fixmsg item 6)."""

from __future__ import annotations

import pytest

from lab.facts.numbers import beside


@pytest.mark.parametrize("value, bound, decimals, printed", [
    (0.496, 0.5, 2, "0.496"), (0.4999, 0.5, 2, "0.4999"), (0.43, 0.5, 2, "0.43"), (0.5, 0.5, 2, "0.50"),
    (0.504, 0.5, 2, "0.504"), (0.0504, 0.05, 3, "0.0504"), (0.7, 0.5, 4, "0.7000"),
])
def test_the_printed_value_stands_on_its_side_of_the_bound(value, bound, decimals, printed):
    assert beside(value, bound, decimals) == printed
    shown = float(beside(value, bound, decimals))
    assert (shown > bound) == (value > bound) and (shown < bound) == (value < bound)
