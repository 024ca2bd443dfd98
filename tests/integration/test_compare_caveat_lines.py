"""Every derived line and chart of a comparison carries the caveats of the figures it rests on
(issue 35 item 1): two archives from the same CPU priced as rtx-4090 and b200, one pass each,
projected with --allow-short (tests/conftest.py ``two_rentals``). In the user's run the b200
archive measured 65.06 against 15.07 items/s and every pass was starved; the break-even line
then named "B b200 / batch 8 ... 8284.00 USD" with no caveat, and the charts' bars "B b200"
with no mark that a CPU ran them."""

from __future__ import annotations

import csv
import dataclasses
import re

import pandas as pd
import pytest

from lab.compare.decision import compare_evidence
from lab.compare.evidence import Evidence, load_evidence
from lab.compare.tables import write_comparison
from lab.report.condition_cells import StarvedPass
from lab.report.raw_row import raw_rows_of

SPEEDUP = 4.3  # the user's 65.06 / 15.07 items/s


def starved_at(ev: Evidence, rate: float | None = None) -> Evidence:
    """``ev`` as the user's archives measured it: every pass starved and, given ``rate``, every
    pass ok at ``rate`` items/s (raw rows and summary entries both, as summary.json records them)."""
    rows = [dict(r.cells, starved="True", starved_reason="cpu_share 0.30 < 0.8") for r in ev.raw_rows]
    if rate is not None:
        rows = [dict(r, items_per_s=str(rate), measured_s=str(float(r["items_total"]) / rate))
                if r["status"] == "ok" else r for r in rows]
    variants = []
    for v in ev.variants:
        ok = [r for r in rows if r["variant_id"] == v.variant_id and r["status"] == "ok"]
        variants.append(dataclasses.replace(
            v, durations_s=tuple(float(r["measured_s"]) for r in ok),
            starved_passes=tuple(StarvedPass(r["pass_id"], r["starved_reason"]) for r in ok)))
    return dataclasses.replace(ev, raw_rows=raw_rows_of(rows), variants=tuple(variants))


@pytest.fixture(scope="module")
def user_run(two_rentals, tmp_path_factory):
    rtx, b200 = (load_evidence(a) for a in two_rentals)
    measured = float(next(r.items_per_s for r in rtx.raw_rows if r.status == "ok"))
    c = compare_evidence([starved_at(rtx), starved_at(b200, measured * SPEEDUP)], 1000, allow_short=True,
                         window_start="2026-12-01T09:00+01:00")
    out = tmp_path_factory.mktemp("caveat-lines")
    return c, write_comparison(c, out)


WORDS = ("n = 1 pass(es)", "2 of 2 pass(es) starved", "measured on CPU, priced as", "too short to project")


def test_the_break_even_line_carries_the_caveats_of_both_configurations(user_run):
    c, paths = user_run
    assert c.chosen is not None and c.chosen.host == "A rtx-4090"
    [line] = [x for x in c.what_would_change if x.startswith("break-even")]
    assert "the choice becomes B b200 / batch 1" in line, line
    clause = line.split("; rests on: ", 1)[1]
    for word in WORDS:
        assert word in clause, (word, line)
    assert "rtx-4090" in clause and "b200" in clause and "durations not distinguished" in clause
    md = paths["decision"].read_text()
    assert f"- {line}" in md.split("## What would change the decision", 1)[1]


def test_the_headline_and_every_derived_line_carry_their_caveats(user_run):
    c, paths = user_run
    md = paths["decision"].read_text()
    headline = next(x for x in md.splitlines() if x.startswith("**Decision: host A rtx-4090"))
    assert headline.endswith("Rests on: n = 1 pass(es), 1 of 1 pass(es) starved, measured on CPU, priced as "
                             "rtx-4090, too short to project."), headline
    best = next(x for x in c.per_host if x.startswith("best on B b200"))
    assert all(word in best for word in WORDS) and "durations not distinguished" in best, best
    decision = next(x for x in c.path if x.startswith("decision: "))
    assert decision.endswith("rests on: n = 1 pass(es), 1 of 1 pass(es) starved, measured on CPU, priced as "
                             "rtx-4090, too short to project"), decision
    rows = {r["host"]: r for r in csv.DictReader(open(paths["csv"], encoding="utf-8"))}
    assert rows["B b200"]["caveats"] == ("rests on: n = 1 pass(es), 1 of 1 pass(es) starved, measured on CPU, "
                                         "priced as b200, too short to project")


def test_the_charts_mark_the_bars_a_cpu_ran(user_run, monkeypatch):
    """report.html: every chart's labels carry '(CPU)*' and its caption the legend of the marks."""
    import lab.compare.page as compare_html

    c, paths = user_run
    seen: list[list[str]] = []
    bars, strips = compare_html.bars_figure, compare_html.durations_figure
    monkeypatch.setattr(compare_html, "bars_figure",
                        lambda labels, *a, **k: seen.append(labels) or bars(labels, *a, **k))
    monkeypatch.setattr(compare_html, "durations_figure",
                        lambda groups, *a: seen.append([g[0] for g in groups]) or strips(groups, *a))
    page = compare_html.comparison_report(c, paths["decision"].read_text(), pd.DataFrame())
    assert len(seen) == 4
    for labels in seen:
        assert [x.split("\n")[0] for x in labels] == ["A rtx-4090 (CPU)*", "B b200 (CPU)*"], labels
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", page)
    assert len(captions) == 4
    for caption in captions:
        assert "* B b200 / batch 1, fp32, longest, max 128: rests on: n = 1 pass(es)" in caption, caption
        assert "(CPU): measured on a CPU, not on the GPU the bar is priced as" in caption, caption
    assert re.findall(r"<figcaption>(.*?)</figcaption>", paths["html"].read_text()) == captions


def test_a_campaign_note_and_its_charts_carry_the_caveats(two_rentals, tmp_path):
    """The single campaign's decision note (in the archive): its chosen line rests on one pass of a
    CPU priced as rtx-4090; its charts' captions name the marks."""
    from lab.evidence.archive import extract

    top = extract(two_rentals[0], tmp_path / "x")
    note = (top / "report" / "decision_note.md").read_text()
    chosen = next(x for x in note.splitlines() if x.startswith("**Chosen: "))
    assert chosen.endswith(", measured on CPU, priced as rtx-4090.") and "; rests on: n = 1 pass(es)" in chosen, chosen
    page = (top / "report" / "report.html").read_text()
    assert "* batch 1, fp32, longest, max 128: rests on: n = 1 pass(es)" in page


def test_every_line_naming_a_pass_names_its_host(user_run):
    """Issue 35: two rentals of one plan hold the same pass ids, and "starved pass(es) among these
    durations: p001-..." or "the predictions of pass p001-..." did not say whose. Every line of
    the decision note, the decision path (stdout, Compare screen) and the pairs that names a pass
    names it 'A rtx-4090 / <pass id>' (lab.report.condition_cells.pass_name)."""
    c, paths = user_run
    ids = {r.pass_id for p in c.projections for r in p.starved_passes} | {p.prediction_pass for p in c.projections}
    assert len(ids) == 1, ids  # both rentals ran the one planned pass: its id alone names neither
    [pid] = ids
    hosts = [p.host for p in c.projections]
    lines = [*paths["decision"].read_text().splitlines(), *c.path, *c.motivation, *c.what_would_change,
             *c.per_host, c.stands_on, *(x.reason for x in c.cross_pairs)]
    named = [x for x in lines if pid in x]
    assert any("the predictions of pass" in x for x in named) and any("starved pass(es)" in x for x in named)
    for line in named:
        bare = line
        for host in hosts:
            bare = bare.replace(f"{host} / {pid}", "")
        assert pid not in bare, line
    pair = next(x.reason for x in c.cross_pairs)
    assert f"A rtx-4090 / {pid}, B b200 / {pid}" in pair, pair
    assert f"the predictions of pass A rtx-4090 / {pid}" in c.stands_on, c.stands_on
