"""Defaults live once (issue 9, "Defaults live once"): lab/facts/constants.py and the typed
campaign-file sections of lab/orchestration/config.py. No module of lab/ or tui/ (nor the Makefile) spells a
default again: no ``.get("<section field>", <literal>)`` for a field whose typed section
already has a default, and no distinctive constant value (4+ digits) repeated."""

from __future__ import annotations

import ast
import dataclasses

from conftest import REPO, engine_trees

import lab.facts.constants as constants
import lab.orchestration.config as config

SECTIONS = (config.CampaignSection, config.CorpusSection, config.ModelSection, config.QualitySection,
            config.TimingSection, config.CostSection, config.SeriesSection)


def defaulted_fields() -> set[str]:
    return {f.name for s in SECTIONS for f in dataclasses.fields(s)
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}


def literal_defaults(source: str | ast.Module, fields: set[str]) -> list[tuple[int, str]]:
    """``x.get("field", <non-None literal>)`` calls for the given field names (``source``: a
    module's text or its parsed tree)."""
    found = []
    for node in ast.walk(ast.parse(source) if isinstance(source, str) else source):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and len(node.args) == 2 and isinstance(node.args[0], ast.Constant)
                and node.args[0].value in fields and isinstance(node.args[1], ast.Constant)
                and node.args[1].value is not None):
            found.append((node.lineno, ast.unparse(node)))
    return found


def engine_sources():
    """(path, source, tree) of every module of lab/ and tui/ but the two that define the defaults."""
    return [m for m in engine_trees() if m[0] not in ("lab/facts/constants.py", "lab/orchestration/config.py")]


def test_no_section_default_is_spelled_again():
    fields = defaulted_fields()
    assert {"threads", "lots", "seed", "repetitions"} <= fields  # the check looks at the real sections
    found = [f"{rel}:{line}: {code}" for rel, _, tree in engine_sources()
             for line, code in literal_defaults(tree, fields)]
    assert not found, "a section default written again (read the section or lab.facts.constants):\n" + "\n".join(found)


def test_distinctive_constants_are_not_repeated():
    values = {name: str(v) for name, v in vars(constants).items()
              if name.isupper() and isinstance(v, int) and len(str(v)) >= 4}
    assert "CORPUS_SEED" in values
    places = [*((rel, text) for rel, text, _ in engine_sources()), ("Makefile", (REPO / "Makefile").read_text())]
    found = [f"{rel}: {name} = {value}" for rel, text in places for name, value in values.items() if value in text]
    assert not found, found


def test_corpus_build_seed_defaults_to_the_constant():
    from lab.cli import parser

    args = parser().parse_args(["corpus", "build", "--source", "s.jsonl", "--out", "o"])
    assert args.seed == constants.CORPUS_SEED


def test_the_check_sees_a_literal_default():
    src = 'a = t.get("threads", 0)\nb = p.get("lots", DEFAULT_LOTS)\nc = p.get("lots")\nd = p.get("gpu", None)\n'
    assert [line for line, _ in literal_defaults(src, {"threads", "lots", "gpu"})] == [1]
