"""The import-linter contracts of pyproject.toml catch what docs/architecture.md's layer table
forbids, imports inside functions included (issue 9: a maintainer's trial slipped three such
imports past `make lint`), and their module lists stay complete as lab/ grows."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import REPO

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
LAYERS_CONTRACT = "Engine layers, one folder each (docs/architecture.md)"
UI_CONTRACT = "The UI imports only the service layer, the pass records and the facts"


def contracts() -> dict[str, dict]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["name"]: c for c in config["contracts"]}


def engine_layers() -> list[set[str]]:
    """The layers contract's layers, top first, each as the set of its dotted module names."""
    layers = contracts()[LAYERS_CONTRACT]
    (container,) = layers["containers"]
    return [{f"{container}.{name.strip()}" for name in layer.replace("|", ":").split(":")}
            for layer in layers["layers"]]


def top_level_lab_modules() -> set[str]:
    """lab's own top-level modules (the CLI only) and folders (one per layer), as dotted names."""
    lab = REPO / "lab"
    names = {f"lab.{p.stem}" for p in lab.glob("*.py") if p.name != "__init__.py"}
    names |= {f"lab.{p.name}" for p in lab.iterdir() if (p / "__init__.py").is_file()}
    return names


def test_the_layers_contract_places_every_lab_module_once():
    """One layers contract states the engine's layers (no hand-kept lists of module names): it
    is exhaustive, so a new folder or module must be placed; each sits in exactly one layer; the
    CLI is on top, the service layer under it, the facts at the bottom, passes below launchers;
    the CLI is the only module outside a folder."""
    contract = contracts()[LAYERS_CONTRACT]
    assert contract["type"] == "layers" and contract["exhaustive"] is True
    layers = engine_layers()
    placed = [m for layer in layers for m in layer]
    assert len(placed) == len(set(placed)), sorted(m for m in placed if placed.count(m) > 1)
    every = top_level_lab_modules()
    assert set(placed) == every, sorted(every ^ set(placed))
    assert layers[0] == {"lab.cli"} and layers[1] == {"lab.service"} and layers[-1] == {"lab.facts"}
    index = {m: i for i, layer in enumerate(layers) for m in layer}
    assert index["lab.orchestration"] < index["lab.launchers"] < index["lab.passes"] < index["lab.memory"]
    assert index["lab.passes"] < index["lab.inputs"]
    assert {p.stem for p in (REPO / "lab").glob("*.py")} == {"__init__", "cli"}, "a flat module outside a layer folder"
    forbidden = [c for c in contracts().values()  # the engine's own forbidden contracts (not tui -> lab.cli)
                 if c["type"] == "forbidden" and all(m.startswith("lab") for m in c["source_modules"])]
    assert not any(m.startswith("lab.") for c in forbidden for m in c["forbidden_modules"]), \
        "a forbidden contract lists lab modules again: place them in the layers contract"


def test_layer_table_places_every_lab_module():
    """docs/architecture.md names every layer folder of lab/ (the table and the text under it)."""
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


BAD_IMPORTS = {
    "lab/launchers/local.py": "lab.orchestration.journal",  # a launcher reaching the orchestration layer
    "lab/facts/constants.py": "lab.orchestration.config",   # a fact importing an engine module
    "lab/report/build.py": "lab.service.campaigns",         # the report reaching up to the service layer
    "lab/passes/spec.py": "lab.orchestration.status",       # a pass reaching the orchestration layer
    "lab/demo/model.py": "lab.orchestration.journal",       # independent siblings ("|") importing each other
    "tui/widgets/tick.py": "lab.passes.events",             # the UI: a sibling of the records
    "tui/screens/results_screen.py": "lab.report.build",   # the UI past the service layer
    "tui/screens/archive_screen.py": "lab.cli",             # the UI calling the CLI
}
ALLOWED_UI_IMPORTS = {"tui/widgets/tick.py": "lab.passes.records", "tui/messages.py": "lab.facts.constants",
                      "tui/widgets/archive_picker.py": "lab.service.live"}


@pytest.fixture(scope="module")
def broken_copy(tmp_path_factory) -> subprocess.CompletedProcess[str]:
    """lint-imports on a copy of lab/ and tui/ with BAD_IMPORTS and ALLOWED_UI_IMPORTS added (each
    inside a function) and a new top-level module left out of the layers (lab/newcomer.py): one
    run, read by the two tests below (each break is named separately in the output)."""
    root = tmp_path_factory.mktemp("broken")
    for folder in ("lab", "tui"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    for n, (path, target) in enumerate([*BAD_IMPORTS.items(), *ALLOWED_UI_IMPORTS.items()]):
        with (root / path).open("a") as f:
            f.write(f"\n\ndef _layer_break_{n}():\n    import {target}\n    return {target}\n")
    (root / "lab" / "newcomer.py").write_text("X = 1\n")
    return run_lint_imports(root)


def test_function_level_imports_across_layers_are_caught(broken_copy):
    """The trial's three imports (each inside a function), one per kind, break their contracts;
    so does a screen or widget reaching past the service layer (the records' sibling module, the
    report, the CLI), while the records, the facts and the service layer stay allowed to it."""
    r = broken_copy
    assert r.returncode != 0, r.stdout
    assert {LAYERS_CONTRACT, UI_CONTRACT} <= broken(r.stdout), r.stdout
    flat = " ".join(r.stdout.split())
    for path, target in BAD_IMPORTS.items():
        importer = path.removesuffix(".py").replace("/", ".")
        assert f"{importer} -> {target}" in flat, (importer, target, r.stdout)
    for path, target in ALLOWED_UI_IMPORTS.items():
        importer = path.removesuffix(".py").replace("/", ".")
        assert f"{importer} -> {target}" not in flat, (importer, target, r.stdout)


def test_a_module_left_out_of_the_layers_breaks_the_contract(broken_copy):
    """exhaustive = true: a new top-level module or folder of lab/ fails lint until it is placed."""
    r = broken_copy
    assert r.returncode != 0, r.stdout
    assert "newcomer" in r.stdout, r.stdout


def test_no_two_modules_of_lab_share_a_name():
    """A module's name says what it holds without its folder (issue 33): `decision.py` in two
    layers made every reader ask which one. Packages' ``__init__.py`` excepted."""
    from collections import Counter

    names = Counter(p.name for p in (REPO / "lab").rglob("*.py")
                    if p.name != "__init__.py" and "__pycache__" not in p.parts)
    assert [n for n, k in names.items() if k > 1] == []
