"""The generated reference (docs/reference/campaign-file.md, docs/reference/cli.md) is what
scripts/gen_reference.py writes from the code now: a campaign-file key, a variant field or a CLI
option added, removed or reworded without regenerating the pages fails here, with the command
that regenerates them (issue 37 part 3)."""

from __future__ import annotations

import importlib.util
import typing
from dataclasses import fields
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gen_reference.py"


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("gen_reference", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("page", ["campaign-file.md", "cli.md"])
def test_generated_page_is_current(gen, page):
    path = REPO / "docs" / "reference" / page
    make = {gen.CAMPAIGN_PAGE.name: gen.campaign_page, gen.CLI_PAGE.name: gen.cli_page}[page]
    assert path.is_file(), f"docs/reference/{page} is missing; run `{gen.COMMAND}`"
    assert path.read_text(encoding="utf-8") == make(), f"docs/reference/{page} is stale; run `{gen.COMMAND}`"


def test_every_campaign_key_and_cli_option_is_on_its_page(gen):
    from lab.inputs.variants import Variant
    from lab.orchestration.config import SECTIONS, VARIANT_KEYS

    text = gen.campaign_page()
    for name, cls in SECTIONS.items():
        assert f"## [{name}]" in text
        for f in fields(cls):
            assert f"| `{f.name}` | " in text, (name, f.name)
    hints = typing.get_type_hints(Variant)
    assert all(f"| `{k}` | " in text for k in VARIANT_KEYS) and set(VARIANT_KEYS) <= set(hints)
    cli = gen.cli_page()
    for verb in ("corpus build", "protocol lock", "campaign run", "campaign replay", "campaign status", "report",
                 "archive", "compare", "doctor", "up", "demo"):
        assert f"## `iteralab {verb}`" in cli, verb
    assert "| `--source` SOURCE (required) |" in cli and "| `--tuning` TUNING | `0` |" in cli
    assert "| `--load` LOAD |  | production load" in cli  # optional: server archives compare without it
    assert "/root/" not in cli and str(REPO) not in cli and str(Path.home()) + "/" not in cli


def test_a_stale_page_is_named_with_the_command(gen, tmp_path, monkeypatch, capsys):
    page = tmp_path / "cli.md"
    page.write_text(gen.cli_page().replace("--detach", "--detached"), encoding="utf-8")
    monkeypatch.setattr(gen, "PAGES", {page: gen.cli_page})
    monkeypatch.setattr(gen, "REPO", tmp_path)
    assert gen.stale() == [page]
    assert gen.main(["--check"]) == 1
    assert f"cli.md is stale; run `{gen.COMMAND}`" in capsys.readouterr().err
    page.write_text(gen.cli_page(), encoding="utf-8")
    assert gen.main(["--check"]) == 0
