# ruff: noqa: F811 - the runs fixture is imported from test_tui_screens
"""Issue 22: the next rental replays an archive from the Archive screen (the UI's key to
`iteralab campaign replay`): a real archive made in this test session becomes the bundle's
campaign.toml, locked, its protocol the archive's; a second replay never overwrites it."""

from __future__ import annotations

import asyncio
import tomllib

from conftest import settle
from test_tui_campaigns import demo_copy
from test_tui_screens import make_app, runs, text_of  # noqa: F401 - runs is a fixture

from lab.evidence.archive import extract


def test_the_archive_screen_replays_an_archive_into_campaign_toml(tmp_path, runs, rental_archives, monkeypatch):
    from textual.widgets import Input

    bundle = tmp_path / "new-rental"
    bundle.mkdir()
    monkeypatch.chdir(bundle)  # `make up` runs in the bundle's root: campaign.toml lands there
    archive = rental_archives["rtx"]

    async def go(expect: str):
        app = make_app(demo_copy(tmp_path), start_screen="archive")
        async with app.run_test(size=(80, 24)) as pilot:
            field = app.screen.query_one("#replay-archive", Input)
            field.focus()
            field.value = str(archive)
            await pilot.press("enter")
            await settle(pilot, lambda: expect in text_of(app, "#replay-result"), "the replay")
            return text_of(app, "#replay-result")

    text = asyncio.run(go("replayed"))
    written = bundle / "campaign.toml"
    assert "wrote and locked" in text and written.is_file() and written.with_suffix(".lock.json").is_file()
    original = tomllib.loads((extract(archive, tmp_path / "x") / "campaign.toml").read_text())
    replayed = tomllib.loads(written.read_text())
    for section in ("quality", "timing", "series"):  # the same question
        assert replayed[section] == original[section], section
    again = asyncio.run(go("exists"))  # never overwrites the campaign file it wrote
    assert "campaign.toml exists" in again and "\n" not in again.strip()
