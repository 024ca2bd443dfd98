"""scripts/layers_move.py on a small repository: it moves the mapped flat modules, rewrites every
kind of reference (longest name first), leaves packages and unknown modules where they are, and a
second run changes nothing."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO

TOOL = REPO / "scripts" / "layers_move.py"

FILES = {
    "lab/__init__.py": "",
    "lab/cli.py": "from lab import archive, host as h\nfrom lab.archive_format import ARCHIVE_INFO\n",
    "lab/archive.py": "import lab.archive_format\nX = lab.archive_format.ARCHIVE_INFO\n",
    "lab/archive_format.py": "ARCHIVE_INFO = 'archive_info.json'\n",
    "lab/evidence.py": "from lab.archive import X\n\ndef assemble_archive():\n    return X\n",
    "lab/host.py": "",
    "lab/files.py": "REPO = Path(__file__).resolve().parent.parent\nHERE = Path(__file__).parent.name\n",
    "lab/newcomer.py": "",
    "lab/passes/__init__.py": "",
    "lab/passes/sequence.py": "from lab.evidence import assemble_archive\n",
    "tests/test_x.py": ('def test(monkeypatch):\n    monkeypatch.setattr("lab.evidence.assemble_archive", None)\n'
                        '    path = REPO / "lab" / "archive_format.py"\n'
                        '    match = r"\\blab\\.archive_format\\.ARCHIVE_INFO\\b"\n'),
    "docs/a.md": "See `lab/archive.py` and `lab/archive_format.py`; run `python -m lab.evidence`.\n",
    "pyproject.toml": ('[tool.importlinter]\nroot_packages = ["lab"]\n\n[[tool.importlinter.contracts]]\n'
                       'name = "Engine layers: service layer > orchestrator > launchers > passes"\n'
                       'type = "layers"\nlayers = ["lab.cli", "lab.archive"]\n\n[[tool.importlinter.contracts]]\n'
                       'name = "kept"\ntype = "forbidden"\nsource_modules = ["lab.host"]\nforbidden_modules = ["x"]\n'),
}


def git(root, *args):
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(root)})


def run_tool(root):
    return subprocess.run([sys.executable, str(TOOL)], cwd=root, capture_output=True, text=True, check=False)


def test_moves_rewrites_and_is_idempotent(tmp_path):
    for rel, text in FILES.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "flat")

    first = run_tool(tmp_path)
    assert first.returncode == 0, first.stderr
    out = first.stdout
    assert "moved    lab/archive_format.py -> lab/evidence/format.py" in out
    assert "moved    lab/evidence.py -> lab/evidence/assemble.py" in out
    assert "not in the map: lab/newcomer.py stays" in out
    assert "by hand? lab/facts/files.py: uses __file__" in out
    assert (tmp_path / "lab/newcomer.py").is_file() and (tmp_path / "lab/passes/sequence.py").is_file()
    assert not (tmp_path / "lab/archive.py").exists()
    assert '"""Evidence' in (tmp_path / "lab/evidence/__init__.py").read_text()

    read = lambda rel: (tmp_path / rel).read_text()  # noqa: E731
    assert read("lab/cli.py") == ("from lab.evidence import archive\nfrom lab.facts import host as h\n"
                                  "from lab.evidence.format import ARCHIVE_INFO\n")
    assert read("lab/evidence/archive.py") == "import lab.evidence.format\nX = lab.evidence.format.ARCHIVE_INFO\n"
    assert read("lab/evidence/assemble.py").startswith("from lab.evidence.archive import X\n")
    assert read("lab/facts/files.py").startswith("REPO = Path(__file__).resolve().parents[2]\n")
    assert read("lab/passes/sequence.py") == "from lab.evidence.assemble import assemble_archive\n"
    assert '"lab.evidence.assemble.assemble_archive"' in read("tests/test_x.py")
    assert 'REPO / "lab" / "evidence" / "format.py"' in read("tests/test_x.py")
    assert r'match = r"\blab\.evidence\.format\.ARCHIVE_INFO\b"' in read("tests/test_x.py")
    assert read("docs/a.md") == ("See `lab/evidence/archive.py` and `lab/evidence/format.py`; "
                                 "run `python -m lab.evidence.assemble`.\n")
    pyproject = read("pyproject.toml")
    assert "Engine layers, one folder each" in pyproject and 'name = "kept"' in pyproject
    assert "service layer > orchestrator" not in pyproject and 'source_modules = ["lab.facts.host"]' in pyproject

    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "moved")
    second = run_tool(tmp_path)
    assert second.returncode == 0, second.stderr
    assert "0 modules moved, 0 folders created, 0 references rewritten in 0 files" in second.stdout
    status = subprocess.run(["git", "status", "--porcelain"], cwd=tmp_path, capture_output=True, text=True)
    assert status.stdout == ""


def test_a_module_at_both_paths_is_refused(tmp_path):
    for rel in ("lab/__init__.py", "lab/host.py", "lab/facts/__init__.py", "lab/facts/host.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    git(tmp_path, "init", "-q")
    r = run_tool(tmp_path)
    assert r.returncode == 1
    assert "lab/host.py and lab/facts/host.py both exist" in r.stderr
