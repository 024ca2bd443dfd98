"""Every relative link and #anchor in README.md and docs/ resolves (issue 37 part 5): a moved
page or a renamed heading fails here, naming the page, the link and what is missing.

Anchors follow GitHub's rule for headings (:func:`anchors`): lower case, inline code marks and
punctuation dropped, spaces turned to hyphens, a repeated heading suffixed -1, -2, ..."""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")


def pages() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def prose(text: str) -> list[str]:
    """The lines of ``text`` outside code blocks (fenced, or indented 4 spaces after a blank line)."""
    out, fenced, indented, blank = [], False, False, True
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if fenced:
            continue
        if line.startswith("    ") and (blank or indented) and not re.match(r"\s*([-*]|\d+\.) ", line):
            indented = True
            continue
        indented = False if line.strip() else indented
        blank = not line.strip()
        out.append(line)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: links reduced to their text, lower case, every
    character but letters, digits, '-', '_' and spaces dropped, spaces turned to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a Markdown page, repeated headings numbered as GitHub does."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose(text):
        m = re.match(r"#{1,6} (.+?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken(page: Path) -> list[str]:
    """'page: link (why)' for each relative link or anchor of ``page`` that does not resolve."""
    problems = []
    text = page.read_text(encoding="utf-8")
    for line in prose(text):
        for target in LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not checked here
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(REPO)}: {target}"
            if not dest.exists():
                problems.append(f"{where} (no such file: {dest.relative_to(REPO) if REPO in dest.parents else dest})")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text(encoding="utf-8")):
                problems.append(f"{where} (no heading gives #{anchor} in {dest.relative_to(REPO)})")
    return problems


def test_every_relative_link_and_anchor_resolves():
    problems = [p for page in pages() for p in broken(page)]
    assert not problems, "broken links (fix the link or the heading):\n" + "\n".join(problems)


def test_github_anchor_rule():
    assert slug("What `make up` does") == "what-make-up-does"
    assert slug('"Does not distinguish"') == "does-not-distinguish"
    assert slug("2026-12-04, `.ci/run` on a clone of f89c3d5") == "2026-12-04-cirun-on-a-clone-of-f89c3d5"
    assert anchors("# A\n## B\n## B\n    # not a heading\n") == {"a", "b", "b-1"}


def test_a_broken_link_and_a_broken_anchor_are_found(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# Title\n\n## Part one\n")
    page = tmp_path / "docs" / "a.md"
    page.write_text("[ok](b.md#part-one) [gone](c.md) [bad](b.md#part-two) [here](#title-x)\n\n"
                    "    [in code](nowhere.md)\n")
    found = broken(page)
    assert [p.split(" (")[0] for p in found] == ["docs/a.md: c.md", "docs/a.md: b.md#part-two", "docs/a.md: #title-x"]
