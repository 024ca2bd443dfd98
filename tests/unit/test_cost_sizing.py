"""Smallest covering package (lab.cost.sizing) on the shipped catalog: prices only from quote()."""

from __future__ import annotations

from decimal import Decimal

import pytest

from lab.cost.forfaits import PricingError, load_catalog
from lab.cost.sizing import cheapest_covering, package_limits


def test_one_lot_when_it_fits_more_lots_when_the_deadline_is_near():
    cat = load_catalog()
    s = cheapest_covering(cat, "rtx-4090", lambda lots: 100 / lots, None, 8)
    assert (s.quote.days, s.quote.lots, s.quote.committed_budget) == (7, 1, Decimal("110.00"))
    s = cheapest_covering(cat, "rtx-4090", lambda lots: 100 / lots, 40.0, 8)  # 40 h to the deadline
    assert s.quote.lots == 3 and s.quote.committed_budget == Decimal("330.00")
    assert s.hours_needed == pytest.approx(100 / 3) and s.hours_allowed == 40.0
    s = cheapest_covering(cat, "b200", lambda lots: 300 / lots, None, 8)  # 168 h package
    assert s.quote.lots == 2 and s.quote.total_cards == 4 and s.quote.committed_budget == Decimal("4142.00")


def test_nothing_covers_and_unknown_gpu():
    cat = load_catalog()
    assert cheapest_covering(cat, "rtx-4090", lambda lots: 1000 / lots, 10.0, 8) is None
    assert package_limits(cat, "rtx-4090", 500.0) == [(7, 168.0)]
    with pytest.raises(PricingError, match="unknown GPU"):
        cheapest_covering(cat, "h100", lambda lots: 1.0, None, 1)
