"""Several evidence archives of one protocol -> one decision (SPEC 5: compare/).

comparability (same corpus, model files, quality and timing rules), projection to the
user's load (hours, package, lots), decision (lowest committed budget, break-even loads)
and tables (decision.md, compare.csv, report.html). Entry point: :func:`compare_archives`.
"""
from lab.compare.decision import Comparison, compare_archives
from lab.compare.evidence import CompareError

__all__ = ["Comparison", "CompareError", "compare_archives"]
