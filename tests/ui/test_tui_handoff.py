# ruff: noqa: F811 - the runs fixture is imported from test_tui_screens
"""Hand-off points of issue 22 part 3, on the real app: quitting while the environment probe
runs ends the process at once; locking says it is busy and replaces a stale error, and a
refusal says what to do in the UI's terms (the Archive and Compare screens: test_tui_screens.py,
test_tui_compare.py, test_tui_snapshots.py)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time

from conftest import REPO, settle
from test_tui_campaigns import demo_copy
from test_tui_screens import make_app, runs, text_of  # noqa: F401 - runs is a fixture


def test_quitting_while_the_environment_probe_runs_ends_the_process_at_once(tmp_path):
    """A probe that takes a minute (an engine that never answers): q at 0.3 s, and the
    process returns within seconds, not when the probe would have ended."""
    f = demo_copy(tmp_path / "campaign")
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from tui.app import IteraLabApp
        from tui.widgets.telemetry import HostSample, fixed_telemetry

        def probe():  # never answers within the test
            time.sleep(60)
            return {{}}

        async def quit_soon(pilot):
            await pilot.pause(0.3)
            await pilot.press("q")

        app = IteraLabApp(Path({str(f)!r}), environment_probe=probe, start_screen="environment",
                          telemetry=fixed_telemetry(HostSample(5.0, 2**30, 2**33, gpu_note="test")),
                          poll_interval_s=None, telemetry_interval_s=None)
        app.run(headless=True, size=(80, 24), auto_pilot=quit_soon)
        print("ui closed", flush=True)
    """)
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ITERALAB_RUNS": str(tmp_path / "runs")})
    took = time.monotonic() - start
    assert out.returncode == 0 and "ui closed" in out.stdout, out.stderr[-2000:]
    assert took < 20, f"the process returned {took:.1f} s after start (the probe takes 60 s)"


def test_lock_shows_it_is_busy_in_place_of_a_stale_error(tmp_path, runs, monkeypatch):
    """l: 'locking ...' at once (the earlier failure gone) while the real lock runs."""
    import tui.screens.protocol_screen as screen_module

    f = demo_copy(tmp_path)
    real_lock, release = screen_module.lock_protocol, threading.Event()

    def held_lock(path):  # the real lock, held until the test has seen the busy text
        release.wait(60)
        return real_lock(path)

    async def go():
        app = make_app(f, start_screen="protocol")
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot, lambda: "Not locked" in text_of(app, "#protocol-rules"))
            out = app.screen.query_one("#lock-result")
            out.display = True
            out.update("[red]lock failed: an earlier refusal[/red]")
            monkeypatch.setattr(screen_module, "lock_protocol", held_lock)
            await pilot.press("l")
            await pilot.pause()
            busy = text_of(app, "#lock-result")
            release.set()
            await settle(pilot, lambda: "locked as version 1" in text_of(app, "#lock-result"), "the lock")
            return busy
    busy = asyncio.run(go())
    assert busy.startswith("locking ...") and "earlier refusal" not in busy


def test_a_lock_refusal_says_what_to_do_in_the_ui(tmp_path, runs):
    """An unknown GPU at lock: the fix names the campaign file's [cost] catalog and the key
    that locks again, never the command line's --catalog."""
    f = demo_copy(tmp_path)
    f.write_text(f.read_text().replace('gpu = "rtx-4090"', 'gpu = "h100"'))

    async def go():
        app = make_app(f, start_screen="protocol")
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            await pilot.press("l")
            await settle(pilot, lambda: "lock failed" in text_of(app, "#lock-result"), "the refusal")
            return text_of(app, "#lock-result")
    text = asyncio.run(go())
    assert "unknown GPU 'h100'" in text and 'set [cost] catalog = "FILE.csv" with a fuller catalog' in text
    assert "--catalog" not in text and "then press l to lock again" in text
