"""Compare rentals on real archives made by the real product in this test session: the same
tiny campaign run with threads 1 (priced rtx-4090), threads 2 (priced b200) and threads 1
without [cost], and one on another corpus. CLI end to end, projection figures re-derived
from the raw tables, break-even checked by re-deciding at the load it names, corpus
mismatch refused, an archive without [cost] measured but never priced."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import tarfile
from decimal import Decimal
from pathlib import Path

import pytest

from lab.compare import CompareError, compare_archives
from lab.cost.forfaits import load_catalog, quote
from lab.evidence.archive import extract

REPO = Path(__file__).resolve().parents[2]
# the test passes last well under a second: below the projection rule, projected with --allow-short
WINDOW = ["--window-start", "2026-12-01T09:00+01:00", "--deadline", "2026-12-05T09:00+01:00",
          "--allow-short"]
SHORT = {"allow_short": True}


def cli(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "lab.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def manifest_of(archive: Path, tmp: Path) -> dict:
    top = extract(archive, tmp)
    return json.loads((top / "report" / "manifest.json").read_text())


def test_manifest_records_the_threads_of_each_rental(rental_archives, tmp_path):
    m1 = manifest_of(rental_archives["rtx"], tmp_path / "a")
    m2 = manifest_of(rental_archives["b200"], tmp_path / "b")
    assert m1["campaign"]["threads_requested"] == 1 and m1["pass_threads"] == [1]
    assert m2["campaign"]["threads_requested"] == 2 and m2["pass_threads"] == [2]
    assert m1["corpus"]["sha256"] == m2["corpus"]["sha256"]
    assert m1["model"]["files_sha256"] == m2["model"]["files_sha256"]
    assert m1["campaign"]["protocol_sha256"] != m2["campaign"]["protocol_sha256"]  # [cost] differs


def test_compare_cli_prints_the_path_and_writes_the_three_files(rental_archives, tmp_path):
    out = tmp_path / "cmp"
    r = cli("compare", rental_archives["rtx"], rental_archives["b200"], "--load", 50000,
            *WINDOW, "--out", out)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("1. PASSES TOO SHORT projected anyway (--allow-short)")
    lines = lines[1:]
    assert lines[0].startswith("2. verified ") and "threads 1" in lines[0] and "rtx-4090" in lines[0]
    assert "threads 2" in lines[1] and "b200" in lines[1]
    assert lines[2].startswith("4. comparable: corpus sha256")
    assert lines[3].startswith("5. priced with catalog version 2026-09-24")
    decision = next(line for line in lines if ". decision: " in line)
    for part in ("batch ", "7-day package x 1 lot(s)", "committed budget 110.00 USD",
                 "covers 50000 items", "A rtx-4090"):
        assert part in decision, (part, decision)
    md = (out / "decision.md").read_text()
    assert md.startswith("# Comparison of rentals: PASSES TOO SHORT projected anyway (--allow-short)")
    assert "\n\n**Decision: host A rtx-4090" in md
    assert "measured on CPU" in md and "lot has 2" in md  # b200 lot: 2 cards, 1 measured
    rows = list(csv.DictReader(open(out / "compare.csv")))
    assert len(rows) == 4 and {r["host"] for r in rows} == {"A rtx-4090", "B b200"}
    # one row is the decision's, named as such (issue 35 item 7), the one the decision line names
    [chosen] = [r for r in rows if r["chosen"] == "True"]
    assert all(r["chosen"] == "False" for r in rows if r is not chosen)
    assert chosen["host"] == "A rtx-4090" and chosen["variant_label"] in decision, (chosen, decision)
    # a classification generates no text: its token cells stay empty, the row says why
    assert all(r["output_tokens"] == r["output_tokens_at_load"] == r["cost_per_million_output_tokens"] == ""
               and r["tokens_note"] == "no output tokens: a classification task generates no text" for r in rows)
    assert "output tokens" not in md and "output tokens" not in r.stdout
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 4 and "http://" not in html
    assert "https://" not in html


def test_projection_figures_come_from_the_raw_tables_and_the_catalog(rental_archives, tmp_path):
    load = 50000
    c = compare_archives([rental_archives["rtx"], rental_archives["b200"]], load, **SHORT,
                         window_start="2026-12-01T09:00+01:00", deadline="2026-12-05T09:00+01:00")
    catalog = load_catalog()
    assert c.hours_available == 96.0
    for i, key in enumerate(("rtx", "b200")):
        top = extract(rental_archives[key], tmp_path / key)
        raw = list(csv.DictReader(open(top / "report" / "raw_table.csv")))
        for p in (p for p in c.projections if p.host.startswith("AB"[i])):
            rates = [float(r["items_per_s"]) for r in raw if r["variant_id"] == p.variant_id
                     and r["status"] == "ok"]
            assert len(rates) == 2
            assert p.items_per_s_worst == min(rates)
            assert p.hours_worst == pytest.approx(load / min(rates) / 3600)
            s = p.sizing
            assert s is not None and s.hours_needed <= s.hours_allowed <= 96.0
            q = quote(catalog, p.gpu, s.quote.days, s.quote.lots)
            assert s.quote.committed_budget == q.committed_budget
            if s.quote.lots > 1:  # one lot fewer would not finish in time
                one_less = (p.setup_s + load / (s.quote.lots - 1) / min(rates)) / 3600
                assert one_less > s.hours_allowed
            assert p.cost_per_million_items == q.committed_budget * Decimal(1_000_000) / load
    best = min((p for p in c.projections if p.eligible),
               key=lambda p: (p.sizing.quote.committed_budget, p.failures, -p.items_per_s_median))
    assert c.chosen == best


def test_break_even_load_changes_the_decision(rental_archives):
    """The load named by 'what would change' really changes the choice when decided again."""
    args = dict(window_start="2026-12-01T09:00+01:00", deadline="2026-12-01T21:00+01:00", **SHORT)
    a = [rental_archives["rtx"], rental_archives["b200"]]
    c = compare_archives(a, 1000, **args)
    assert c.chosen is not None
    above = c.what_would_change[0]
    assert "above" in above
    if above.startswith("break-even"):
        x = int(above.split("at a load of ")[1].split()[0])
        c2 = compare_archives(a, x, **args)
        assert c2.chosen is not None and c2.chosen.key != c.chosen.key
        assert compare_archives(a, x - 1, **args).chosen.key == c.chosen.key
    else:  # "above N items no configuration covers the load before the deadline"
        n = int(above.split()[1])
        assert compare_archives(a, n, **args).chosen is not None
        assert compare_archives(a, n + 1, **args).chosen is None


def test_host_letters_follow_the_archives_not_the_argument_order(rental_archives, tmp_path):
    """One rule for A, B, ...: the order archives are made in (oldest first), so the command
    line in either order, and the Compare screen whatever the order of selection, agree."""
    pair = [rental_archives["b200"], rental_archives["rtx"]]  # the rtx archive was made first
    orders = [compare_archives(p, 50000, **SHORT, window_start="2026-12-01T09:00+01:00",
                               deadline="2026-12-05T09:00+01:00") for p in (pair, pair[::-1])]
    assert orders[0].path == orders[1].path
    assert [p.host for p in orders[0].projections] == [p.host for p in orders[1].projections]
    assert orders[0].path[1].startswith(f"verified {rental_archives['rtx'].name.removesuffix('.tar.gz')}")
    assert {p.host for p in orders[0].projections} == {"A rtx-4090", "B b200"}
    r = cli("compare", *pair, "--load", 50000, *WINDOW, "--out", tmp_path / "cmp")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1].startswith(f"2. verified {rental_archives['rtx'].name.removesuffix('.tar.gz')}")


def test_corpus_mismatch_is_refused_with_both_sha256(rental_archives, tmp_path):
    m1 = manifest_of(rental_archives["rtx"], tmp_path / "a")
    m2 = manifest_of(rental_archives["other"], tmp_path / "b")
    r = cli("compare", rental_archives["rtx"], rental_archives["other"], "--load", 1000,
            "--out", tmp_path / "cmp")
    assert r.returncode == 2 and r.stdout == ""
    err = r.stderr.strip()
    assert "\n" not in err and "Traceback" not in err
    assert "corpus sha256 differs" in err
    assert m1["corpus"]["sha256"] in err and m2["corpus"]["sha256"] in err
    assert not (tmp_path / "cmp").exists()


def test_an_archive_that_does_not_verify_is_never_compared(rental_archives, tmp_path):
    bad = tmp_path / "tampered.tar.gz"
    with tarfile.open(rental_archives["b200"]) as src, tarfile.open(bad, "w:gz") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read() if m.isfile() else None
            if m.name.endswith("report/summary.json"):
                data = data.replace(b'"successes": 2', b'"successes": 3', 1)
                m.size = len(data)
            dst.addfile(m, io.BytesIO(data) if data is not None else None)
    r = cli("compare", rental_archives["rtx"], bad, "--load", 1000, "--out", tmp_path / "cmp")
    assert r.returncode == 2 and "tampered.tar.gz: does not verify" in r.stderr
    with pytest.raises(CompareError):
        compare_archives([rental_archives["rtx"]], 10)  # one archive is not a comparison


def test_bad_load_and_window_are_one_line_errors(rental_archives, tmp_path):
    a, b = rental_archives["rtx"], rental_archives["b200"]
    r = cli("compare", a, b, "--load", 0, "--out", tmp_path / "x")
    assert r.returncode == 2 and "--load must be an integer >= 1" in r.stderr
    r = cli("compare", a, b, "--out", tmp_path / "x")  # offline archives: the load is the question
    assert r.returncode == 2 and "--load is required for an offline campaign's archives" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "x").exists()
    from lab.service.views import run_comparison  # the Compare screen: an empty load field, the same refusal

    with pytest.raises(CompareError, match="--load is required for an offline campaign's archives"):
        run_comparison([str(a), str(b)], {"load": " "}, tmp_path / "runs")
    r = cli("compare", a, b, "--load", 10, "--window-start", "2026-12-05T09:00+01:00",
            "--deadline", "2026-12-01T09:00+01:00", "--out", tmp_path / "x")
    assert r.returncode == 2 and "is not after the window start" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_an_archive_without_cost_is_measured_but_never_priced_nor_chosen(rental_archives, tmp_path):
    """Issue 11 in compare: no [cost] means no package was declared, never a default GPU. The
    archive (measured faster or not) keeps its measured figures, gets empty money cells with
    the reason, and cannot be the budget decision's pick; the decision path says so."""
    c = compare_archives([rental_archives["nocost"], rental_archives["b200"]], 50000, **SHORT,
                         window_start="2026-12-01T09:00+01:00", deadline="2026-12-05T09:00+01:00")
    # hosts are lettered by when their archive was made (lab.compare.decision.host_order), not
    # by argument order: the b200 archive was made before the one without [cost]
    unpriced = [p for p in c.projections if p.host.startswith("B ")]
    assert len(unpriced) == 2 and all(p.gpu is None for p in unpriced)
    for p in unpriced:
        assert p.items_per_s_median and p.hours_worst and p.durations_s  # measured, projected
        assert p.archive_quote is None and p.sizing is None
        assert p.cost_per_validated_corpus is None and p.cost_per_million_items is None
        assert "price: no package declared in [cost]" in p.exclusions and not p.eligible
    assert c.chosen is not None and c.chosen.host.startswith("A b200")
    assert c.archives[1].gpu is None and c.archives[1].cost is None
    assert "not priced: no package declared in [cost]" in c.path[2]  # after the banner and A's line
    assert any("no package declared in [cost]" in m and "not considered" in m for m in c.motivation)
    out = tmp_path / "cmp"
    r = cli("compare", rental_archives["nocost"], rental_archives["b200"], "--load", 50000,
            *WINDOW, "--out", out)
    assert r.returncode == 0, r.stderr
    assert "rtx-4090" not in r.stdout and "rtx-4090" not in (out / "decision.md").read_text()
    rows = [r for r in csv.DictReader(open(out / "compare.csv")) if r["host"].startswith("B ")]
    assert len(rows) == 2
    for row in rows:
        assert row["gpu_priced"] == "" and row["committed_budget"] == ""
        assert row["archive_committed_budget"] == "" and row["cost_per_million_items"] == ""
        assert row["hours_worst"] != "" and row["items_per_s_median"] != ""
        assert "no package declared in [cost]" in row["exclusions"]
