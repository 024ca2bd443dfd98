"""One vocabulary of caveats (lab.report.caveats, issue 35 item 1): each flag of the figures a
derived line rests on appears in its clause when set, none when the figures are clean, and a
projection's flags are read from what project() computed (lab.compare.projection)."""
from __future__ import annotations

import dataclasses

import pytest

from lab.compare.decision import pair_caveats
from lab.compare.projection import project
from lab.cost.forfaits import load_catalog
from lab.report.caveats import Basis, caveats, chart_legend, chart_mark, rests_on, with_caveats
from lab.report.condition_cells import StarvedPass
from tests.unit.test_compare_caveats import evidence, variant

CLEAN = Basis(tag="A b200 / batch 8", passes=5)
FLAGS = {
    "n = 1 pass(es)": dict(passes=1),
    "1 of 5 pass(es) starved": dict(starved=1),
    "measured on CPU, priced as b200": dict(cpu_priced_as="b200"),
    "too short to project": dict(too_short=True),
    "not steady-state (recompilation)": dict(not_steady=True),
}


def test_clean_figures_carry_no_caveat():
    assert caveats([CLEAN]) == [] and caveats([CLEAN, CLEAN], distinguished=True) == []
    assert rests_on([CLEAN]) == "" and with_caveats("line", [CLEAN]) == "line"
    assert chart_mark("A b200", CLEAN) == "A b200" and chart_legend([CLEAN]) == ""


@pytest.mark.parametrize("phrase", FLAGS)
def test_each_flag_set_gives_its_caveat_and_no_other(phrase):
    flagged = dataclasses.replace(CLEAN, **FLAGS[phrase])
    assert caveats([flagged]) == [phrase]
    assert rests_on([flagged]) == "rests on: " + phrase
    assert with_caveats("x", [flagged]) == "x; rests on: " + phrase
    assert chart_mark("A b200", flagged) == "A b200" + (" (CPU)" if "CPU" in phrase else "") + "*"
    assert chart_legend([flagged]).startswith("* A b200 / batch 8: rests on: " + phrase)


def test_a_pair_not_distinguished_says_so_and_names_whose_flag_it_is():
    other = dataclasses.replace(CLEAN, tag="B rtx-4090 / batch 8", starved=2, cpu_priced_as="rtx-4090")
    found = caveats([dataclasses.replace(CLEAN, cpu_priced_as="b200"), other], distinguished=False)
    assert found == ["2 of 5 pass(es) starved (B rtx-4090 / batch 8)", "measured on CPU, priced as b200 and rtx-4090",
                     "durations not distinguished"]
    assert caveats([CLEAN, CLEAN], distinguished=False) == ["durations not distinguished"]


def test_a_projection_carries_the_flags_project_computed():
    catalog = load_catalog(None)
    p = project(evidence("a"), variant(2), catalog, 1000, None, 2, host="A rtx-4090")
    assert p.measured_on_cpu and p.basis.cpu_priced_as == "rtx-4090" and p.basis.not_steady
    assert rests_on([p.basis]) == "rests on: measured on CPU, priced as rtx-4090, not steady-state (recompilation)"
    one = dataclasses.replace(p, durations_s=p.durations_s[:1], durations_caveat="",
                              starved_passes=(StarvedPass("p1", "cpu_share 0.2"),), too_short="too short")
    assert rests_on([one.basis]) == ("rests on: n = 1 pass(es), 1 of 1 pass(es) starved, measured on CPU, "
                                     "priced as rtx-4090, too short to project")
    assert pair_caveats(one, one).endswith(", durations not distinguished")
    on_gpu = dataclasses.replace(p, measured_on_cpu=False, durations_caveat="")
    assert pair_caveats(on_gpu, on_gpu) == "rests on: durations not distinguished"  # the same durations
    slower = dataclasses.replace(on_gpu, durations_s=tuple(d * 3 for d in on_gpu.durations_s))
    assert pair_caveats(on_gpu, slower) == ""  # 5 vs 5 passes apart: distinguished, no flag of their own


def test_a_campaign_decision_carries_the_caveats_of_its_chosen_and_next_configuration():
    """The campaign's decision note: the chosen line and the comparison with the next one name
    one starved pass of a CPU priced as rtx-4090 (and b200); with five clean passes each, neither has any."""
    from lab.cost.hardware import Measured
    from lab.report.decision_note import decision_note
    from tests.unit.test_decision_note import CAMPAIGN, PRICING, spread
    from tests.unit.test_decision_note import variant as summary_of

    one = [summary_of("b200", "batch 8 on B200", durations_s=[5.0], median_s=5.0, successes=1, accepted_passes=1,
                      starved_passes=(StarvedPass("p2", "cpu_share 0.3"),)),
           summary_of("rtx", "batch 8 on RTX 4090", durations_s=[12.2], median_s=12.2, successes=1,
                      accepted_passes=1)]
    on_cpu = Measured.of([[("cpu", "AMD EPYC 7B13")]])
    note = decision_note(one, CAMPAIGN, PRICING, variant_pricing={"b200": {"gpu": "b200", "lots": 1}},
                         measured={"b200": on_cpu, "rtx": on_cpu})
    chosen = next(x for x in note.splitlines() if x.startswith("**Chosen: "))
    assert chosen.endswith("; rests on: n = 1 pass(es), measured on CPU, priced as rtx-4090."), chosen
    assert ("next: batch 8 on B200 at 2071.00 USD; rests on: n = 1 pass(es), 1 of 1 pass(es) starved (batch 8 on "
            "B200), measured on CPU, priced as rtx-4090 and b200, durations not distinguished)") in note
    clean = [summary_of("b200", "batch 8 on B200", median_s=5.0, durations_s=spread(5.0)),
             summary_of("rtx", "batch 8 on RTX 4090", median_s=12.2)]
    note = decision_note(clean, CAMPAIGN, PRICING, variant_pricing={"b200": {"gpu": "b200", "lots": 1}})
    assert "rests on" not in note
