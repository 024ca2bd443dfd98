"""Task kinds as plug-ins (lab/kinds): the registry, what importing it loads, and the scan that
refuses a branch on a kind's name outside the kind modules (scripts/kind_branches.py, make lint)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from lab.kinds import KINDS, UnknownKind, task_kind

REPO = Path(__file__).resolve().parents[2]


def load_scan():
    spec = importlib.util.spec_from_file_location("kind_branches", REPO / "scripts" / "kind_branches.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_registry_names_each_kind_by_its_own_name():
    assert list(KINDS) == ["classification", "embedding", "custom", "generation"]
    assert all(name == kind.name for name, kind in KINDS.items())
    assert task_kind(None) is task_kind("") is KINDS["classification"]
    with pytest.raises(UnknownKind, match="unknown to this lab; known: classification, embedding"):
        task_kind("regression")


def test_each_kind_names_a_pass_job_that_exists():
    for kind in KINDS.values():
        module, cls = kind.job.split(":")
        assert (REPO / (module.replace(".", "/") + ".py")).is_file(), kind.job
        assert f"class {cls}" in (REPO / (module.replace(".", "/") + ".py")).read_text(), kind.job


def test_each_metric_names_a_function_that_exists():
    from lab.kinds.kind import AGREEMENT_METRIC

    for metric in (AGREEMENT_METRIC, *(m for kind in KINDS.values() for m in kind.metrics)):
        module, fn = metric.function.split(":")
        assert f"def {fn}(" in (REPO / (module.replace(".", "/") + ".py")).read_text(), metric.function
        assert metric.direction == "higher"


def test_each_kind_s_defaults_are_its_own_keys_and_private_keys_are_its_own():
    for kind in KINDS.values():
        assert {k for k, _ in kind.defaults} <= set(kind.keys), kind.name
    owners = [k for kind in KINDS.values() for k in kind.keys]
    assert len(owners) == len(set(owners)), "a [task] key read by two kinds: TaskSection could not refuse it"


def test_importing_the_kinds_loads_no_heavy_library():
    code = ("import sys, lab.kinds; heavy = [m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'numpy', 'transformers', 'pandas')]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_repository_has_no_branch_on_a_kind_name_beyond_the_allowed():
    assert load_scan().main([]) == 0


@pytest.mark.parametrize("line", [
    'if task_kind == "generation":\n    pass\n',
    'x = 1 if proto.task_kind != "custom" else 2\n',
    'ok = task.get("kind") in ("embedding", "classification")\n',
    'TABLE = {"embedding": 1, "generation": 2}\n',
    'NAMES = ("custom", "classification")\n',
])
def test_the_scan_fails_on_a_planted_branch(tmp_path, line, capsys):
    (tmp_path / "lab").mkdir()
    planted = tmp_path / "lab" / "planted.py"
    planted.write_text(line)
    scan = load_scan()
    assert scan.main([str(tmp_path / "lab"), "--base", str(tmp_path)]) == 1
    assert "lab/planted.py:" in capsys.readouterr().out


def test_the_scan_passes_what_is_no_branch_on_a_kind(tmp_path):
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "fine.py").write_text(
        'if kind in ("docker", "auto"):\n    pass\n'           # a launcher's kind, not a task kind
        'if task.record == "vector":\n    pass\n'             # a kind object's attribute
        'if name == "generation":\n    pass\n'                # not named like a kind
        'if kind.generates_text:\n    pass\n')
    assert load_scan().main([str(tmp_path / "lab"), "--base", str(tmp_path)]) == 0


def test_the_scan_fails_on_an_allowed_branch_no_longer_there(monkeypatch):
    scan = load_scan()
    monkeypatch.setattr(scan, "ALLOWED", (*scan.ALLOWED, ("lab/nowhere.py", 'if kind == "custom":')))
    assert scan.main([]) == 1
