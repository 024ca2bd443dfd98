"""compare.html repeats decision.md's headings as written (issue 35, item 7: the Details section
read "Declared load load and calendar": its heading was rebuilt from a cut of the markdown)."""

from __future__ import annotations

import re


def test_every_heading_of_the_html_is_one_of_the_markdowns(two_rentals, tmp_path):
    from lab.compare import compare_to_folder

    stale = tmp_path / "cmp" / "serving.csv"  # an earlier server comparison's table in the same folder
    stale.parent.mkdir()
    stale.write_text("host,config\nA,old\n")
    _, paths = compare_to_folder(two_rentals, 1000, tmp_path / "cmp", allow_short=True)
    assert "serving_csv" not in paths and not stale.exists()  # offline archives: no serving table left behind
    md = paths["decision"].read_text()
    page = paths["html"].read_text()
    md_headings = {h.strip() for h in re.findall(r"^#+ (.+)$", md, flags=re.MULTILINE)}
    html_headings = {re.sub(r"<[^>]+>", "", h).strip() for h in re.findall(r"<h[1-6][^>]*>(.*?)</h[1-6]>", page)}
    assert "Declared load and calendar" in html_headings, html_headings
    assert not any("load load" in h for h in html_headings), html_headings
    from_md = {h for h in html_headings if h.startswith(("Declared", "What would change"))}
    assert from_md <= md_headings, from_md - md_headings
