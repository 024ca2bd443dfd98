"""Utilization: the FLOP formula against torch's own FLOP counter on the real demo model,
and the probe's figures in every row of a real two-series campaign (batch, then bucketing)."""

from __future__ import annotations

import pytest
from conftest import cut_corpus, write_campaign

from lab.passes.probe import forward_flop, matmul_ceiling, model_shape

pytestmark = pytest.mark.slow


def test_flop_formula_matches_torch_flop_counter_on_the_demo_model(model_dir):
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoModelForSequenceClassification

    # eager attention: torch's counter sees its matmuls (it does not count the CPU SDPA kernel)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, attn_implementation="eager").eval()
    cfg = model.config
    h, inter, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    by_hand = layers * (4 * h * h + 2 * h * inter) + h * h + h * cfg.num_labels  # + pooler, head
    shape = model_shape(model)
    assert shape == {"matmul_parameters": by_hand, "n_layers": layers, "d_attn": h}
    for b, t in ((1, 37), (4, 128), (8, 256)):
        ids = torch.randint(1000, 2000, (b, t))
        with torch.inference_mode(), FlopCounterMode(display=False) as counter:
            model(input_ids=ids, attention_mask=torch.ones_like(ids))
        ours = forward_flop(shape, b * t, b * t * t)
        # the formula counts pooler and head at every position; they run once per sequence
        head_overcount = 2 * (h * h + h * cfg.num_labels) * (b * t - b)
        assert ours - head_overcount == counter.get_total_flops(), (b, t)
        assert head_overcount / ours < 0.02


def test_ceiling_probe_reports_a_dtype_and_a_rate():
    fp32 = matmul_ceiling("cpu", "fp32", size=128, rounds=2, min_round_s=0.01)
    assert fp32["probe_dtype"] == "fp32" and fp32["probe_size"] == 128
    assert fp32["ceiling_flop_per_s"] > 1e6  # any CPU multiplies 128x128 matrices faster than 1 MFLOP/s


SERIES = """
[[series]]
name = "bucketing"
factor = "bucketing"
values = [false, true]
batch_size = 8
"""


def test_bucketing_series_rows_carry_utilization(tmp_path, model_dir):
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock
    from lab.report.build import build_report

    f = write_campaign(tmp_path, model_dir, cut_corpus(tmp_path / "c.jsonl", 6, 4, 2), values=(1, 8))
    f.write_text(f.read_text() + SERIES)
    proto = load_protocol(f)
    assert [(v.name, v.series) for v in proto.variants] == [
        ("batch/batch_size=1", "batch"), ("batch/batch_size=8", "batch+bucketing"),
        ("bucketing/bucketing=True", "bucketing")]
    lock(proto)
    orch = Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher())
    assert orch.run() == "finished"
    r = build_report(orch.dir)
    rows = {row["variant_name"]: row for row in
            __import__("lab.report.raw_table", fromlist=["raw_rows"]).raw_rows(
                orch.journal.attempts(), proto.name, 1, orch.dir)}
    plain, bucketed = rows["batch/batch_size=8"], rows["bucketing/bucketing=True"]
    assert plain["real_tokens"] == bucketed["real_tokens"]
    assert bucketed["padded_tokens"] < plain["padded_tokens"]
    assert bucketed["agreement_with_reference"] == 1.0 and bucketed["corpus_accepted"]
    for row in rows.values():
        assert row["status"] == "ok" and row["probe_s"] > 0
        assert row["model_flop"] > 0 and row["ceiling_flop_per_s"] > 0
        assert row["achieved_flop_per_s"] == pytest.approx(row["model_flop"] / row["measured_s"])
        assert row["utilization"] == pytest.approx(row["achieved_flop_per_s"] / row["ceiling_flop_per_s"])
        # utilization is the ratio of two timings taken at different moments (measured window,
        # then the ceiling probe): on a loaded CI machine the probe can be slowed (another pass's
        # threads on the 2 cores for all its rounds) while the window was not, inflating the
        # ratio by that slowdown (2-3x). Measured here: 0.35-0.56. The bound 5 holds under such
        # load and still fails a wrong unit (a window in ms: x1000; a ceiling in GFLOP/s: x1e9);
        # the FLOP count it rests on is checked exactly, without timings, below.
        assert 0 < row["utilization"] < 5
        assert "no duration for compile" not in row["notes"]
    assert bucketed["model_flop"] < plain["model_flop"]  # fewer padded positions, less work
    # model FLOPs = 2 N sum(B*T) + 4 L d_attn sum(B*T^2) with 1 <= T <= max_length (lab.passes.probe)
    by_pass = {row["pass_id"]: row for row in rows.values()}
    for a in orch.journal.attempts():
        res, row = a.result, by_pass[a.pass_id]
        matmul = 2 * res.matmul_parameters * row["padded_tokens"]
        attention = 4 * res.n_layers * res.d_attn * row["padded_tokens"]
        assert matmul + attention <= row["model_flop"] <= matmul + attention * 128
    csv = (orch.dir / "report" / "raw_table.csv").read_text().splitlines()[0].split(",")
    assert {"achieved_flop_per_s", "ceiling_flop_per_s", "utilization", "probe_s"} <= set(csv)
    summary = {v.variant_name: v for v in r["summary"]}
    for v in summary.values():
        assert v.utilization_median is not None and v.achieved_flop_per_s_median is not None
        assert v.ceiling_flop_per_s_median is not None and v.recompiles_measured_max is None  # not compiled
    note = (orch.dir / "report" / "decision_note.md").read_text()
    assert "series bucketing" in note and "series batch+bucketing" in note
    assert note.count("- utilization: achieved ") == 3 and "GFLOP/s, matmul ceiling " in note
    assert "(medians of passes ok)" in note
    html = (orch.dir / "report" / "report.html").read_text()
    assert "utilization: achieved " in html and "ceiling_flop_per_s" in html  # note and raw table
