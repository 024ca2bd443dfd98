"""The import-linter contracts of pyproject.toml catch what docs/architecture.md's layer table
forbids, imports inside functions included (issue 9: a maintainer's trial slipped three such
imports past `make lint`), and their module lists stay complete as lab/ grows."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from conftest import REPO

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
SERVICE_AND_CLI = {"lab.campaigns", "lab.views", "lab.cli"}
FACTS_CONTRACT = ("Facts (files, host, host_cards, constants, diskfull, cost, errors, typecheck) import no other "
                  "lab module")
BELOW_SERVICE_CONTRACT = "The engine below the service layer imports neither it nor the CLI"
LAUNCHERS_CONTRACT = "Launchers import passes and facts, never the orchestrator layer or what sits beside it"
PASSES_CONTRACT = "The pass runner loads neither textual nor docker"


def contracts() -> dict[str, dict]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["name"]: c for c in config["contracts"]}


def top_level_lab_modules() -> set[str]:
    """lab's own modules and subpackages (one level down), as dotted names."""
    lab = REPO / "lab"
    names = {f"lab.{p.stem}" for p in lab.glob("*.py") if p.name != "__init__.py"}
    names |= {f"lab.{p.name}" for p in lab.iterdir() if (p / "__init__.py").is_file()}
    return names


def test_contract_module_lists_name_every_lab_module():
    """A new module must be placed: facts or not, and below the service layer or in it."""
    every = top_level_lab_modules()
    facts = contracts()[FACTS_CONTRACT]
    lab_forbidden = {m for m in facts["forbidden_modules"] if m.startswith("lab.")}
    placed = set(facts["source_modules"]) | lab_forbidden
    assert placed == every, sorted(every ^ placed)
    assert not set(facts["source_modules"]) & lab_forbidden
    below = set(contracts()[BELOW_SERVICE_CONTRACT]["source_modules"])
    assert below | SERVICE_AND_CLI == every, sorted(every ^ (below | SERVICE_AND_CLI))


def test_layer_table_places_every_lab_module():
    """docs/architecture.md names every top-level module of lab/ (the table and the text under it)."""
    text = (REPO / "docs" / "architecture.md").read_text()
    layers = text[text.index("## Layers"):text.index("## Where a pass's batch size travels")]
    missing = []
    for module in sorted(top_level_lab_modules()):
        name = module.split(".", 1)[1]
        if f"`lab/{name}.py`" not in layers and f"`lab/{name}/`" not in layers and f"`{name}.py`" not in layers \
                and f"`{name}/`" not in layers:
            missing.append(module)
    assert not missing, f"not placed in docs/architecture.md's layers: {missing}"


def run_lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo", "pyproject.toml"], cwd=root,
                          capture_output=True, text=True, timeout=300, check=False,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def broken(output: str) -> set[str]:
    """Names of the contracts reported BROKEN (names may wrap across lines)."""
    flat = " ".join(output.split())
    return {name for name in contracts() if f"{name} BROKEN" in flat}


def test_real_code_keeps_every_contract():
    r = run_lint_imports(REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


def test_function_level_imports_across_layers_are_caught(tmp_path):
    """The trial's three imports (each inside a function), one per kind, break their contracts."""
    for folder in ("lab", "tui"):
        shutil.copytree(REPO / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    bad = {
        "lab/launchers/local.py": "lab.journal",     # a launcher reaching the orchestrator layer
        "lab/constants.py": "lab.config",            # a fact importing an engine module
        "lab/report/build.py": "lab.campaigns",      # the report reaching up to the service layer
        "lab/passes/spec.py": "lab.status",          # a pass reaching the orchestrator layer
    }
    for path, target in bad.items():
        with (tmp_path / path).open("a") as f:
            f.write(f"\n\ndef _layer_break():\n    import {target}\n    return {target}\n")
    r = run_lint_imports(tmp_path)
    assert r.returncode != 0, r.stdout
    assert {FACTS_CONTRACT, BELOW_SERVICE_CONTRACT, LAUNCHERS_CONTRACT, PASSES_CONTRACT} <= broken(r.stdout), r.stdout
    flat = " ".join(r.stdout.split())
    for path, target in bad.items():
        importer = path.removesuffix(".py").replace("/", ".")
        assert f"{importer} -> {target}" in flat, (importer, target, r.stdout)
