"""Several evidence archives of one protocol -> one decision (SPEC 5: compare/).

comparability (same corpus, model files, quality and timing rules), projection to the
user's load (hours, package, lots), decision (lowest committed budget, break-even loads)
and tables (decision.md, compare.csv, report.html). The CLI (`iteralab compare`) and the
UI's Compare screen both call :func:`compare_to_folder`.
"""
from __future__ import annotations

from pathlib import Path

from lab.compare.decision import Comparison, compare_archives
from lab.compare.evidence import CompareError


def compare_to_folder(archives: list, load_items: int, out_dir: str | Path, **options) -> tuple[Comparison, dict]:
    """compare_archives(archives, load_items, **options), then write decision.md, compare.csv
    and report.html under ``out_dir`` (only once the comparison succeeded: a refused
    comparison writes nothing). Returns (comparison, {"decision", "csv", "html": Path})."""
    from lab.compare.tables import write_comparison

    c = compare_archives(archives, load_items, **options)
    return c, write_comparison(c, out_dir)


def list_archives(root: str | Path) -> list[Path]:
    """Evidence archives (*.tar.gz) under ``root`` (e.g. runs/), newest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p for p in root.rglob("*.tar.gz") if p.is_file()]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


__all__ = ["CompareError", "Comparison", "compare_archives", "compare_to_folder", "list_archives"]
