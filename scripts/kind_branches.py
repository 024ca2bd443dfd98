"""Refuse a branch on a task kind's name outside the kind's own modules (run by ``make lint``).

Usage (from the repository root):

    python scripts/kind_branches.py            # scan lab/ and tui/; exit 1 on a new branch
    python scripts/kind_branches.py ROOT ...   # scan other folders (tests plant a branch in one)

A task kind is declared once, by its object in ``lab/kinds/`` (docs/architecture.md, "Task
kinds"); a caller reads the object's attributes (``kind.generates_text``, ``kind.record``) instead
of comparing the kind with its name. Found, by the syntax tree of every ``.py`` file:

- a comparison (``==``, ``!=``, ``in``, ``not in``) whose one side names a kind (a name or
  attribute containing ``kind``) and whose other side is a kind's name string, or a tuple, list or
  set holding one (``task_kind == "generation"``, ``kind in ("embedding", "custom")``);
- a table keyed by kinds' names (a dict literal with two or more kinds' names as keys) and a
  tuple, list or set of two or more kinds' names outside a comparison (``TASK_KINDS``).

The kind modules (``lab/kinds/``) and each kind's pass job module (the ``job`` its object
names) are the kind's own and not scanned. ``ALLOWED`` lists the branches not yet moved, each
as (file, the line's text stripped), so their count can only go down: a listed pair no longer
found fails too (remove it from the list).

Output: one line per finding, ``path:line: text``, then ``kind branches: N new, M allowed``.
Exit status: 0 none new and none stale, 1 otherwise.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lab.kinds import KINDS  # noqa: E402  (after the repository is on the path)

NAMES = frozenset(KINDS)
OWN = ("lab/kinds/", *(k.job.split(":")[0].replace(".", "/") + ".py" for k in KINDS.values()))
"""Paths (relative to the repository) of the kinds' own modules, never scanned."""

ALLOWED: tuple[tuple[str, str], ...] = (
)
"""(file, stripped line text) of the branches on a kind's name not yet moved into the kind objects."""


def _kind_names(node: ast.AST) -> list[str]:
    """The kinds' names that ``node`` is or holds (a string constant, a tuple, list or set of them)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value] if node.value in NAMES else []
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in NAMES]
    return []


def _names_a_kind(node: ast.AST) -> bool:
    """True when ``node`` reads something named like a kind (``kind``, ``task_kind``, ``self.kind``,
    ``task.get("kind")``)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and "kind" in sub.id.lower():
            return True
        if isinstance(sub, ast.Attribute) and "kind" in sub.attr.lower():
            return True
        if isinstance(sub, ast.Constant) and sub.value == "kind":
            return True
    return False


def findings(tree: ast.AST) -> Iterator[int]:
    """Line numbers of the branches on a kind's name and the tables of kinds' names in ``tree``."""
    in_compare: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for sub in sides:
                in_compare.update(id(s) for s in ast.walk(sub))
            for op, left, right in zip(node.ops, sides, sides[1:], strict=False):
                if not isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
                    continue
                if (_kind_names(right) and _names_a_kind(left)) or (_kind_names(left) and _names_a_kind(right)):
                    yield node.lineno
                    break
    for node in ast.walk(tree):
        if id(node) in in_compare:
            continue
        if isinstance(node, ast.Dict):
            keys = [k for k in node.keys if k is not None and _kind_names(k)]
            if len(keys) >= 2:
                yield node.lineno
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(_kind_names(node)) >= 2:
            yield node.lineno


def scan(roots: list[Path], base: Path) -> list[tuple[str, int, str]]:
    """(path relative to ``base``, line, stripped text) of every finding under ``roots``, sorted."""
    out = set()
    for root in roots:
        for path in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            rel = path.resolve().relative_to(base.resolve()).as_posix()
            if rel.startswith(OWN[0]) or rel in OWN[1:]:
                continue
            text = path.read_text(encoding="utf-8")
            lines = text.splitlines()
            for n in findings(ast.parse(text, filename=rel)):
                out.add((rel, n, lines[n - 1].strip()))
    return sorted(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="*", help="folders or files to scan (default: lab tui)")
    parser.add_argument("--base", default=str(REPO), help="the folder paths are relative to (default: the repository)")
    args = parser.parse_args(argv)
    base = Path(args.base)
    roots = [Path(r) for r in args.roots] or [REPO / "lab", REPO / "tui"]
    found = scan(roots, base)
    allowed = set(ALLOWED)
    new = [f for f in found if (f[0], f[2]) not in allowed]
    seen = {(f[0], f[2]) for f in found}
    stale = [a for a in ALLOWED if a not in seen] if not args.roots else []
    for rel, n, text in new:
        print(f"{rel}:{n}: {text}  <- a branch on a task kind's name: read the kind object instead "
              "(lab.kinds.task_kind(name); docs/architecture.md, Task kinds)")
    for rel, text in stale:
        print(f"{rel}: {text}  <- listed in ALLOWED but no longer found: remove it from scripts/kind_branches.py")
    print(f"kind branches: {len(new)} new, {len(found) - len(new)} allowed")
    return 1 if new or stale else 0


if __name__ == "__main__":
    sys.exit(main())
