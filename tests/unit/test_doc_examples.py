"""Every campaign-file example in README.md and docs/ is one the lab accepts (issue 37 part 5):
a whole file is parsed as written; a fragment (a `[task]`, `[quality]` or `[[series]]` block of
a guide) is parsed over the demo campaign, its keys replacing the demo's and its series added,
by the campaign file's own parser (lab.orchestration.config.parse_config, the checks of
`protocol lock` that need no model or corpus)."""

from __future__ import annotations

import copy
import re
import tomllib
from pathlib import Path

import pytest

from lab.orchestration.config import ConfigError, parse_config

REPO = Path(__file__).resolve().parents[2]
DEMOS = {"classification": REPO / "lab" / "defaults" / "demo.toml",
         "embedding": REPO / "demo" / "campaign-embedding.toml",
         "generation": REPO / "demo" / "campaign-generation.toml"}
TABLE = re.compile(r"^\[\[?\w+\]\]?\s*$")


def toml_blocks(text: str) -> list[str]:
    """The indented code blocks of a Markdown page that open with a TOML table header."""
    blocks, block, blank = [], [], True
    for line in [*text.splitlines(), ""]:
        if line.startswith("    ") and (block or blank):
            block.append(line[4:])
            continue
        if line.strip() == "" and block:
            block.append("")
            continue
        if block and TABLE.match(block[0]):
            blocks.append("\n".join(block).strip() + "\n")
        block, blank = [], not line.strip()
    return blocks


def examples() -> list[tuple[str, str]]:
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    return [(str(p.relative_to(REPO)), b) for p in pages for b in toml_blocks(p.read_text(encoding="utf-8"))]


def kind_of(fragment: dict) -> str:
    """The task kind a fragment is written for: its [task] kind, else embedding for a fragment that
    sets min_cosine (an embedding key), else classification."""
    kind = fragment.get("task", {}).get("kind")
    if kind is None and "min_cosine" in fragment.get("quality", {}):
        return "embedding"
    return kind or "classification"


def over_demo(fragment: dict) -> dict:
    """The demo campaign of the fragment's kind (DEMOS; custom: the classification demo) with
    ``fragment``'s keys in place of its own and its series added."""
    demo = DEMOS.get(kind_of(fragment), DEMOS["classification"])
    raw = copy.deepcopy(tomllib.loads(demo.read_text(encoding="utf-8")))
    if "task" in fragment:
        raw["task"] = {}  # the fragment's [task] whole: another kind's keys would be refused
    for key, value in fragment.items():
        if key == "series":
            raw["series"] = raw["series"] + value
        else:
            raw.setdefault(key, {}).update(value)
    return raw


def test_the_guides_hold_campaign_examples():
    found = {page for page, _ in examples()}
    assert {"docs/campaign-file.md", "docs/task-embedding.md", "docs/task-generation.md", "docs/task-custom.md",
            "docs/task-unlabelled.md", "docs/vllm.md"} <= found, found


@pytest.mark.parametrize(("page", "block"), examples(), ids=lambda x: x.splitlines()[0][:40] if "\n" in x else x)
def test_campaign_example_is_accepted(page, block):
    try:
        data = tomllib.loads(block)
    except tomllib.TOMLDecodeError as exc:
        pytest.fail(f"{page}: example opening {block.splitlines()[0]!r} is not TOML: {exc}")
    raw = data if "campaign" in data else over_demo(data)
    try:
        parse_config(raw)
    except ConfigError as exc:
        pytest.fail(f"{page}: example opening {block.splitlines()[0]!r} is refused: {exc}")


def test_a_refused_example_fails():
    with pytest.raises(ConfigError, match="unknown key 'temperature'"):
        parse_config(over_demo(tomllib.loads('[task]\nkind = "generation"\nprompt = "{text}"\n'
                                             'max_new_tokens = 4\ntemperature = 0.7\n')))
