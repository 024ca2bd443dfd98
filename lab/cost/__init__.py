"""Packages (forfaits), campaign calendar and cost per validated corpus.

The pricing rule lives in one file, :mod:`lab.cost.forfaits`, which also runs alone
as ``scripts/calcul_forfaits.py`` (a symlink to it). Standard library only.
"""
from lab.cost.forfaits import (
    PACKAGE_HOURS,
    Catalog,
    CatalogRow,
    Coverage,
    PricingError,
    Quote,
    Window,
    cost_per_validated_corpus,
    coverage,
    find_row,
    format_hours,
    load_catalog,
    money,
    parse_instant,
    parse_window,
    quote,
)

__all__ = [
    "PACKAGE_HOURS", "Catalog", "CatalogRow", "Coverage", "PricingError", "Quote", "Window",
    "cost_per_validated_corpus", "coverage", "find_row", "format_hours", "load_catalog", "money",
    "parse_instant", "parse_window", "quote",
]
