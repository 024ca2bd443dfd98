"""report.html opened in a real headless browser (Debian's chromium, DevTools protocol):
screenshot taken, no console error, no request leaving the file; for a campaign (the file
inside its evidence archive) and for a comparison of two rentals."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from lab.compare import compare_archives
from lab.compare.tables import write_comparison
from lab.evidence.archive import extract

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("browser_check", REPO / "scripts" / "browser_check.py")
browser_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(browser_check)

needs_chromium = pytest.mark.skipif(browser_check.find_chromium() is None,
                                    reason="chromium not installed (apt-get install -y chromium; "
                                           "scripts/ci_browser.sh does it in CI)")


def assert_clean(res: dict, shot: Path, images: int) -> None:
    assert res["requests"] == [], res["requests"]
    assert res["console_errors"] == [], res["console_errors"]
    assert res["images"] >= images and res["images_loaded"] == res["images"]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


@needs_chromium
def test_the_check_catches_an_outside_request_and_a_console_error(tmp_path):
    page = tmp_path / "bad.html"
    page.write_text('<html><body><img src="http://example.invalid/x.png">'
                    '<script>console.error("boom")</script></body></html>')
    res = browser_check.check_html(page)
    assert res["requests"] == ["http://example.invalid/x.png"]
    assert "boom" in res["console_errors"]


@needs_chromium
def test_campaign_report_html_in_its_archive_opens_clean(rental_archives, tmp_path):
    top = extract(rental_archives["rtx"], tmp_path / "x")
    page = top / "report" / "report.html"
    text = page.read_text()
    assert text.index("Chosen:") < text.index("Durations per variant") < text.index("Decision note")
    assert "Raw table" in text
    # one Configurations heading, with the configurations under it (no empty one before it)
    assert text.count("<h2>Configurations</h2>") == 1 and "<h1>Decision note" not in text
    assert "<h3>" in text.split("<h2>Configurations</h2>", 1)[1].split("<h2>", 1)[0]
    shot = tmp_path / "campaign.png"
    res = browser_check.check_html(page, shot)
    assert_clean(res, shot, images=2)
    assert res["title"].startswith("Campaign rental")
    assert 0 < res["tallest_row_px"] < 40, res["tallest_row_px"]  # one text line per raw-table row


@needs_chromium
def test_comparison_report_html_opens_clean(rental_archives, tmp_path):
    c = compare_archives([rental_archives["rtx"], rental_archives["b200"]], 50000,
                         window_start="2026-12-01T09:00+01:00", deadline="2026-12-05T09:00+01:00")
    paths = write_comparison(c, tmp_path / "cmp")
    html = paths["html"].read_text()
    assert html.index("Decision:") < html.index("Durations per host") < html.index("Raw table")
    shot = tmp_path / "compare.png"
    res = browser_check.check_html(paths["html"], shot)
    assert_clean(res, shot, images=4)
    assert res["title"] == "Comparison of rentals"
    assert 0 < res["tallest_row_px"] < 40, res["tallest_row_px"]
