"""Snapshot tests (pytest-textual-snapshot) of screens 1-4 at 80x24, made deterministic:
fixed clock, fixed telemetry and environment facts, the demo campaign (content-derived
ids and hashes; the model files' fingerprint in the protocol identity fixed), and a journal
written with fixed times. `pytest --snapshot-update` accepts a new rendering after review."""

from __future__ import annotations

import pytest
from conftest import settle
from test_tui_campaigns import CLOCK, FACTS, SAMPLE, demo_copy, synthetic_running_journal

from tui.app import IteraLabApp
from tui.widgets.pass_table import PassTable
from tui.widgets.telemetry import fixed_telemetry


@pytest.fixture()
def demo(tmp_path, monkeypatch):
    import lab.identity

    # the results folder's name carries the protocol identity, which covers the model files'
    # sha256: the demo head is rebuilt per machine, so it is fixed here like the clock
    monkeypatch.setattr(lab.identity, "model_fingerprint", lambda ref, revision=None: "0" * 64)
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
