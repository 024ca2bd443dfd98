"""CSV cells that a spreadsheet would run as a formula are neutralised (OWASP "CSV injection").

Every CSV the product writes goes through :func:`write_csv`. A text cell starting with
``=``, ``+``, ``-``, ``@``, a tab or a carriage return gets a leading apostrophe, so
Excel/LibreOffice show it as text; numbers (``-0.25``) are left as they are.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def neutralise_cell(value):
    """``value`` unchanged unless it is text a spreadsheet would evaluate; then "'" + value."""
    if not isinstance(value, str) or not value.startswith(FORMULA_START):
        return value
    try:
        float(value)
        return value  # a plain number such as "-0.25"
    except ValueError:
        return "'" + value


def spreadsheet_safe(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` with every text cell (and column name) neutralised."""
    out = df.copy()
    for c in out.columns:
        if not pd.api.types.is_numeric_dtype(out[c]) and not pd.api.types.is_bool_dtype(out[c]):
            out[c] = out[c].map(neutralise_cell)
    out.columns = [neutralise_cell(str(c)) for c in out.columns]
    return out


def write_csv(df: pd.DataFrame, path: Path) -> Path:
    """Write ``df`` (no index) with formula-like cells neutralised. Returns ``path``."""
    spreadsheet_safe(df).to_csv(path, index=False)
    return path
