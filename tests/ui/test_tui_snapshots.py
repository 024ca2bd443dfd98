"""Snapshot tests (pytest-textual-snapshot) of screens 1-4 at 80x24, made deterministic:
fixed clock, fixed telemetry and environment facts, the demo campaign (content-derived
ids and hashes; the model files' fingerprint in the protocol identity fixed), and a journal
written with fixed times. `pytest --snapshot-update` accepts a new rendering after review."""

from __future__ import annotations

from datetime import datetime

import pytest
from conftest import settle
from test_tui_campaigns import CLOCK, FACTS, SAMPLE, demo_copy, synthetic_running_journal

from lab.evidence.format import Verification
from lab.service.campaign_records import ArchiveMade
from tui.app import IteraLabApp
from tui.widgets.pass_table import PassTable
from tui.widgets.telemetry import fixed_telemetry


@pytest.fixture()
def demo(tmp_path, monkeypatch):
    import lab.orchestration.identity

    # the results folder's name carries the protocol identity, which covers the model files'
    # sha256: the demo head is rebuilt per machine, so it is fixed here like the clock
    monkeypatch.setattr(lab.orchestration.identity, "model_fingerprint", lambda ref, revision=None: "0" * 64)
    root = tmp_path / "runs"
    monkeypatch.setenv("ITERALAB_RUNS", str(root))
    return demo_copy(tmp_path / "campaign"), root


def app_on(f, screen: str) -> IteraLabApp:
    """The app as a still view: the journal and telemetry are read once (their workers end)."""
    return IteraLabApp(f, telemetry=fixed_telemetry(SAMPLE), environment_probe=lambda: FACTS,
                       clock=lambda: CLOCK, poll_interval_s=None, telemetry_interval_s=None,
                       start_screen=screen)


def until(cond):
    """Before the snapshot: wait for the app's workers and what they posted (conftest.settle)
    until ``cond(app)`` holds. No sleeping, no timing assumption."""
    async def run_before(pilot) -> None:
        await settle(pilot, lambda: cond(pilot.app), "the screen filled")
    return run_before


def test_snapshot_environment(snap_compare, demo):
    assert snap_compare(app_on(demo[0], "environment"), terminal_size=(80, 24), run_before=until(
        lambda app: "Backend" in str(app.screen.query_one("#env-facts").render())))


def test_snapshot_protocol(snap_compare, demo):
    assert snap_compare(app_on(demo[0], "protocol"), terminal_size=(80, 24), run_before=until(
        lambda app: getattr(app.screen, "info", None)))


def test_snapshot_plan(snap_compare, demo):
    assert snap_compare(app_on(demo[0], "plan"), terminal_size=(80, 24), run_before=until(
        lambda app: getattr(app.screen, "plan", None)))


def test_snapshot_runs_not_started(snap_compare, demo):
    assert snap_compare(app_on(demo[0], "runs"), terminal_size=(80, 24), run_before=until(
        lambda app: app.snapshot is not None and app.telemetry is not None))


def test_snapshot_runs_live_oom(snap_compare, demo):
    f, root = demo
    synthetic_running_journal(f, root)
    assert snap_compare(app_on(f, "runs"), terminal_size=(80, 24), run_before=until(
        lambda app: app.screen.query_one(PassTable).row_count == 20 and app.failures_seen
        and app.telemetry is not None))


# ---- hand-off points (issue 22 part 3): the scp line and the Compare screen at 80x24 ----
# The archive and the comparison are fixed values posted as the workers would post them (a
# real archive's path, sha256 and a real comparison's paths change per run); the screens that
# build them from real archives are tested in test_tui_screens.py and test_tui_compare.py.

ARCHIVE = ArchiveMade(path="/srv/rentals/iteragpu-lab/runs/sentiment-reviews/sentiment-reviews-v3-0a1b2c3d-"
                           "20261201T093012Z.tar.gz",
                      size_bytes=48_213_771, sha256="5" * 64, verification=Verification(412, 20, []), partial=False)


def test_snapshot_archive_scp_lines_fit_80_columns(snap_compare, demo, monkeypatch):
    """A path that would wrap at 80 columns: the scp command in whole lines (none wraps)."""
    from tui.messages import ArchiveReady

    monkeypatch.setenv("SSH_CONNECTION", "203.0.113.9 51000 198.51.100.7 2222")
    monkeypatch.setenv("USER", "alice")
    monkeypatch.setenv("HOME", "/home/alice")

    async def run_before(pilot) -> None:
        pilot.app.screen.post_message(ArchiveReady(ARCHIVE))
        await settle(pilot, lambda: "scp -P 2222" in str(pilot.app.screen.query_one("#scp-line").render()))
    assert snap_compare(app_on(demo[0], "archive"), terminal_size=(80, 24), run_before=run_before)


def fake_archives(root):
    """Archive-named files under runs/ (the list reads names only), with fixed times (newest first)."""
    import os

    folder = root / "sentiment-reviews"
    folder.mkdir(parents=True)
    names = ["sentiment-reviews-v3-0a1b2c3d-20261130T181500Z.tar.gz",
             "sentiment-reviews-v3-0a1b2c3d-20261201T093012Z.tar.gz",
             "sentiment-reviews-v3-0a1b2c3d-20261201T101544Z-b200-second-rental.tar.gz"]
    for i, name in enumerate(names):
        (folder / name).write_bytes(b"")
        os.utime(folder / name, (1_790_000_000 + i, 1_790_000_000 + i))
    return folder


COMPARED = {
    "path": ["PASSES TOO SHORT projected anyway (--allow-short): 4 of 4 configuration(s) fail the projection "
             "rule: at least 3 accepted pass(es) of at least 60 s measured window per configuration",
             "verified sentiment-reviews-v3-0a1b2c3d-20261130T181500Z: 29 files, 4 raw rows; threads 1, "
             "priced as rtx-4090",
             "verified sentiment-reviews-v3-0a1b2c3d-20261201T093012Z: 29 files, 4 raw rows; threads 2, "
             "priced as b200",
             "comparable: corpus sha256 f925cf55f8c5c7b5..., same model files, quality and timing rules",
             "decision: A rtx-4090 / batch 4, committed budget 110.00 USD, covers 50000 items"],
    "banners": ["PASSES TOO SHORT projected anyway (--allow-short): 4 of 4 configuration(s) fail the "
                "projection rule"],
    "decision": "# Comparison of rentals\n\n**Decision: host A rtx-4090, batch 4, fp32: 7-day package x 1 "
                "lot(s), committed budget 110.00 USD, covering the declared load of 50000 items.**\n\n"
                "**Quality.** accuracy 0.5714; the same ML result on B b200 (within the tolerance).\n\n"
                "**Motivation.** lowest committed budget.",
    "files": {"md": "/srv/runs/compare/20261201T093400Z/decision.md",
              "csv": "/srv/runs/compare/20261201T093400Z/compare.csv",
              "html": "/srv/runs/compare/20261201T093400Z/report.html"}}


def test_snapshot_compare_selected_archives_read_as_text(snap_compare, demo):
    """[x] against [ ] (not colour alone), whole archive names, space without a Tab first."""
    fake_archives(demo[1])

    async def run_before(pilot) -> None:
        await settle(pilot, lambda: pilot.app.screen.query_one("#compare-archives").option_count == 3)
        await pilot.press("space", "down", "down", "space")  # the first and the third
        await settle(pilot, lambda: len(pilot.app.screen.query_one("#compare-archives").selected) == 2)
    assert snap_compare(app_on(demo[0], "compare"), terminal_size=(80, 24), run_before=run_before)


def test_snapshot_compare_result_comes_first(snap_compare, demo):
    """After c: the decision and the files written at the top, a status line saying so."""
    from lab.service.views import ComparisonView
    from tui.messages import CompareReady

    fake_archives(demo[1])

    async def run_before(pilot) -> None:
        await settle(pilot, lambda: pilot.app.screen.query_one("#compare-archives").option_count == 3)
        pilot.app.screen.post_message(CompareReady(ComparisonView(**COMPARED)))
        await settle(pilot, lambda: getattr(pilot.app.screen, "result", None))
    assert snap_compare(app_on(demo[0], "compare"), terminal_size=(80, 24), run_before=run_before)


# ---- issue 35 at 80x24: the Archive screen's hint during a run, the Protocol screen's lock warnings ----
# The hint names the interpreter the lab runs under and the campaign folder: both are this
# machine's paths, fixed here like the clock (the interpreter as a bundle's venv would be, the
# runs folder as a rental's), so the frame holds no temporary path.

BUNDLE_PYTHON = "/srv/rentals/iteragpu-lab/.venv/bin/python"
RUNS_SHOWN = "/srv/rentals/iteragpu-lab/runs"


def test_snapshot_archive_hint_during_a_run_runs_as_printed(snap_compare, demo, monkeypatch):
    """a while the orchestrator runs: the refusal's hint names the bundle's interpreter (its venv
    path, not the base interpreter it links to: no msgspec there) and the campaign folder."""
    import shlex
    import shutil
    import sys

    import tui.screens.archive_screen as archive_screen
    from lab.service.campaigns import ONE_LINE_ERRORS

    f, root = demo
    synthetic_running_journal(f, root)  # its orchestrator pid is 1: always alive, "still running"
    monkeypatch.setenv("SSH_CONNECTION", "203.0.113.9 51000 198.51.100.7 2222")  # the scp fields
    monkeypatch.setenv("USER", "alice")
    monkeypatch.setattr(shutil, "which", lambda name: None)  # no iteralab on PATH: run as python -m lab.cli
    monkeypatch.setattr(sys, "argv", [f"{BUNDLE_PYTHON.rsplit('/.venv', 1)[0]}/lab/cli.py"])
    monkeypatch.setattr(sys, "executable", BUNDLE_PYTHON)
    assemble = archive_screen.assemble_archive

    def assemble_shown(campaign_dir, partial=False):
        try:
            return assemble(campaign_dir, partial)
        except ONE_LINE_ERRORS as exc:  # the same refusal, its runs folder as a rental's
            raise type(exc)(str(exc).replace(str(root.resolve()), RUNS_SHOWN)) from None
    monkeypatch.setattr(archive_screen, "assemble_archive", assemble_shown)

    async def run_before(pilot) -> None:
        await settle(pilot, lambda: pilot.app.campaign_dir is not None)
        await pilot.press("a")
        await settle(pilot, lambda: "archive failed" in str(pilot.app.screen.query_one("#archive-info").render()))
        shown = " ".join(str(pilot.app.screen.query_one("#archive-info").render()).split())
        hint = shown.split("`")[1]
        folder = f"{RUNS_SHOWN}/{pilot.app.campaign_dir.parent.name}/{pilot.app.campaign_dir.name}"
        assert shlex.split(hint) == [BUNDLE_PYTHON, "-m", "lab.cli", "campaign", "status", folder], hint
        assert "still running (orchestrator pid 1)" in shown and "Press p for an archive labelled partial" in shown
        pilot.app.clear_notifications()  # the journal's out-of-memory toast times out: not part of the frame
        await settle(pilot)
    assert snap_compare(app_on(f, "archive"), terminal_size=(80, 24), run_before=run_before)


class FixedNow(datetime):
    """datetime whose now() is the app's fixed clock (CLOCK): the time a lock records."""

    @classmethod
    def now(cls, tz=None):
        return datetime.fromtimestamp(CLOCK, tz)


def test_snapshot_protocol_lock_shows_the_clis_warnings(snap_compare, demo, monkeypatch):
    """l on a file with an unusual value that locks (31 repetitions): the screen shows the version
    locked and the warning `protocol lock` prints (lab.orchestration.protocol.lock_warnings)."""
    import lab.orchestration.protocol
    from lab.orchestration.protocol import load_protocol, lock_warnings

    f, _ = demo
    f.write_text(f.read_text().replace("repetitions = 5", "repetitions = 31"))
    [warning] = lock_warnings(load_protocol(f))
    monkeypatch.setattr(lab.orchestration.protocol, "datetime", FixedNow)  # "Locked version 1 at" the clock

    async def run_before(pilot) -> None:
        await settle(pilot, lambda: getattr(pilot.app.screen, "info", None))
        await pilot.press("l")
        await settle(pilot, lambda: "locked as version 1" in str(pilot.app.screen.query_one("#lock-result").render()))
        shown = " ".join(str(pilot.app.screen.query_one("#lock-result").render()).split())
        assert f"warning: {' '.join(warning.split())}" in shown, shown
        pilot.app.screen.query_one("#lock-result").scroll_visible(animate=False)
        await settle(pilot)
    assert snap_compare(app_on(f, "protocol"), terminal_size=(80, 24), run_before=run_before)
