"""Snapshot tests (pytest-textual-snapshot) of screens 1-4 at 80x24, made deterministic:
fixed clock, fixed telemetry and environment facts, the demo campaign (content-derived
ids and hashes), and a journal written with fixed times. `pytest --snapshot-update`
accepts a new rendering after review."""

from __future__ import annotations

import time

import pytest
from test_tui_campaigns import CLOCK, FACTS, SAMPLE, demo_copy, synthetic_running_journal

from tui.app import IteraLabApp
from tui.widgets.pass_table import PassTable
from tui.widgets.telemetry import fixed_telemetry


@pytest.fixture()
def demo(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    monkeypatch.setenv("ITERALAB_RUNS", str(root))
    return demo_copy(tmp_path / "campaign"), root


def app_on(f, screen: str) -> IteraLabApp:
    return IteraLabApp(f, telemetry=fixed_telemetry(SAMPLE), environment_probe=lambda: FACTS,
                       clock=lambda: CLOCK, poll_interval_s=0.1, telemetry_interval_s=3600,
                       start_screen=screen)


def until(cond, timeout_s: float = 120):
    async def run_before(pilot) -> None:
        t0 = time.monotonic()
        while not cond(pilot.app) and time.monotonic() - t0 < timeout_s:
            await pilot.pause(0.1)
        assert cond(pilot.app), "screen never filled"
        # then wait until the rendering is stable (column widths settle after the rows arrive,
        # later on a loaded machine): two exports 0.3 s apart must be equal
        last = None
        for _ in range(40):
            await pilot.pause(0.3)
            now = pilot.app.export_screenshot()
            if now == last:
                break
            last = now
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
        lambda app: app.screen.query_one(PassTable).row_count == 15 and app.failures_seen
        and app.telemetry is not None))
