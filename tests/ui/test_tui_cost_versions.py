"""The Cost screen follows the protocol version the app shows (issue 35 item 2): version 1 with no
accepted corpus, then version 2 run with one accepted, in one UI session; the screen must price
version 2's accepted corpus, not the 0 version 1 left in its field. Pilot at 80x24, and the
screen after the switch as a snapshot at 80x24 (its fields and quote: catalog figures only, no
path, time or measured figure in view)."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest
from conftest import settle
from test_tui_campaigns import finished_campaign
from test_tui_screens import make_app

from lab.report.build import build_report
from lab.service.campaigns import campaign_dir_of


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A real finished campaign file; its runs folder is copied per test."""
    return finished_campaign(tmp_path_factory.mktemp("finished"))


@pytest.fixture()
def versions(finished, tmp_path, monkeypatch):
    """(campaign file, version 1's folder: the same passes, none accepted, version 2's folder)."""
    shutil.copytree(finished.parent / "runs", tmp_path / "runs")
    monkeypatch.setenv("ITERALAB_RUNS", str(tmp_path / "runs"))
    v2 = campaign_dir_of(finished)
    assert v2 is not None
    build_report(v2)
    v1 = v2.parent / "v1-nothing-accepted"  # the earlier version: the same passes, none accepted
    shutil.copytree(v2, v1)
    summary = v1 / "report" / "summary.json"
    summary.write_text(json.dumps([{**v, "accepted_passes": 0} for v in json.loads(summary.read_text())]))
    return finished, v1, v2


async def version_1_then_2(pilot, v1, v2) -> None:
    """On the Cost screen of version 1 (0 accepted), go to Runs, attach version 2 (run, 1
    accepted) as a new lock and run do, come back: the screen must price version 2."""
    app = pilot.app
    await settle(pilot, lambda: getattr(app.screen, "cost", None), "version 1's quote")
    assert app.screen.cost.validated == 0 and app.screen.cost.accepted == 0
    await pilot.press("4")  # the Runs screen, where version 2 starts
    app.attach(v2)
    app.screen.app.get_screen("cost").cost = None
    await pilot.press("6")
    await settle(pilot, lambda: getattr(app.screen, "cost", None), "version 2's quote")


def test_cost_screen_follows_a_new_version_in_one_session(versions):
    f, v1, v2 = versions

    async def go():
        app = make_app(f, start_screen="cost")
        app.campaign_dir = v1
        async with app.run_test(size=(80, 24)) as pilot:
            await version_1_then_2(pilot, v1, v2)
            c = app.screen.cost
            assert (c.validated, c.accepted) == (1, 1), c
            assert "Cost per validated corpus: 110.00 USD" in c.quote_text
            assert "accepted corpora 0" not in str(app.screen.query_one("#cost-quote").render())
    asyncio.run(go())


def test_snapshot_cost_screen_after_a_new_version(snap_compare, versions):
    """The screen at 80x24 once version 2 is attached: 1 validated, 110.00 USD per validated corpus."""
    f, v1, v2 = versions
    app = make_app(f, start_screen="cost")
    app.campaign_dir = v1

    async def run_before(pilot) -> None:
        await version_1_then_2(pilot, v1, v2)
        shown = str(pilot.app.screen.query_one("#cost-quote").render())
        assert "Validated corpora 1 (accepted used: 1" in shown and "Cost per validated corpus: 110.00 USD" in shown
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)
