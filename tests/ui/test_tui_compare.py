# ruff: noqa: F811 - the runs fixture is imported from test_tui_screens
"""Screen 8 (Compare) at 80x24 on real archives, and the UI cases of the issue: Esc then a key
arriving as one sequence never types into a field (Pilot, and the real app in tmux with
TERM=screen), no stray glyphs at the right edge, Plan on a CPU host."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import WINDOW, another_metric_file, settle, wait_until
from test_tui_campaigns import demo_copy
from test_tui_screens import make_app, runs, text_of  # noqa: F401 - runs is a fixture

from lab.compare import compare_archives

REPO = Path(__file__).resolve().parents[2]


def test_compare_screen_lists_archives_and_builds_the_cli_decision(tmp_path, runs, rental_archives):
    from textual.widgets import Input

    from tui.widgets.archive_picker import ArchivePicker
    from tui.widgets.tick import Tick

    for key in ("rtx", "b200"):
        (runs / "rentals").mkdir(parents=True, exist_ok=True)
        shutil.copy(rental_archives[key], runs / "rentals" / rental_archives[key].name)
    (runs / "rentals" / "not-an-archive.txt").write_text("x")

    async def go():
        app = make_app(demo_copy(tmp_path), start_screen="compare")
        async with app.run_test(size=(80, 24)) as pilot:
            sl = app.screen.query_one("#compare-archives", ArchivePicker)
            await settle(pilot, lambda: sl.option_count == 2, "the archives under runs/")
            await pilot.press("space", "down", "space")
            assert len(sl.selected) == 2
            app.screen.query_one("#c-load", Input).value = "50000"
            app.screen.query_one("#c-deadline", Input).value = "2026-12-05T09:00+01:00"
            app.screen.query_one("#c-window_start", Input).value = "2026-12-01T09:00+01:00"
            app.screen.query_one("#c-allow_short", Tick).value = True  # sub-second test passes
            await pilot.press("c")
            await settle(pilot, lambda: getattr(app.screen, "result", None), "the comparison")
            text = str(app.screen.query_one("#compare-result").render())
            return app.screen.result, text, list(sl.selected)
    result, text, selected = asyncio.run(go())
    same = compare_archives(selected, 50000, window_start="2026-12-01T09:00+01:00",
                            deadline="2026-12-05T09:00+01:00", allow_short=True)
    assert result.path == tuple(same.path)  # the same engine function as the CLI
    assert "Decision path" in text and "committed budget" in text
    assert "PASSES TOO SHORT projected anyway (--allow-short)" in text.splitlines()[0]  # the banner first
    assert "same ML result" in text and "priced with catalog version 2026-09-24" in text
    for p in result.files.values():
        assert Path(p).is_file() and Path(p).parent.parent == runs / "compare"


def test_compare_screen_shows_a_refusal_in_one_line(tmp_path, runs, rental_archives):
    from textual.widgets import Input

    async def go():
        app = make_app(demo_copy(tmp_path), start_screen="compare")
        async with app.run_test(size=(80, 24)) as pilot:
            for key in ("rtx", "other"):
                field = app.screen.query_one("#c-add", Input)
                field.focus()
                field.value = str(rental_archives[key])
                await pilot.press("enter")
            load = app.screen.query_one("#c-load", Input)
            load.focus()
            load.value = "1000"
            await pilot.press("enter")
            await settle(pilot, lambda: "corpus sha256 differs" in
                         str(app.screen.query_one("#compare-result").render()), "the refusal")
    asyncio.run(go())


def compare_on_screen(tmp_path, archives, metric_files) -> list[tuple[str, str, dict | None]]:
    """The Compare screen at 80x24 with ``archives`` added by path, load and window typed; for
    each entry of ``metric_files`` (a path, or "" for the empty field): that text typed in the
    metric file field and c pressed. Returns per compare (the result area's text, the status
    line, the result or None)."""
    from textual.widgets import Input

    from tui.widgets.tick import Tick

    async def go():
        app = make_app(demo_copy(tmp_path), start_screen="compare")
        seen = []
        async with app.run_test(size=(80, 24)) as pilot:
            for archive in archives:
                field = app.screen.query_one("#c-add", Input)
                field.focus()
                field.value = str(archive)
                await pilot.press("enter")
            for key, value in (("load", "1000"), ("deadline", WINDOW["deadline"]),
                               ("window_start", WINDOW["window_start"])):
                app.screen.query_one(f"#c-{key}", Input).value = value
            app.screen.query_one("#c-allow_short", Tick).value = True  # sub-second test passes
            for metric_file in metric_files:
                field = app.screen.query_one("#c-metric_file", Input)
                field.focus()
                field.value = str(metric_file)
                app.screen.result = None
                await pilot.press("enter")  # Enter in a field compares
                await settle(pilot, lambda: "comparing" not in text_of(app, "#compare-result"), "the comparison")
                seen.append((text_of(app, "#compare-result"), text_of(app, "#compare-status"), app.screen.result))
        return seen
    return asyncio.run(go())


def test_compare_screen_metric_file_field_opts_in_to_the_users_metric(tmp_path, runs, metric_rentals):
    """Archives judged by the user's own metric: the field empty, the service's one line saying
    how to opt in is the screen's error; the right file typed in the field, the same
    comparison as ``compare_archives(..., metric_file=...)``, written under runs/compare/."""
    from lab.compare import CompareError

    pair = [metric_rentals["rtx"], metric_rentals["b200"]]
    (without, status, none), (with_file, _, result) = compare_on_screen(tmp_path, pair, ["", metric_rentals["file"]])
    with pytest.raises(CompareError) as refused:
        compare_archives(pair, 1000, **WINDOW)
    assert none is None and without == str(refused.value)  # the service's own line, nothing else
    assert "\n" not in without and "your own function" in without and "--metric-file FILE" in without
    assert status.startswith("not compared")
    same = compare_archives(pair, 1000, metric_file=metric_rentals["file"], **WINDOW)
    assert result is not None and result.path == tuple(same.path) and same.chosen is not None
    assert "Decision path" in with_file and "mymetric.py:share_right" in with_file
    for p in result.files.values():
        assert Path(p).is_file() and Path(p).parent.parent == runs / "compare"


def test_compare_screen_refuses_another_metric_file_in_one_line(tmp_path, runs, metric_rentals):
    """A metric file whose sha256 is not the archives' lock's: refused in the service's one line
    naming the archives, before the file runs; nothing written under runs/compare/."""
    from lab.compare import CompareError

    other = another_metric_file(tmp_path)
    pair = [metric_rentals["rtx"], metric_rentals["b200"]]
    [(text, status, result)] = compare_on_screen(tmp_path / "app", pair, [other])
    with pytest.raises(CompareError) as refused:
        compare_archives(pair, 1000, metric_file=other, **WINDOW)
    assert result is None and text == str(refused.value) and "\n" not in text
    # both archives refuse the same file: named together in the one line (lab.compare.evidence)
    assert text.startswith(f"{metric_rentals['rtx'].name}: --metric-file {other}: sha256 "), text
    assert text.endswith(f"; the same for {metric_rentals['b200'].name}"), text
    assert "is not the locked metric file's" in text and status.startswith("not compared")
    assert not (tmp_path / "ran").exists() and not (runs / "compare").exists()


def test_compare_screen_on_arrival_space_selects_and_marks_read_as_text(tmp_path, runs, rental_archives):
    """Reached with 8 from another screen: space selects at once (no Tab first); the rows read
    [x] and [ ]; an archive's whole name is shown, however long."""
    from tui.widgets.archive_picker import ArchivePicker

    (runs / "rentals").mkdir(parents=True, exist_ok=True)
    long_name = rental_archives["rtx"].name.replace(".tar.gz", "-a-long-name-given-by-hand-on-download.tar.gz")
    shutil.copy(rental_archives["rtx"], runs / "rentals" / long_name)
    shutil.copy(rental_archives["b200"], runs / "rentals" / rental_archives["b200"].name)

    async def go():
        app = make_app(demo_copy(tmp_path), start_screen="runs")
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            await pilot.press("8")
            sl = app.screen.query_one(ArchivePicker)
            await settle(pilot, lambda: sl.option_count == 2, "the archives under runs/")
            await pilot.press("space")
            await settle(pilot)
            rows = [sl.render_line(y).text for y in range(4)]
            labels = [str(sl.get_option_at_index(i).prompt) for i in range(sl.option_count)]
            return list(sl.selected), rows, labels, text_of(app, "#compare-head")
    selected, rows, labels, head = asyncio.run(go())
    assert len(selected) == 1
    assert rows[0].startswith("[x] ") and any(r.startswith("[ ] ") for r in rows[1:]), rows
    assert f"rentals/{long_name}" in labels  # never cut: wrapped onto the next line
    assert long_name in "".join(r[4:].rstrip() for r in rows), rows
    assert "1 selected" in head


def test_compare_result_is_read_first_with_a_status_line(tmp_path, runs, rental_archives):
    """c: the banner, the decision and where the files are at the top of the view, and the
    status line above says so; the host letters do not depend on the order of selection."""
    from textual.widgets import Input

    from tui.widgets.archive_picker import ArchivePicker
    from tui.widgets.tick import Tick

    (runs / "rentals").mkdir(parents=True, exist_ok=True)
    for key in ("rtx", "b200"):
        shutil.copy(rental_archives[key], runs / "rentals" / rental_archives[key].name)

    async def go(order):
        app = make_app(demo_copy(tmp_path / "-".join(order)), start_screen="compare")
        async with app.run_test(size=(80, 24)) as pilot:
            sl = app.screen.query_one(ArchivePicker)
            await settle(pilot, lambda: sl.option_count == 2, "the archives under runs/")
            index = {Path(str(sl.get_option_at_index(i).value)).name: i for i in range(2)}
            for key in order:
                sl.toggle(sl.get_option_at_index(index[rental_archives[key].name]))
            app.screen.query_one("#c-load", Input).value = "50000"
            app.screen.query_one("#c-deadline", Input).value = "2026-12-05T09:00+01:00"
            app.screen.query_one("#c-window_start", Input).value = "2026-12-01T09:00+01:00"
            app.screen.query_one("#c-allow_short", Tick).value = True  # sub-second test passes
            await pilot.press("c")
            await settle(pilot, lambda: getattr(app.screen, "result", None), "the comparison")
            result = app.screen.query_one("#compare-result")
            scroll = app.screen.query_one("#compare-scroll")
            text = str(result.render())
            seen = (scroll.scroll_offset.y == 0 and result.region.y < 6 and app.focused is scroll)
            return app.screen.result, text, text_of(app, "#compare-status"), seen
    result, text, status, seen = asyncio.run(go(("rtx", "b200")))
    lines = text.splitlines()
    assert lines[0].startswith("PASSES TOO SHORT projected anyway (--allow-short)")  # the first line
    assert lines[1].startswith("Decision: host A rtx-4090") and "Written to " in text
    assert text.index("Written to ") < text.index("Decision path")
    assert seen and "at the top" in status
    again, _, _, _ = asyncio.run(go(("b200", "rtx")))  # selected the other way round
    assert again.path[1:3] == result.path[1:3]  # same hosts, same letters: A is the older archive


@pytest.mark.parametrize("sequence", [("pilcrow", "¶", "7", "archive"),  # ESC 7 (Textual's table)
                                      ("alt+8", "8", "8", "compare"),
                                      ("section_sign", "§", "6", "cost")])
def test_esc_then_a_digit_leaves_the_field_without_typing(tmp_path, runs, sequence):
    from textual import events
    from textual.widgets import Input

    key, char, _digit, target = sequence

    async def go():
        app = make_app(demo_copy(tmp_path), start_screen="compare" if target == "cost" else "cost")
        async with app.run_test(size=(80, 24)) as pilot:
            field = app.screen.query_one(Input)
            field.focus()
            field.value = "7"
            await pilot.pause()
            before = app.screen
            app.post_message(events.Key(key, char))
            await settle(pilot, lambda: app.screen is not before, f"screen {target}")
            assert app.screen is app.get_screen(target)
            assert field.value == "7" and char not in field.value
    asyncio.run(go())


def test_esc_then_a_letter_in_a_field_is_the_key_not_text(tmp_path, runs):
    from textual import events
    from textual.widgets import Input

    async def go():
        app = make_app(demo_copy(tmp_path), start_screen="cost")
        async with app.run_test(size=(80, 24)) as pilot:
            field = app.screen.query_one("#f-gpu", Input)
            field.focus()
            await pilot.pause()
            app.post_message(events.Key("alt+c", "c"))  # Esc then c: leave the field, recompute
            await settle(pilot)  # the key handled and the recompute it started ended
            assert "c" not in field.value and app.focused is not field
    asyncio.run(go())


def tmux_app(session: str, runs: Path, cols: int = 80, rows: int = 24) -> None:
    env = (f"cd {REPO} && PYTHONPATH={REPO} ITERALAB_RUNS={runs} TERM=screen "
           f"exec {sys.executable} -m lab.cli up --launcher local")
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", str(cols), "-y", str(rows),
                    env], check=True)


def capture(session: str, escapes: bool = False) -> str:
    """The pane's text (with ``escapes``: its colours too, where the focus shows)."""
    return subprocess.run(["tmux", "capture-pane", "-t", session, "-p", *(["-e"] if escapes else [])],
                          capture_output=True, text=True, check=True).stdout


def wait_text(session: str, text: str, timeout_s: float = 60) -> str:
    """The pane's text once it shows ``text`` (the real app runs in another process)."""
    def shown() -> str | None:
        out = capture(session)
        return out if text in out else None
    return wait_until(shown, timeout_s, f"{text!r} in the terminal", detail=lambda: capture(session))


# a text each screen shows once its worker has filled it (the right edge is checked on that)
FILLED = {"1": "Backend", "2": "repetitions, rotated", "3": "passes", "4": "not started",
          "5": "No campaign run yet", "6": "Cost per validated corpus", "7": "Press a to assemble",
          "8": "Archives under runs/ and added"}


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed (apt-get install tmux)")
def test_real_app_in_tmux_esc_digit_and_right_edge(tmp_path):
    """The real UI in tmux 80x24 with TERM=screen: Esc then 7 typed quickly in a Cost field
    reaches Archive and types nothing; no screen ends a line with a one-cell glyph."""
    session = f"iteralab-test-{os.getpid()}"
    tmux_app(session, tmp_path / "runs")
    try:
        wait_text(session, "1 Env")
        subprocess.run(["tmux", "send-keys", "-t", session, "6"], check=True)
        wait_text(session, FILLED["6"])  # the quote computed: what changes next is the focus
        before = capture(session, escapes=True)
        subprocess.run(["tmux", "send-keys", "-t", session, "Tab"], check=True)
        wait_until(lambda: capture(session, escapes=True) != before, 60, "the focus to enter a field")
        subprocess.run(["tmux", "send-keys", "-t", session, "Escape", "7"], check=True)
        wait_text(session, "Press a to assemble")
        subprocess.run(["tmux", "send-keys", "-t", session, "6"], check=True)
        out = wait_text(session, "catalog CSV")
        assert "¶" not in out and "catalog CSV        shipped catalog" in out  # placeholder: empty
        glyphs = set("▁▂▃▄▅▆▇█▏▎▍▌▋▊▉")
        for key in "12345678":
            subprocess.run(["tmux", "send-keys", "-t", session, key], check=True)
            for n, line in enumerate(wait_text(session, FILLED[key]).splitlines()):
                assert not (len(line) >= 79 and line.rstrip()[-1:] in glyphs), (key, n, line)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
