"""Layers seen from a fresh interpreter: what importing a module really loads (imports inside
functions run later and are checked by import-linter; see docs/architecture.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO

UI_AND_ENGINE_CLIENTS = ("textual", "textual_plotext", "docker", "tui")


def loaded_top_packages(module: str) -> set[str]:
    """Top-level package names in sys.modules after `import module` in a new interpreter."""
    code = f"import sys, json, {module}; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    return set(json.loads(r.stdout.strip().splitlines()[-1]))


def test_pass_runner_loads_neither_textual_nor_docker():
    """What runs inside a pass container carries no UI and no container client."""
    loaded = loaded_top_packages("lab.passes.runner")
    assert "lab" in loaded
    assert not loaded & set(UI_AND_ENGINE_CLIENTS), sorted(loaded & set(UI_AND_ENGINE_CLIENTS))


@pytest.mark.parametrize("module", ["lab.cli", "lab.service.campaigns", "lab.service.views",
                                    "lab.orchestration.orchestrator",
                                    "lab.report.build", "lab.orchestration.doctor"])
def test_engine_and_cli_load_no_ui(module):
    loaded = loaded_top_packages(module)
    assert not loaded & {"textual", "textual_plotext", "tui"}, module


def test_the_check_can_fail():
    """The probe sees a UI import when there is one (else the tests above prove nothing)."""
    assert "textual" in loaded_top_packages("tui.app")


def test_archive_verify_loads_no_array_library():
    """`archive verify` holds its memory to a few MiB above the interpreter's whatever the members'
    size (scripts/bench_verify.py): importing it loads neither numpy nor pandas; a server pass's
    figures bring numpy only when an archive holds one (lab.evidence.served)."""
    loaded = loaded_top_packages("lab.evidence.archive, lab.evidence.verify, lab.evidence.served")
    assert "lab" in loaded and not loaded & {"numpy", "pandas", "torch"}, sorted(loaded & {"numpy", "pandas", "torch"})
