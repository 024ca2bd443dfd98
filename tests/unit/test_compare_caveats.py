"""A comparison of archives carries the recompilation caveat of a campaign's summary: a
variant whose measured windows recompiled is flagged in its projection, compare.csv,
decision.md and the motivation when it is chosen or next (its package is sized on figures
that are not steady-state)."""
from __future__ import annotations

import tomllib
from datetime import datetime, timezone

from lab.compare.comparison_records import Identity, WrittenSections
from lab.compare.decision import Comparison, steady_state_caveats
from lab.compare.evidence import Evidence
from lab.compare.projection import project
from lab.compare.tables import decision_markdown, projection_row
from lab.cost.forfaits import load_catalog
from lab.inputs.manifest_record import Manifest, ManifestCatalog, ManifestCpu, ManifestModel
from lab.orchestration.config import parse_config
from lab.orchestration.lock_record import CampaignLock
from lab.orchestration.protocol import DEMO_CAMPAIGN
from lab.report.raw_row import raw_rows_of
from lab.report.summary import VariantSummary

CAVEAT = "these durations include recompilation: dynamo compiled inside the measured window of 2 of 5"


def evidence(name: str) -> Evidence:
    raw = tomllib.loads(DEMO_CAMPAIGN.read_text(encoding="utf-8"))
    raw["cost"] = {"gpu": "rtx-4090", "days": 7, "lots": 1}
    # 1000 items per pass at 10-14 items/s: 71-100 s windows, long enough to project
    rows = raw_rows_of([{"variant_id": "v", "status": "ok", "items_per_s": str(10.0 + i), "startup_s": "1.0",
                         "model_load_s": "2.0", "warmup_s": "3.0", "backend": "cpu", "cards": "",
                         "items_total": "1000", "measured_s": str(1000 / (10.0 + i)), "corpus_accepted": "True"}
                        for i in range(5)])
    return Evidence(path=None, name=name, manifest=Manifest(cpu=ManifestCpu(name="test cpu")), variants=(),
                    raw_rows=rows, campaign=WrittenSections(), lock=CampaignLock(), corpus_card=None, files_checked=1,
                    config=parse_config(raw))


def variant(recompiled: int) -> VariantSummary:
    return VariantSummary(variant_id="v", label="batch 8, compile", accepted_passes=5, successes=5,
                          failures=0, durations_s=(1.0, 1.1, 1.2, 1.3, 1.4), median_s=1.2, min_s=1.0,
                          max_s=1.4, quality_verdict="accepted", feasible=True,
                          recompiled_passes=recompiled, recompiles_measured_max=3 if recompiled else 0)


def test_a_recompiled_variant_is_flagged_in_every_file_of_a_comparison():
    catalog = load_catalog(None)
    flagged = project(evidence("a"), variant(2), catalog, 1000, None, 2, host="A rtx-4090")
    steady = project(evidence("b"), variant(0), catalog, 1000, None, 2, host="B rtx-4090")
    assert flagged.eligible and steady.eligible
    assert flagged.durations_caveat.startswith(CAVEAT) and "up to 3 frame(s)" in flagged.durations_caveat
    assert steady.durations_caveat == ""
    assert projection_row(flagged)["durations_caveat"] == flagged.durations_caveat
    assert projection_row(steady)["durations_caveat"] == ""

    [line] = steady_state_caveats([flagged, steady])
    assert line.startswith("A rtx-4090 / batch 8, compile: " + CAVEAT)
    assert steady_state_caveats([steady, flagged]) != []  # the next one's durations are used too
    assert steady_state_caveats([steady, steady, flagged]) == []  # third: not cited

    identity = Identity(corpus_sha256="0" * 64, model=ManifestModel(), two_models=(), quality={}, timing={},
                        common_variants=(), missing={})
    c = Comparison(archives=(), identity=identity, projections=(flagged, steady),
                   load_items=1000, window_start=datetime(2026, 11, 30, tzinfo=timezone.utc), deadline=None,
                   hours_available=None, max_lots=2, catalog_path=catalog.path, chosen=None,
                   motivation=("no choice in this test",), cross_pairs=(), what_would_change=(), path=())
    md = decision_markdown(c)
    a_section = md.split("### A rtx-4090 / batch 8, compile", 1)[1].split("###", 1)[0]
    b_section = md.split("### B rtx-4090 / batch 8, compile", 1)[1].split("##", 1)[0]
    assert "**Not steady-state:** " + CAVEAT in a_section
    assert "Not steady-state" not in b_section


def test_setup_sums_every_set_up_phase_of_the_record_engine_start_and_compile_included():
    ev = evidence("vllm")
    # a vLLM pass: 1 s start-up + 2 s tokenizer + 61.9 s engine start + 3 s warm-up; a compile phase of
    # 4 s on another pass; the measured window and after are not set-up
    cells = [dict(r.cells, engine_start_s="61.9", evaluation_s="50.0", writing_s="9.0") for r in ev.raw_rows]
    cells[0]["compile_s"] = "4.0"
    ev = Evidence(path=None, name="vllm", manifest=ev.manifest, variants=(), raw_rows=raw_rows_of(cells),
                  campaign=WrittenSections(), lock=CampaignLock(), corpus_card=None, files_checked=1, config=ev.config)
    p = project(ev, variant(0), load_catalog(None), 1000, None, 2)
    assert p.setup_s == 1.0 + 2.0 + 61.9 + 4.0 + 3.0
    assert projection_row(p)["setup_s"] == p.setup_s


def test_an_archive_without_its_catalog_is_priced_at_the_comparisons_saying_why():
    """An archive whose catalog file was missing when its report was built (its manifest says so):
    its package is shown at the comparison catalog's price, with the manifest's reason."""
    import dataclasses

    import msgspec

    catalog = load_catalog(None)
    ev = evidence("a")
    gone = ManifestCatalog(missing="not found when the report was built")
    ev = dataclasses.replace(ev, manifest=msgspec.structs.replace(ev.manifest, catalog=gone))
    p = project(ev, variant(0), catalog, 1000, None, 2)
    assert p.price_note == ("the archive holds no catalog (its catalog file was not found when the report was "
                            "built): its package is shown at the comparison catalog's price (version "
                            f"{catalog.version})")
