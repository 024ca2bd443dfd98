"""Every command line the guides show is one the product accepts (issue 37, part 5): each
`iteralab ...` line of an indented block in README.md and docs/*.md parses with the CLI's own
parser (a renamed verb or option fails here, naming the page and the line), and each `make X`
names a target of the Makefile. Placeholders are read as a user would fill them: an optional
part in [brackets] is left out, `#` starts a comment, a trailing backslash continues the line,
a count written as a word (ITEMS) is a number.
Running them is for the tests that can afford it (test_doc_campaign_locks.py runs
docs/campaign-file.md's walk-through)."""

from __future__ import annotations

import re
import shlex

import pytest
from conftest import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
COMMAND = re.compile(r"^ {4}(?:\$ )?(?:\.venv/bin/)?(iteralab|make) (.*)$")
# A placeholder a page writes in capitals where the option wants a number: a value of that type.
NUMBERS = {"ITEMS": "1000"}


def command_lines() -> list[tuple[str, int, str, list[str]]]:
    """(page, line number, program, arguments) of every command line in an indented block."""
    out = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            m = COMMAND.match(lines[i])
            start = i
            if m:
                text = m[2]
                while text.rstrip().endswith("\\") and i + 1 < len(lines):
                    i += 1
                    text = text.rstrip()[:-1] + " " + lines[i].strip()
                text = re.sub(r"\[[^\]]*\]", "", text.split(" #")[0])
                out.append((page.name, start + 1, m[1], [NUMBERS.get(w, w) for w in shlex.split(text)]))
            i += 1
    return out


LINES = command_lines()


def test_the_guides_show_commands_of_both_kinds():
    assert sum(p == "iteralab" for _, _, p, _ in LINES) >= 20 and sum(p == "make" for _, _, p, _ in LINES) >= 5


@pytest.mark.parametrize(("page", "line", "argv"), [(pg, n, a) for pg, n, p, a in LINES if p == "iteralab"],
                         ids=lambda v: str(v) if not isinstance(v, list) else "")
def test_each_iteralab_line_parses_with_the_cli(page, line, argv, capsys):
    from lab.cli import parser

    try:
        parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"{page}:{line}: `iteralab {' '.join(argv)}` is refused by the CLI (exit {exc.code}): "
                    f"{capsys.readouterr().err.strip()}")


def test_each_make_line_names_a_target():
    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(encoding="utf-8"), re.M))
    wrong = [f"{pg}:{n}: make {' '.join(a)}" for pg, n, p, a in LINES if p == "make"
             for t in a if "=" not in t and t not in targets]
    assert not wrong, wrong
