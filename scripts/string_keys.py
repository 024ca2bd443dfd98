"""Count the string-key reads in the packages that should read typed records (issue 33, part 3).

A string-key read is ``x["name"]`` (a subscript by a string literal) or ``x.get("name", ...)``
(a ``get`` call whose first argument is a string literal): the reader names a field by a string
that no type checker follows, where a typed record would give an attribute. Counted in lab/report,
lab/evidence, lab/compare, lab/service and tui/ (the layers between the typed pass records and the
screen), with the syntax tree, so comments and strings that merely look like one are not counted.

    .venv/bin/python scripts/string_keys.py           # per package and in all, against CEILING
    .venv/bin/python scripts/string_keys.py --files   # the 20 files with the most

Exit status 1 when the total is above ``CEILING`` (`make lint` runs it): the count may only go
down. Lower ``CEILING`` to the new total when a change removes reads; the goal is ``GOAL``.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("lab/report", "lab/evidence", "lab/compare", "lab/service", "tui")
CEILING = 101
"""The total on 2026-12-05 (report, evidence, compare, service and the UI read typed records; 0.8
per 100 lines): only lowered."""
GOAL = 150


def is_read(node: ast.AST) -> bool:
    """``node`` is ``x["name"]`` (loaded) or ``x.get("name", ...)``."""
    if isinstance(node, ast.Subscript):
        return isinstance(node.ctx, ast.Load) and isinstance(node.slice, ast.Constant) \
            and isinstance(node.slice.value, str)
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
        and bool(node.args) and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)


def reads(tree: ast.AST) -> int:
    """String-key reads in ``tree``: subscripts by a string literal and ``.get("...")`` calls."""
    return sum(1 for node in ast.walk(tree) if is_read(node))


def count(root: Path = REPO) -> Counter:
    """{file path relative to ``root``: string-key reads} over PACKAGES."""
    out: Counter = Counter()
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            out[path.relative_to(root).as_posix()] = reads(ast.parse(path.read_text(encoding="utf-8")))
    return out


def main(argv: list[str]) -> int:
    per_file = count()
    total = sum(per_file.values())
    lines = sum(len((REPO / f).read_text(encoding="utf-8").splitlines()) for f in per_file)
    if "--files" in argv:
        for f, n in per_file.most_common(20):
            print(f"{n:5d}  {f}")
    for package in PACKAGES:
        print(f"{sum(n for f, n in per_file.items() if f.startswith(package + '/')):5d}  {package}")
    print(f"{total:5d}  in all, {100 * total / max(lines, 1):.1f} per 100 lines "
          f"(ceiling {CEILING}, goal {GOAL})")
    if total > CEILING:
        print(f"string_keys: {total} string-key reads, above the ceiling {CEILING}: read the typed "
              "record's attribute instead of a dict key (or, if this change removed reads, lower "
              "CEILING in scripts/string_keys.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
