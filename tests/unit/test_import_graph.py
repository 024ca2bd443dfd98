"""scripts/import_graph.py: the repository's import graph has no cycle, and a cycle is caught
(exit 1), including one closed by an import inside a function (issue 9, "Must show")."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO

SCRIPT = REPO / "scripts" / "import_graph.py"


def run_graph(cwd: Path, *packages: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *packages], capture_output=True, text=True,
                          cwd=cwd, timeout=120, check=False)


@pytest.fixture(scope="module")
def repository_graph() -> subprocess.CompletedProcess[str]:
    """One run of the script on the repository, read by both tests of the real graph."""
    return run_graph(REPO)


def test_repository_import_graph_has_no_cycle(repository_graph):
    r = repository_graph
    assert r.returncode == 0, r.stdout + r.stderr
    modules = int(r.stdout.split("modules: ")[1].split()[0])
    assert modules > 50, r.stdout  # lab and tui really were walked
    assert "cycles: 0" in r.stdout


def write_package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_cycle_through_a_function_level_import_is_found(tmp_path):
    write_package(tmp_path, {
        "cyc/__init__.py": "",
        "cyc/a.py": "from cyc import b\n",
        "cyc/b.py": "def f():\n    from cyc import c\n    return c\n",
        "cyc/c.py": "import cyc.a\n",
        "cyc/d.py": "import cyc.a\n",  # imports into the cycle, not part of it
    })
    r = run_graph(tmp_path, "cyc")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "cycle (3 modules): cyc.a -> cyc.b -> cyc.c -> cyc.a" in r.stdout
    assert "cycles: 1" in r.stdout
    assert "cyc.d" not in r.stdout.split("cycle (")[1]


def test_acyclic_package_passes_and_a_type_checking_cycle_counts(tmp_path):
    write_package(tmp_path, {
        "flat/__init__.py": "",
        "flat/a.py": "from flat import b\n",
        "flat/b.py": "X = 1\n",
    })
    assert run_graph(tmp_path, "flat").returncode == 0
    (tmp_path / "flat/b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from flat import a\n")
    r = run_graph(tmp_path, "flat")
    assert r.returncode == 1 and "flat.a -> flat.b -> flat.a" in r.stdout, r.stdout


def test_missing_package_is_a_one_line_error(tmp_path):
    r = run_graph(tmp_path, "no_such_package_here")
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_repository_has_no_cycle_between_packages(repository_graph):
    r = repository_graph
    assert r.returncode == 0, r.stdout + r.stderr
    assert "package cycles: 0" in r.stdout, r.stdout
    assert int(r.stdout.split("packages: ")[1].split()[0]) > 10, r.stdout  # lab's packages and modules


def test_a_cycle_between_packages_through_different_modules_fails(tmp_path):
    """No module cycle, yet the two packages import each other (lab.passes <-> lab.memory was one)."""
    write_package(tmp_path, {
        "top/__init__.py": "",
        "top/passes/__init__.py": "",
        "top/passes/runner.py": "from top.memory import peaks\n",
        "top/passes/events.py": "STATUS = 'ok'\n",
        "top/memory/__init__.py": "",
        "top/memory/peaks.py": "X = 1\n",
        "top/memory/feasibility.py": "def f():\n    from top.passes.events import STATUS\n    return STATUS\n",
    })
    r = run_graph(tmp_path, "top")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "cycles: 0" in r.stdout  # the modules alone are acyclic
    assert ("package cycle (2 packages): top.memory -> top.passes -> top.memory "
            "(top.memory.feasibility -> top.passes.events; top.passes.runner -> top.memory.peaks)") in r.stdout
    assert "package cycles: 1" in r.stdout
    (tmp_path / "top/memory/feasibility.py").write_text("X = 2\n")  # the shared fact moved down: clean
    assert run_graph(tmp_path, "top").returncode == 0
