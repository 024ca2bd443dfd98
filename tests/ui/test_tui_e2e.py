"""The user's story end to end, through the UI, on a small real campaign.

Start from the Runs screen (the orchestrator is spawned detached), quit the UI while the
first pass runs: the orchestrator stays alive. A second UI re-attaches to the journal,
sees the batch-1 pass complete and the batch-8 pass become a real host-memory OOM row
(RLIMIT_AS, calibrated on this machine) with its items completed, shows the results, and
assembles and verifies the evidence archive with its scp line. The app polls the journal
as in use; the test wakes on each message the app handles (conftest.AppMessages), with a
deadline for the orchestrator's passes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from conftest import AppMessages, run_scp_lines
from test_tui_campaigns import MODEL, calibrated_limit, tiny_campaign

from lab.orchestration.status import campaign_status, orchestrator_alive
from lab.service.environment_facts import EnvironmentFacts
from tui.app import IteraLabApp
from tui.widgets.pass_table import PassTable
from tui.widgets.telemetry import HostSample, fixed_telemetry

SAMPLE = HostSample(cpu_percent=50.0, ram_used_bytes=2 * 2**30, ram_total_bytes=8 * 2**30,
                    gpu_note="no NVML (test)")
FACTS = EnvironmentFacts(backend="cpu", ram_total_bytes=8 * 2**30, ram_available_bytes=6 * 2**30,
                         disk_free_bytes=40 * 2**30, disk_path="/runs", cpu_cores=2)


def make_app(campaign_file: Path, limit: int) -> IteraLabApp:
    return IteraLabApp(campaign_file, launcher="local", memory_limit=limit,
                       telemetry=fixed_telemetry(SAMPLE), environment_probe=lambda: FACTS,
                       poll_interval_s=0.2)


def statuses(app) -> dict:
    s = app.snapshot
    return {a.pass_id: a.status for a in s.status.attempts} if s and s.status else {}


@pytest.fixture()
def runs(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    monkeypatch.setenv("ITERALAB_RUNS", str(root))
    return root


@pytest.mark.slow
def test_start_quit_reattach_live_failure_results_and_archive(tmp_path, runs, one_malloc_arena):
    if not (MODEL / "config.json").is_file():
        pytest.fail(f"demo model missing at {MODEL}; run `make model`")
    limit = calibrated_limit(tmp_path / "calibration")
    campaign_file = tiny_campaign(tmp_path / "campaign")

    async def first_ui():
        app, watch = make_app(campaign_file, limit), AppMessages()
        async with app.run_test(size=(80, 24), message_hook=watch.hook) as pilot:
            await pilot.press("s")
            await watch.until(pilot, lambda: "running" in statuses(app).values(), 60, "the first pass to run")
            d = app.campaign_dir
            await pilot.press("q")
        return d

    campaign_dir = asyncio.run(first_ui())
    st = campaign_status(campaign_dir)
    assert st["state"] == "running" and st["alive"], st["state"]
    running = dict(st["orchestrator"])  # pid and process start time, as the journal recorded them
    assert orchestrator_alive(running)  # quitting the UI did not stop the campaign

    async def second_ui():
        app, watch = make_app(campaign_file, limit), AppMessages()
        async with app.run_test(size=(80, 24), message_hook=watch.hook) as pilot:
            assert app.campaign_dir == campaign_dir  # re-attached from the journal on start
            await watch.until(pilot, lambda: app.snapshot and app.snapshot.status, 10, "the journal snapshot")
            assert app.snapshot.status.orchestrator.pid == running["pid"]
            await watch.until(pilot, lambda: "ok" in statuses(app).values(), 120, "a pass to complete")
            await watch.until(pilot, lambda: app.failures_seen, 120, "the batch-8 failure",
                                  lambda: f"limit {limit} bytes, passes {statuses(app)}")
            fail = app.failures_seen[0]
            assert fail.kind == "oom" and fail.items_done == 8 and "-r1-" in fail.pass_id
            table = app.screen.query_one(PassTable)
            await watch.until(pilot, lambda: str(table.get_cell(fail.pass_id, "status")).startswith("OOM @8"),
                              10, "the OOM row highlighted")
            assert "8/16" in str(table.get_cell(fail.pass_id, "progress"))
            await watch.until(pilot, lambda: app.snapshot.status.state == "finished", 60, "the campaign end")
            ok_row = next(p for p, s in statuses(app).items() if s == "ok")
            assert str(table.get_cell(ok_row, "progress")).endswith("16/16")

            await pilot.press("5")
            results = app.screen
            await watch.until(pilot, lambda: getattr(results, "summary", None), 120, "the results")
            by_batch = {v.batch_size: v for v in results.summary}
            assert len(by_batch[1].durations_s) == 1 and by_batch[1].durations_s[0] > 0
            assert by_batch[1].successes == 1 and by_batch[1].accepted_passes == 1
            assert by_batch[8].failures == 1 and by_batch[8].failure_kinds == ("oom",)
            assert by_batch[8].feasible is False

            await pilot.press("7")
            archive = app.screen
            await pilot.press("a")
            await watch.until(pilot, lambda: getattr(archive, "archive", None), 120, "the archive")
            a = archive.archive
            assert a.verification.ok and a.verification.rows_checked == 2 and a.verification.files_checked > 5
            assert Path(a.path).stat().st_size == a.size_bytes
            args = run_scp_lines(str(archive.query_one("#scp-line").render()))
            assert args[-2].endswith(f":{a.path}") and args[-1] == "."
    asyncio.run(second_ui())
    assert not orchestrator_alive(running)  # that orchestrator finished and exited
