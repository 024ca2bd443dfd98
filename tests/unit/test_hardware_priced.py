"""A price is the package's; the durations are the measured device's (lab.cost.hardware). The
reported case: the demo campaign priced as an RTX 4090 package while its passes ran on an NVIDIA
H200 (devices_observed "card 0: cuda:0 NVIDIA H200 ..."), and the decision note said nothing. Every
cost shown from measured times says it in one line: the decision note (and report.html built from
it), the Cost screen's quote, and compare, which does not rank such a host."""
from __future__ import annotations

import dataclasses

import pytest

from lab.compare.evidence import Evidence
from lab.compare.projection import project
from lab.cost.forfaits import load_catalog
from lab.cost.hardware import HardwareCheck, Measured, Priced, same_gpu
from lab.inputs.manifest_record import GpuDevice, Manifest, ManifestGpu
from lab.report.caveats import Basis, caveats, chart_legend, chart_mark
from lab.report.decision_note import HARDWARE_DIFFERS, decision_note, hardware_checks
from tests.unit.test_compare_caveats import evidence, variant
from tests.unit.test_decision_note import CAMPAIGN, PRICING
from tests.unit.test_decision_note import variant as summary_of

RTX = Priced("rtx-4090", "NVIDIA GeForce RTX 4090", 1)
B200 = Priced("b200", "NVIDIA B200", 2)


def on(name: str, cards: int = 1, passes: int = 5, device: str = "cuda") -> Measured:
    return Measured.of([[(f"{device}:{i}" if device != "cpu" else "cpu", name) for i in range(cards)]] * passes)


@pytest.mark.parametrize(("device", "catalog", "same"), [
    ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090", True),
    ("NVIDIA GeForce RTX 4090", "RTX 4090", True),  # a user's catalog writes it shorter
    ("NVIDIA GeForce RTX 4090", "rtx-4090", True),  # the catalog's gpu id
    ("GeForce RTX 4090", "NVIDIA GeForce RTX 4090", True),  # an older driver's name, without the vendor
    ("NVIDIA H200", "RTX 4090", False),  # the reported case
    ("NVIDIA GeForce RTX 4090 D", "RTX 4090", False),  # another, slower product
    ("NVIDIA H100 80GB HBM3", "H100", True),
    ("NVIDIA H100 80GB HBM3", "H100 80GB", True),
    ("NVIDIA A100-SXM4-40GB", "A100 80GB", False),  # memory sizes both stated, and different
    ("NVIDIA H100 PCIe", "H100 SXM", False),  # form factors both stated, and different
    ("AMD Instinct MI300X", "MI300X", True),
    ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada", True),
    ("AMD EPYC 7B13", "rtx-4090", False),
    ("", "rtx-4090", False),  # a GPU whose name was not recorded is never taken for the priced one
])
def test_the_matching_rule(device, catalog, same):
    assert same_gpu(device, catalog) is same


def test_the_reported_case_h200_priced_as_an_rtx_4090_package_is_said_in_one_line():
    check = HardwareCheck(on("NVIDIA H200"), RTX)
    assert check.differs and check.other_gpu and not check.on_cpu
    line = check.line()
    assert "\n" not in line
    assert line.startswith("Measured: 1 x NVIDIA H200 per pass; priced: rtx-4090 (NVIDIA GeForce RTX 4090), "
                           "1 card per lot.")
    assert "The price is that package's, the durations are the NVIDIA H200's" in line
    assert "the cost per validated corpus is not that package's until the campaign is measured on it" in line
    assert check.caveat == "measured on NVIDIA H200, priced as rtx-4090"


def test_the_priced_gpu_on_the_lots_cards_says_nothing():
    check = HardwareCheck(on("NVIDIA GeForce RTX 4090"), RTX)
    assert not check.differs and check.line() == "" and check.caveat == ""
    assert HardwareCheck(on("NVIDIA B200", cards=2), B200).line() == ""
    assert Basis.hardware_flags(check) == {}


def test_fewer_or_more_cards_than_a_lot_differ_and_only_more_is_counted_as_more():
    fewer = HardwareCheck(on("NVIDIA B200", cards=1), B200)
    assert fewer.differs and fewer.cards_differ and not fewer.more_cards and not fewer.other_gpu
    assert fewer.caveat == "measured on 1 x NVIDIA B200 per pass, priced as b200 (2 cards per lot)"
    assert "durations are those of 1 x NVIDIA B200 per pass" in fewer.line()
    more = HardwareCheck(on("NVIDIA GeForce RTX 4090", cards=2), RTX)
    assert more.differs and more.more_cards and not more.other_gpu


def test_cpu_passes_priced_as_a_gpu_package_say_so_without_more():
    """The offline demo: true, and no more alarming than the truth (the CPU caveat's own words)."""
    check = HardwareCheck(on("AMD EPYC 7B13", device="cpu"), RTX)
    assert check.on_cpu and check.differs
    assert check.line() == ("Measured: the CPU; priced: rtx-4090 (NVIDIA GeForce RTX 4090), 1 card per "
                            "lot. The price is that package's, the durations are the CPU's, so the cost per "
                            "validated corpus is not that package's until the campaign is measured on it.")
    assert Basis.hardware_flags(check) == {"cpu_priced_as": "rtx-4090"}
    nothing = HardwareCheck(Measured(), RTX)  # no pass got as far as its device
    assert nothing.differs and nothing.line().startswith("Measured: no pass recorded its device")


def test_a_basis_measured_on_another_gpu_carries_its_caveat_and_chart_mark():
    flagged = Basis(tag="A rtx-4090 / batch 8", passes=5,
                    **Basis.hardware_flags(HardwareCheck(on("NVIDIA H200"), RTX)))
    assert caveats([flagged]) == ["measured on NVIDIA H200, priced as rtx-4090"]
    assert chart_mark("A rtx-4090", flagged) == "A rtx-4090 (other GPU)*"
    assert "(other GPU): measured on another GPU or number of cards than the bar is priced as" in \
        chart_legend([flagged])


def test_the_decision_note_ends_its_decision_with_the_line_and_its_figures_carry_the_caveat():
    one = [summary_of("v1", "batch 8, fp32")]
    note = decision_note(one, CAMPAIGN, PRICING, measured={"v1": on("NVIDIA H200")})
    decision = note.split("\n## Decision\n", 1)[1]
    [line] = [x for x in decision.splitlines() if x.startswith(HARDWARE_DIFFERS)]
    assert "Measured: 1 x NVIDIA H200 per pass; priced: rtx-4090 (NVIDIA GeForce RTX 4090)" in line
    assert "(configurations:" not in line  # it is every configuration
    chosen = next(x for x in note.splitlines() if x.startswith("**Chosen: "))
    assert chosen.endswith("rests on: measured on NVIDIA H200, priced as rtx-4090."), chosen
    matching = decision_note(one, CAMPAIGN, PRICING, measured={"v1": on("NVIDIA GeForce RTX 4090")})
    assert HARDWARE_DIFFERS not in matching and "rests on" not in matching
    unknown = decision_note(one, CAMPAIGN, PRICING)  # no pass records given: nothing claimed either way
    assert HARDWARE_DIFFERS not in unknown
    checks = hardware_checks(one, PRICING, {"v1": on("NVIDIA H200")})
    assert checks["v1"] is not None and checks["v1"].other_gpu


def test_a_note_names_the_configurations_when_only_some_differ():
    """A series over cards priced as a B200 lot (2 cards): the 1-card variant differs, the 2-card one does not."""
    two = [summary_of("c1", "1 card"), summary_of("c2", "2 cards")]
    pricing = {**PRICING, "gpu": "b200", "lots": 1}
    note = decision_note(two, CAMPAIGN, pricing,
                         measured={"c1": on("NVIDIA B200", cards=1), "c2": on("NVIDIA B200", cards=2)})
    [line] = [x for x in note.splitlines() if x.startswith(HARDWARE_DIFFERS)]
    assert line.endswith("(configurations: 1 card)"), line


def with_cards(ev: Evidence, name: str, cards: int = 1, device: str = "cuda") -> Evidence:
    import msgspec

    rows = [msgspec.structs.replace(r, pass_id=f"p{i}", backend=device) for i, r in enumerate(ev.raw_rows)]
    made = {"v": [tuple((device, name) for _k in range(cards)) for _r in rows]}
    gpu = ManifestGpu(devices=(GpuDevice(name),))
    return dataclasses.replace(ev, raw_rows=rows, cards=made, manifest=Manifest(gpu=gpu))


def test_compare_does_not_rank_a_host_measured_on_another_gpu_than_its_price():
    catalog = load_catalog(None)
    h200 = project(with_cards(evidence("a"), "NVIDIA H200"), variant(0), catalog, 1000, None, 2, host="A rtx-4090")
    [why] = [x for x in h200.exclusions if x.startswith("hardware: ")]
    assert why.startswith("hardware: measured on NVIDIA H200, priced as rtx-4090 (NVIDIA GeForce RTX 4090): its "
                          "throughput is not that package's, so it is not ranked"), why
    assert not h200.eligible and "measured on NVIDIA H200, priced as rtx-4090" in h200.cards_note
    assert caveats([h200.basis]) == ["measured on NVIDIA H200, priced as rtx-4090"]

    rtx = project(with_cards(evidence("b"), "NVIDIA GeForce RTX 4090"), variant(0), catalog, 1000, None, 2)
    assert rtx.eligible and caveats([rtx.basis]) == [] and rtx.cards_note == "measured on 1 card"

    more = project(with_cards(evidence("c"), "NVIDIA GeForce RTX 4090", cards=2), variant(0), catalog, 1000, None, 2)
    assert any(x.startswith("hardware: measured on 2 x NVIDIA GeForce RTX 4090 per pass") for x in more.exclusions)


def test_compare_keeps_ranking_a_cpu_rehearsal_with_its_caveat():
    catalog = load_catalog(None)
    cpu = project(with_cards(evidence("a"), "AMD EPYC 7B13", device="cpu"), variant(0), catalog, 1000, None, 2)
    assert cpu.eligible and cpu.measured_on_cpu
    assert caveats([cpu.basis]) == ["measured on CPU, priced as rtx-4090"]
