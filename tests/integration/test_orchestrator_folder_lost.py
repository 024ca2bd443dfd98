"""A campaign folder deleted while the campaign runs is noticed: the orchestrator stops with the
reason instead of writing passes to a deleted journal and ending 'finished' (real CLI process,
real demo model, tiny corpus)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import psutil
import pytest
from conftest import REPO, cut_corpus, wait_until, write_campaign


def test_deleted_campaign_folder_stops_the_campaign_with_the_reason(model_dir, tmp_path):
    from lab.orchestration.protocol import load_protocol, lock

    corpus = cut_corpus(tmp_path / "corpus.jsonl", 2, 1, 1)
    f = write_campaign(tmp_path, model_dir, corpus, name="lost", values=(1, 4, 8))
    lock(load_protocol(f))
    runs = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "lab.cli", "campaign", "run", str(f), "--launcher", "local"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO), "ITERALAB_RUNS": str(runs)})
    try:
        first_result = "lost/*/passes/*/result.json"
        wait_until(lambda: list(runs.glob(first_result)) or proc.poll() is not None, 180,
                   "the first pass to finish")
        assert list(runs.glob(first_result)), f"the orchestrator exited (rc {proc.returncode}) before a pass finished"
        # delete it as a user would, but atomically: a rename first (rmtree racing with the
        # orchestrator creating files in the folder could raise), then the renamed copy goes
        folder = next(runs.glob("lost/*"))
        gone = folder.with_name(folder.name + ".deleted")
        folder.rename(gone)
        shutil.rmtree(gone, ignore_errors=True)  # a file created in it meanwhile changes nothing checked
        out, err = proc.communicate(timeout=240)
    finally:  # never leave the orchestrator or its pass (own session) running
        if proc.poll() is None:
            try:
                orchestrator = psutil.Process(proc.pid)
                orchestrator.suspend()  # frozen first: it cannot start a pass after the listing
                children = orchestrator.children(recursive=True)
            except psutil.Error:
                children = []
            proc.kill()
            for c in children:
                try:
                    c.kill()
                except psutil.Error:
                    pass
            proc.communicate()
    assert proc.returncode == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and "deleted or replaced while the campaign ran" in err
    assert "campaign finished" not in out


def test_folder_gone_as_a_pass_starts_is_the_reason_not_the_missing_file(model_dir, tmp_path):
    """The race CI met once: the folder went between the check before a pass and the pass's first
    file (its log.txt), so the launcher's FileNotFoundError surfaced as a traceback (exit 1). Any
    error while the folder is gone is reported as the folder lost."""
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import CampaignFolderLost, Orchestrator
    from lab.orchestration.protocol import load_protocol, lock

    class FolderGoesAtStart(LocalLauncher):
        def launch(self, spec, pass_dir, on_line, should_stop=lambda: False):
            campaign = pass_dir.parent.parent
            campaign.rename(campaign.with_name(campaign.name + ".deleted"))
            return super().launch(spec, pass_dir, on_line, should_stop)  # opens log.txt: gone

    f = write_campaign(tmp_path, model_dir, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1), name="lost")
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, tmp_path / "runs", FolderGoesAtStart())
    with pytest.raises(CampaignFolderLost, match="deleted or replaced while the campaign ran"):
        orch.run()
