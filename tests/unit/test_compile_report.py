"""compile = true in the report: recompilation inside the measured window is stated next to the
durations (raw table notes, summary, Results screen, decision note), compile cells of eager rows
say why they are empty. Synthetic journal attempts (the runner's result.json keys), no compile."""
from __future__ import annotations

import msgspec

from lab.inputs.variants import Variant
from lab.passes.records import Attempt
from lab.report.decision_note import decision_note
from lab.report.raw_table import NO_COMPILE, raw_rows, raw_table
from lab.report.summary import summarize

CAMPAIGN = {"name": "c", "question": "q", "deadline": None, "deliverables": 1}
PRICING = {"catalog_path": None, "gpu": "rtx-4090", "days": 7, "lots": 1,
           "window_start": None, "window_end": None, "tz": None}


def attempt(seq: int, compile_: bool, measured_s: float, **compile_result) -> Attempt:
    v = Variant(batch_size=8, device="cpu", compile=compile_)
    phases = {"startup": 1.0, "model_load": 1.0, "warmup": 2.0, "measured": measured_s, "probe": 0.1,
              "evaluation": 0.0, "writing": 0.0, **({"compile": 37.2} if compile_ else {})}
    result = {"pass_id": f"p{seq}", "campaign": "c", "variant": v.to_json(), "start_time": "", "end_time": "",
              "status": "ok", "error": "", "items_total": 30, "items_completed": 30,
              "predictions_path": "predictions.jsonl", "exit_code": 0,
              "phases_s": phases, "items_per_s": 30 / measured_s, "utilization": 0.084,
              "achieved_flop_per_s": 1e9, "ceiling_flop_per_s": 1.2e10,
              "observed": {"padding": "longest"}, **compile_result}
    validation = {"expected_ids": 30, "observed_ids": 30, "duplicate_ids": 0, "missing_ids": 0, "extra_ids": 0,
                  "ids_match": True, "format_ok": True, "coverage": {}, "coverage_ok": True,
                  "metric_name": "accuracy", "metric": 0.9, "metric_by_bucket": {}, "threshold": 0.5,
                  "threshold_ok": True, "reference_metric": 0.9, "gap_to_reference": 0.0,
                  "agreement_with_reference": 1.0, "tolerance": 0.02, "tolerance_ok": True,
                  "corpus_accepted": True}
    return msgspec.convert({"pass_id": f"p{seq}", "variant_id": v.variant_id,
                            "variant": {**v.to_json(), "label": v.label}, "result": result,
                            "validation": validation, "notes": "", "repetition": 0,
                            "position": seq, "seq": seq, "attempt": 1, "launcher": "local", "start_time": "",
                            "end_time": "", "status": "ok", "exit_code": 0, "items_total": 30,
                            "items_completed": 30}, Attempt)


def rows(tmp_path, recompiles_measured: int) -> list[dict]:
    return raw_rows([attempt(0, False, 5.3),
                     attempt(1, True, 20.9, compile_shapes=[[8, "dynamic"], [6, "dynamic"]], compile_frames=2,
                             recompiles_warmup=1, recompiles_measured=recompiles_measured,
                             graph_breaks_measured=0)], "c", 1, tmp_path)


def test_recompilation_in_the_window_is_stated_next_to_the_durations(tmp_path):
    from tui.screens.results_screen import render_summary

    r = rows(tmp_path, recompiles_measured=1)
    eager, compiled = r
    assert NO_COMPILE in eager["notes"] and eager["compile_s"] is None and eager["recompiles_measured"] is None
    assert NO_COMPILE not in compiled["notes"]
    assert "measured window includes recompilation (1 frame(s) compiled): measured_s, items_per_s and " \
           "utilization are not steady-state" in compiled["notes"]
    assert "warm-up compiled 1 frame(s): warmup_s includes compile time that compile_s does not" in compiled["notes"]
    table = raw_table(r)
    assert table.loc[1, "compile_shapes"] == "8xdynamic; 6xdynamic"
    assert table.loc[1, "recompiles_warmup"] == 1 and table.loc[1, "compile_frames"] == 2
    s_eager, s_comp = summarize(r)
    assert s_eager.recompiled_passes == 0 and s_eager.durations_caveat() == ""
    assert s_comp.recompiled_passes == 1
    assert s_comp.durations_caveat().startswith("these durations include recompilation")
    screen = render_summary([s_eager, s_comp]).splitlines()
    at = next(i for i, line in enumerate(screen) if line.startswith("  durations s: 20.900"))
    assert "not steady-state" in screen[at + 1] and "include recompilation" in screen[at + 1]
    assert sum("include recompilation" in line for line in screen) == 1  # eager: no caveat
    note = decision_note([s_eager, s_comp], CAMPAIGN, PRICING)
    comp = note[note.index(f"### {s_comp.label}"):note.index("## Excluded")]
    line = next(x for x in comp.splitlines() if x.startswith("- Raw durations"))
    assert "20.900. **Not steady-state:** these durations include recompilation" in line
    eager_section = note[note.index(f"### {s_eager.label}"):note.index(f"### {s_comp.label}")]
    assert "recompilation" not in eager_section
    assert "durations include recompilation in the measured window" in note.split("## Decision")[1]


def test_no_caveat_when_the_window_did_not_recompile(tmp_path):
    r = rows(tmp_path, recompiles_measured=0)
    assert "measured window includes recompilation" not in r[1]["notes"]
    s_comp = summarize(r)[1]
    assert s_comp.recompiled_passes == 0 and s_comp.durations_caveat() == ""
    assert "no recompilation in the measured window" in s_comp.utilization_text()
    assert "not steady-state" not in decision_note(summarize(r), CAMPAIGN, PRICING)


def test_custom_entry_counts_are_noted_whatever_compile_declares(tmp_path):
    """A custom entry's pass (``compile_phase`` set by the sequence, compile declared or not): the
    reason the lab has no compile phase, then the frames its own code compiled in each phase."""
    from lab.passes.compile import NO_LAB_COMPILE

    counts = {"compile_phase": NO_LAB_COMPILE, "compile_frames": 1, "recompiles_warmup": 2,
              "recompiles_measured": 1, "graph_breaks_measured": 0}
    eager, compiled = raw_rows([attempt(0, False, 5.3, **counts), attempt(1, True, 5.3, **counts)], "c", 1, tmp_path)
    for r in (eager, compiled):
        assert NO_COMPILE not in r["notes"] and NO_LAB_COMPILE in r["notes"]
        assert "the entry's build compiled 1 frame(s): model_load_s includes compile time" in r["notes"]
        assert "warm-up compiled 2 frame(s): warmup_s includes compile time |" in r["notes"] + " |"
        assert "measured window includes recompilation (1 frame(s) compiled)" in r["notes"]
        assert "no duration for compile" not in r["notes"]
    quiet = raw_rows([attempt(0, False, 5.3, **{**counts, "compile_frames": 0, "recompiles_warmup": 0,
                                               "recompiles_measured": 0})], "c", 1, tmp_path)[0]
    assert NO_LAB_COMPILE in quiet["notes"] and "compiled" not in quiet["notes"].replace(NO_LAB_COMPILE, "")
