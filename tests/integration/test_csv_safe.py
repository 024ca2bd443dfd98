"""Every CSV the product writes opens safely: a series named like a spreadsheet formula is written
as text (real campaign: demo model, 4-item corpus, one real pass)."""

from __future__ import annotations

import csv

from conftest import cut_corpus, run_reported, write_campaign

FORMULA = '=HYPERLINK("http://evil.example","open me")'


def runs_as_formula(cell: str) -> bool:
    """What Excel/LibreOffice evaluate: text starting with = + - @ tab or CR (a number is a number)."""
    if not cell.startswith(("=", "+", "-", "@", "\t", "\r")):
        return False
    try:
        float(cell)
        return False
    except ValueError:
        return True


def test_formula_like_names_are_neutralised_in_raw_table_and_summary(model_dir, tmp_path):
    from lab.cli import make_archive
    from lab.evidence.archive import verify

    corpus = cut_corpus(tmp_path / "corpus.jsonl", 2, 1, 1)
    f = write_campaign(tmp_path, model_dir, corpus, name="formula", values=(1,))
    series = FORMULA.replace('"', "'")
    f.write_text(f.read_text().replace('name = "batch"', f'name = "{series}"')
                 .replace('reference_variant = "batch/', f'reference_variant = "{series}/'))
    orch = run_reported(f)
    for name in ("raw_table.csv", "summary.csv"):
        with open(orch.dir / "report" / name, newline="") as fh:
            rows = list(csv.reader(fh))
        cells = [c for r in rows for c in r]
        assert any(series in c for c in cells), name  # the name is there, as text
        bad = [c for c in cells if runs_as_formula(c)]
        assert not bad, f"{name}: formula cells {bad[:3]}"
        assert any(c.startswith("'" + series) for c in cells)
    assert verify(make_archive(orch.dir)).ok


def test_numbers_stay_numbers():
    from lab.report.csv_safe import neutralise_cell

    assert neutralise_cell("-0.25") == "-0.25" and neutralise_cell(-0.25) == -0.25
    assert neutralise_cell("@SUM(A1)") == "'@SUM(A1)" and neutralise_cell("+1+cmd") == "'+1+cmd"
