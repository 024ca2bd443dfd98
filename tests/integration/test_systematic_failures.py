"""A campaign whose passes all fail the same way before any item blocks instead of running every
slot (lab.facts.constants.SYSTEMATIC_FAILURES); the failure rows stay, as interrupted rows whose
slots run again, and the campaign resumes once the fault is gone. A variant's own failures (out
of memory) never block it (tests/unit/test_systematic_failures_rule.py)."""

from __future__ import annotations

from conftest import cut_corpus, write_campaign

from lab.launchers.base import LaunchOutcome
from lab.launchers.local import LocalLauncher
from lab.orchestration.orchestrator import Orchestrator
from lab.orchestration.protocol import load_protocol, lock
from lab.orchestration.status import CampaignState


class BrokenHostLauncher(LocalLauncher):
    """Every pass process exits 2 at start-up without writing a result, as a pass does on a host
    missing a library every variant needs."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.launched = 0

    def launch(self, spec, pass_dir, on_line, should_stop=lambda: False):
        self.launched += 1
        return LaunchOutcome(exit_code=2, note="ModuleNotFoundError: No module named 'transformers'")


def test_identical_failures_block_the_campaign_then_it_resumes(tmp_path, model_dir):
    f = write_campaign(tmp_path, model_dir, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1), repetitions=3)
    lock(load_protocol(f))
    broken = BrokenHostLauncher()
    orch = Orchestrator.prepare(f, tmp_path / "runs", broken)
    assert len(orch.journal.plan()) == 6
    assert orch.run() == CampaignState.BLOCKED
    assert broken.launched == 3  # not 6: the remaining slots were not run
    rows = orch.journal.attempts()
    assert [a.status for a in rows] == ["interrupted"] * 3  # kept, not counted against a variant
    assert all("No module named 'transformers'" in a.notes for a in rows)
    assert len({a.variant_id for a in rows}) == 2
    why = orch.journal.get_control("blocked", "")
    assert "\n" not in why and why.startswith("3 passes in a row, of 2 variants, failed the same way")
    assert "No module named 'transformers'" in why
    orch2 = Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher())  # fixed: the same campaign resumes
    assert orch2.run() == CampaignState.FINISHED
    attempts = orch2.journal.attempts()
    assert sorted(a.status for a in attempts) == ["interrupted"] * 3 + ["ok"] * 6  # the rows stay
    assert {a.seq for a in attempts if a.status == "ok"} == {s["seq"] for s in orch2.journal.plan()}
