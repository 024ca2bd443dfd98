"""Numbers printed against a bound, so that the printed comparison reads true."""

from __future__ import annotations

import math

MAX_DECIMALS = 12  # beyond it the value is printed whole (repr)


def beside(value: float, bound: float, decimals: int = 2) -> str:
    """``value`` with ``decimals`` decimals, or as many more as it takes for the printed number to
    stand on the same side of ``bound`` as ``value`` does (0.496 against 0.5 prints "0.496", never
    "0.50 < 0.5"); equal to ``bound`` only when ``value`` is. Non-finite values print as repr."""
    if not (math.isfinite(value) and math.isfinite(bound)):
        return repr(value)
    side = (value > bound) - (value < bound)
    for d in range(decimals, MAX_DECIMALS + 1):
        text = f"{value:.{d}f}"
        shown = float(text)
        if (shown > bound) - (shown < bound) == side:
            return text
    return repr(value)
