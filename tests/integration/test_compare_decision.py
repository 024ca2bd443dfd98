"""A decision you can defend (issue 19), on real archives made by the product in this test
session (tests/conftest.py ``rental_archives``): each host's quality and the cross-host
agreement are shown, partial evidence is refused unless allowed and then named first, prices
carry their catalog's version, projections state how far they reach and refuse passes too
short to support them, several differences are named together."""

from __future__ import annotations

import csv
import dataclasses
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from lab.compare import CompareError, compare_archives
from lab.compare.comparability import check_comparable
from lab.compare.decision import compare_evidence
from lab.compare.evidence import load_evidence
from lab.cost import forfaits

REPO = Path(__file__).resolve().parents[2]
WINDOW = dict(window_start="2026-12-01T09:00+01:00", deadline="2026-12-05T09:00+01:00")
BUNDLE_CATALOG = Path(forfaits.DEFAULT_CATALOG)  # before any test points the default elsewhere
CLI_WINDOW = ["--window-start", WINDOW["window_start"], "--deadline", WINDOW["deadline"]]


def cli(*args):
    return subprocess.run([sys.executable, "-m", "lab.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=REPO, timeout=300)


@pytest.fixture(scope="module")
def evidence(rental_archives) -> dict:
    return {k: load_evidence(rental_archives[k]) for k in ("rtx", "b200", "partial", "other")}


def edited_catalog(tmp_path: Path, version: str, rtx_price: str) -> Path:
    """A copy of the bundle's catalog with another rtx-4090 price and catalog version."""
    old = "rtx-4090,NVIDIA GeForce RTX 4090,1,7,110.00,USD,2026-09-24"
    text = BUNDLE_CATALOG.read_text(encoding="utf-8")
    assert old in text
    text = text.replace(old, f"rtx-4090,NVIDIA GeForce RTX 4090,1,7,{rtx_price},USD,{version}")
    path = tmp_path / f"catalog-{version}.csv"
    path.write_text(text, encoding="utf-8")
    return path


def test_each_host_quality_and_the_cross_host_agreement_are_shown(rental_archives, tmp_path):
    out = tmp_path / "cmp"
    r = cli("compare", rental_archives["rtx"], rental_archives["b200"], "--load", 50000, *CLI_WINDOW,
            "--allow-short", "--out", out)
    assert r.returncode == 0, r.stderr
    c = compare_archives([rental_archives["rtx"], rental_archives["b200"]], 50000, allow_short=True,
                         **WINDOW)
    for p in c.projections:  # metric per archive x variant, its reference, the gap
        assert p.metric_name == "accuracy" and p.metric_median is not None
        assert p.metric_min <= p.metric_median <= p.metric_max
        assert p.reference_label.startswith("batch 1") and p.reference_metric_median is not None
        assert p.metric_gap == pytest.approx(p.metric_median - p.reference_metric_median)
    # both hosts ran the same model on the same CPU build: the same predictions per id
    assert len(c.agreements) == 2
    for x in c.agreements:
        assert x.ids == 7 and x.flips == 0 and x.agreement == 1.0 and x.within_tolerance
    assert "the same ML result on B b200" in c.stands_on and "predictions of pass" in c.stands_on
    md = (out / "decision.md").read_text()
    assert "**Quality.** accuracy " in md and "## Same ML result?" in md
    assert "A rtx-4090 vs B b200: 7 of 7 ids agree (100.0 %), 0 flip(s)" in md
    rows = list(csv.DictReader(open(out / "compare.csv")))
    assert all(row["metric_median"] and row["reference_metric_median"] for row in rows)
    assert all("7 of 7 ids agree, 0 flip(s), within the agreement rule (at most 0.05 of ids differ) and the "
               "tolerance 0.05 (metric gap)" in row["same_result"] for row in rows)
    html = (out / "report.html").read_text()
    assert "Same ML result?" in html and "7 of 7 ids agree" in html
    assert any(line.split(". ", 1)[1].startswith("same ML result: 2 of 2") for line in r.stdout.splitlines())


def test_a_host_that_disagrees_beyond_the_tolerance_is_named(evidence):
    """One rental's accepted pass predicted other labels for 2 of the 7 ids (2/7 > 0.05): the
    decision names that host and says which host's result it stands on."""
    a, b = evidence["rtx"], evidence["b200"]
    preds = {vid: dict(p) for vid, p in b.predictions.items()}
    for vid in preds:
        for item in sorted(preds[vid])[:2]:
            preds[vid][item] = "flipped-" + preds[vid][item]
    b_flipped = dataclasses.replace(b, predictions=preds)
    c = compare_evidence([a, b_flipped], 50000, allow_short=True, **WINDOW)
    assert all(x.flips == 2 and not x.within_tolerance for x in c.agreements)
    assert c.chosen is not None and c.chosen.host == "A rtx-4090"
    assert "NOT the same ML result on B b200 (2 flip(s) of 7 ids" in c.stands_on
    assert c.stands_on.startswith("stands on A rtx-4090's result")
    same = next(line for line in c.path if line.startswith("same ML result"))
    assert "0 of 2" in same and "BEYOND the agreement rule (2 of 7 ids differ, allowed 0.05)" in same


def test_partial_evidence_is_refused_in_one_line_unless_allowed(rental_archives, tmp_path):
    full, part = rental_archives["rtx"], rental_archives["partial"]
    r = cli("compare", full, part, "--load", 50000, "--out", tmp_path / "refused")
    assert r.returncode == 2 and r.stdout == "" and not (tmp_path / "refused").exists()
    err = r.stderr.strip()
    assert "\n" not in err and "partial evidence refused" in err and "--allow-partial" in err
    assert part.name.removesuffix(".tar.gz") in err and "1 of 4 planned passes" in err
    out = tmp_path / "allowed"
    r = cli("compare", full, part, "--load", 50000, *CLI_WINDOW, "--allow-partial", "--allow-short",
            "--out", out)
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("1. PARTIAL EVIDENCE compared (--allow-partial): B b200")
    assert "never run there: batch 4" in first
    md = (out / "decision.md").read_text()
    assert md.splitlines()[0].startswith("# Comparison of rentals: PARTIAL EVIDENCE compared")
    rows = list(csv.DictReader(open(out / "compare.csv")))
    assert rows[0]["banner"].startswith("PARTIAL EVIDENCE compared (--allow-partial)")
    # the complete host's batch 4, never run on the partial one, is still that host's evidence
    complete = next(r["host"] for r in rows if r["archive"] == full.name.removesuffix(".tar.gz"))
    assert any(r["host"] == complete and r["variant_label"].startswith("batch 4") for r in rows)
    html = (out / "report.html").read_text()  # the first line under the title
    assert html.split("<h1>Comparison of rentals</h1>", 1)[1].lstrip().startswith('<p class="banner">PARTIAL EVIDENCE')


def test_an_unfinished_campaign_note_lists_what_never_ran(rental_archives, tmp_path):
    """The partial archive's own decision note (and so the Cost screen's) never calls its one
    variant the only configuration that passes while batch 4 has not run."""
    from lab.evidence.archive import extract

    top = extract(rental_archives["partial"], tmp_path / "x")
    note = (top / "report" / "decision_note.md").read_text()
    assert note.startswith("> **Partial evidence.**")
    assert "## Not run" in note and "**batch 4, fp32, longest, max 128**: no pass has run yet" in note
    assert "it is the only configuration that passes" not in note
    assert "the only one of the configurations run so far" in note
    assert "1 declared configuration(s) have not run" in note
    assert "**Measured hardware differs from the priced package.**" in note


def test_the_cost_screen_note_carries_the_archived_banners(rental_archives):
    """views.cost_view (the Cost screen) builds its note with the archived note's banners."""
    from lab.service.views import cost_view

    [campaign_dir] = [d for d in rental_archives["partial"].parent.iterdir() if d.is_dir()]  # v1-<hash>
    view = cost_view(campaign_dir / "campaign.toml", campaign_dir, {})
    note = view.note_md
    assert note.startswith("> **Partial evidence.** campaign not finished")
    assert "**Measured hardware differs from the priced package.**" in note
    assert "## Not run" in note and "batch 4, fp32, longest, max 128" in note


def test_the_cost_screen_quote_says_the_cpu_was_measured_not_the_package(rental_archives):
    """views.cost_view (the Cost screen): the quote priced from a CPU campaign ends with the one line
    the note also carries (lab.cost.hardware), for the declared package and for one typed in."""
    from lab.service.views import cost_view

    [campaign_dir] = [d for d in rental_archives["rtx"].parent.iterdir() if d.is_dir()]  # v1-<hash>
    view = cost_view(campaign_dir / "campaign.toml", campaign_dir, {})
    last = view.quote_text.splitlines()[-1]
    assert last.startswith("Measured hardware differs from the priced package. Measured: the CPU; "), last
    assert "priced: rtx-4090 (NVIDIA GeForce RTX 4090), 1 card per lot. The price is that package's, the " \
           "durations are the CPU's" in last
    assert "**Measured hardware differs from the priced package.** Measured: the CPU; " in view.note_md
    typed = cost_view(campaign_dir / "campaign.toml", campaign_dir, {"gpu": "b200"})
    assert "priced: b200 (NVIDIA B200), 2 cards per lot." in typed.quote_text.splitlines()[-1]


def test_prices_carry_their_catalog_version(rental_archives, tmp_path, monkeypatch):
    a, b = rental_archives["rtx"], rental_archives["b200"]
    # the bundle's catalog edited after the archives were made: a new version, a new price
    newer = edited_catalog(tmp_path, "2026-11-30", "300.00")
    monkeypatch.setattr(forfaits, "DEFAULT_CATALOG", str(newer))
    c = compare_archives([a, b], 50000, allow_short=True, **WINDOW)
    assert c.catalog is not None
    assert c.catalog.version == "2026-11-30" and c.catalog.source == "the bundle's catalog"
    rtx = [p for p in c.projections if p.host == "A rtx-4090"]
    for p in rtx:  # the archive's own budget, from its own catalog, unchanged
        assert p.archive_quote.committed_budget == 110 and p.archive_quote.catalog_version == "2026-09-24"
        assert p.decision_quote.committed_budget == 300
        assert "price differs" in p.price_note and "version 2026-09-24" in p.price_note
        assert "version 2026-11-30" in p.price_note
    line = next(x for x in c.path if x.startswith("priced with catalog version"))
    assert "2026-11-30" in line and "2026-09-24" in line  # both versions named
    from lab.compare.tables import comparison_table, decision_markdown

    md = decision_markdown(c)
    assert "priced with catalog version 2026-11-30" in md and "committed 110.00 USD" in md
    assert "prices it at 300.00 USD" in md
    table = comparison_table(c)
    assert set(table["catalog_version"]) == {"2026-11-30"}
    assert set(table["archive_catalog_version"]) == {"2026-09-24"}
    # a catalog of the same version whose prices differ is refused with one line
    clash = edited_catalog(tmp_path, "2026-09-24", "300.00")
    monkeypatch.setattr(forfaits, "DEFAULT_CATALOG", str(clash))
    with pytest.raises(CompareError) as err:
        compare_archives([a, b], 50000, allow_short=True, **WINDOW)
    assert "two catalogs of version 2026-09-24 price differently" in str(err.value)
    assert "\n" not in str(err.value)
    # --catalog names the catalog explicitly: used, and said so
    c = compare_archives([a, b], 50000, allow_short=True, catalog_path=str(newer), **WINDOW)
    assert c.catalog is not None and c.catalog.explicit and c.catalog.version == "2026-11-30"


def test_passes_too_short_are_not_projected_unless_allowed(rental_archives, tmp_path):
    """The test campaign's passes last well under a second: the default rule (3 accepted passes
    of at least 60 s) excludes them; --allow-short projects them and every output says so. The
    load (200,000 items in the 96 h window: 0.6 items/s) is one lot of either package at any
    throughput this machine gives, however loaded (at 2,000,000 a starved b200 host's passes
    fitted no number of lots, and the test failed on how busy the machine was)."""
    a, b = rental_archives["rtx"], rental_archives["b200"]
    load = 200_000
    c = compare_archives([a, b], load, **WINDOW)
    assert c.chosen is None
    assert all(p.too_short.startswith("too short to project: 0 accepted pass(es) of at least 60 s")
               for p in c.projections)
    from lab.compare.tables import decision_markdown

    assert "--allow-short projects them" in c.path[-1]  # the override is named where it is needed
    assert "--allow-short" in decision_markdown(c).split("\n\n")[1]
    assert all(any(x.startswith("too short to project: ") for x in p.exclusions) for p in c.projections)
    for p in c.projections:  # still shown, with how far the projection would reach
        assert p.extrapolation == pytest.approx(load / 7) and p.items_per_pass == 7
        assert "extrapolation x28,571" in p.spread_text() and "worst pass" in p.spread_text()
    allowed = compare_archives([a, b], load, allow_short=True, **WINDOW)
    assert allowed.chosen is not None
    assert allowed.banners[0].startswith("PASSES TOO SHORT projected anyway (--allow-short)")
    assert allowed.path[0] == allowed.banners[0]
    assert any("projected only because --allow-short was given" in m for m in allowed.motivation)
    # the headline names the best on the other host, its budget ratio, what it would need
    best_b = next(x for x in allowed.per_host if x.startswith("best on B b200: "))
    b_budget = min(p.sizing.quote.committed_budget for p in allowed.projections if p.host == "B b200")
    ratio = float(b_budget / allowed.chosen.sizing.quote.committed_budget)
    assert f"{b_budget:.2f} USD, {ratio:.1f}x the chosen budget" in best_b  # 18.8x: 2071 vs 110
    assert any(x.startswith("B b200 cannot win at the declared load at any throughput") for x in allowed.per_host)


def test_the_runner_up_host_is_told_the_throughput_it_would_need(rental_archives, tmp_path, monkeypatch):
    """With a catalog where one b200 lot costs less than two rtx-4090 lots, the runner-up line
    names the worst-pass throughput the b200 host would need to win."""
    a, b = rental_archives["rtx"], rental_archives["b200"]
    cat = BUNDLE_CATALOG.read_text(encoding="utf-8").replace(
        "b200,NVIDIA B200,2,7,2071.00,USD,2026-09-24", "b200,NVIDIA B200,2,7,100.00,USD,2026-12-01")
    path = tmp_path / "cheap-b200.csv"
    path.write_text(cat, encoding="utf-8")
    c = compare_archives([a, b], 5_000_000, allow_short=True, catalog_path=str(path),
                         window_start="2026-12-01T09:00+01:00", deadline="2026-12-08T09:00+01:00")
    assert c.chosen is not None
    other = "B b200" if c.chosen.host.startswith("A") else "A rtx-4090"
    assert any(x.startswith(f"best on {other}: ") and "x the chosen budget" in x for x in c.per_host), c.per_host
    line = next((x for x in c.per_host if x.startswith(f"{other} would need a worst pass of")), None)
    if line is None:  # the other host cannot undercut the chosen budget with any package
        cannot = f"{other} cannot win at the declared load at any throughput"
        assert any(x.startswith(cannot) for x in c.per_host), c.per_host
    else:
        need = float(line.split("worst pass of ")[1].split()[0])
        measured = float(line.split("(measured ")[1].split(",")[0])
        assert need > measured  # it lost, so it needs more than it measured


def test_every_difference_that_makes_archives_not_comparable_is_named(evidence):
    a, other = evidence["rtx"], evidence["other"]
    # its campaign file written with another threshold, as read_evidence reads it: as written and typed
    written = msgspec.structs.replace(other.campaign, quality={**other.campaign.quality, "threshold": 0.9})
    config = dataclasses.replace(other.config, quality=dataclasses.replace(other.config.quality, threshold=0.9))
    other_rule = dataclasses.replace(other, campaign=written, config=config)
    with pytest.raises(CompareError) as err:
        check_comparable([a, other_rule])
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("not comparable: corpus sha256 differs")
    assert "; [quality] threshold differs" in msg and f"{other.name} has 0.9" in msg  # the key, not the dict


def test_one_campaign_is_never_two_rentals(rental_archives, tmp_path):
    """The same archive under another name (or the same campaign packed twice) holds the same
    passes: refused, not compared as a second host that agrees with the first."""
    import shutil

    copy = tmp_path / "another-name.tar.gz"
    shutil.copy(rental_archives["rtx"], copy)
    with pytest.raises(CompareError) as err:
        compare_archives([rental_archives["rtx"], copy], 1000, allow_short=True)
    assert "hold the same campaign's passes" in str(err.value) and "\n" not in str(err.value)


def test_usage_errors_and_odd_paths_are_one_line(rental_archives, tmp_path):
    for args in (("compare", rental_archives["rtx"]), ("compare", rental_archives["rtx"], "--load", "abc"),
                 ("compare", tmp_path, rental_archives["rtx"], "--load", 10),
                 ("compare", rental_archives["rtx"], rental_archives["b200"], "--load", 10, "--max-lots", 0)):
        r = cli(*args)
        err = r.stderr.strip()
        assert r.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, (args, err)
    assert "a folder, not an archive" in cli("compare", tmp_path, rental_archives["rtx"], "--load", 10).stderr
