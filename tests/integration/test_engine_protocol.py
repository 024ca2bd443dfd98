"""Protocol lock and versions: an unlocked or edited protocol never runs; versions never mix."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO, cut_corpus, write_campaign

from lab.launchers.local import LocalLauncher
from lab.orchestration.orchestrator import Orchestrator
from lab.orchestration.protocol import ProtocolError, load_protocol, lock, locked_version, read_lock


def test_unlocked_protocol_is_refused(tmp_path, model_dir):
    f = write_campaign(tmp_path, model_dir, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    with pytest.raises(ProtocolError, match="protocol not locked"):
        Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher())
    assert not (tmp_path / "runs").exists()


def test_edit_after_lock_makes_a_new_version_in_its_own_folder(tmp_path, model_dir):
    f = write_campaign(tmp_path, model_dir, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    v1 = lock(load_protocol(f))
    d1 = Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher()).dir
    f.write_text(f.read_text().replace("threshold = 0.2", "threshold = 0.1"))
    with pytest.raises(ProtocolError, match="edited after lock"):
        locked_version(load_protocol(f))
    # the CLI says so in one line and exits 2
    r = subprocess.run([sys.executable, "-m", "lab.cli", "campaign", "run", str(f), "--launcher", "local"],
                       capture_output=True, text=True, cwd=REPO, env={"ITERALAB_RUNS": str(tmp_path / "runs"),
                                                                      "PATH": "/usr/bin:/bin"})
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "edited after lock (version 1)" in r.stderr
    v2 = lock(load_protocol(f))
    assert (v1["version"], v2["version"]) == (1, 2) and v1["sha256"] != v2["sha256"]
    d2 = Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher()).dir
    assert d1 != d2 and d1.name.startswith("v1-") and d2.name.startswith("v2-")
    assert [v["version"] for v in read_lock(f)] == [1, 2]


def test_comments_do_not_change_the_protocol(tmp_path, model_dir):
    f = write_campaign(tmp_path, model_dir, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    lock(load_protocol(f))
    f.write_text("# a note\n" + f.read_text())
    assert locked_version(load_protocol(f))["version"] == 1
