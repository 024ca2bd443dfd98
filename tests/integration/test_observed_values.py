"""Every declared variant value is applied, and the raw table records what actually ran; truncation
is visible per item and per bucket (real campaign: demo model, 6-item corpus, real pass processes)."""

from __future__ import annotations

import csv
import json

import pytest
from conftest import cut_corpus, write_campaign


@pytest.fixture(scope="module")
def attention_campaign(model_dir, tmp_path_factory):
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock
    from lab.report.build import build_report

    d = tmp_path_factory.mktemp("attention")
    corpus = cut_corpus(d / "corpus.jsonl", 2, 2, 2)
    f = write_campaign(d, model_dir, corpus, name="attn", max_length=32)
    f.write_text(f.read_text().replace('factor = "batch_size"\nvalues = [1, 8]',
                                       'factor = "attention"\nvalues = ["eager", "sdpa", "flash_attention_2"]')
                 .replace('reference_variant = "batch/batch_size=1"', 'reference_variant = "batch/attention=eager"'))
    import lab.orchestration.preflight as preflight

    with pytest.MonkeyPatch.context() as mp:  # flash_attention_2 is refused at lock on this host
        # (lab.orchestration.preflight.check_attention); a lock made where the kernel exists but passes that run
        # where it does not must still fail as rows with the reason
        mp.setattr(preflight, "check_attention", lambda proto, cfg: preflight.Check("attention", True, "test"))
        lock(load_protocol(f))
    orch = Orchestrator.prepare(f, d / "runs", LocalLauncher())
    assert orch.run() == "finished"
    build_report(orch.dir)
    with open(orch.dir / "report" / "raw_table.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return orch, {r["attention"]: r for r in rows}


def test_attention_is_applied_and_observed(attention_campaign):
    _, rows = attention_campaign
    for name in ("eager", "sdpa"):
        r = rows[name]
        assert r["status"] == "ok" and r["observed_attention"] == name, r
        assert (r["observed_dtype"], r["observed_device"]) == ("float32", "cpu")
        assert r["observed_threads"] == r["observed_threads_declared"] == "1"
        assert r["observed_padding"].startswith("longest") and r["observed_bucketing"].startswith("corpus order")
        assert r["observed_compile"] == "False" and r["observed_quantization"] == "none"
        assert int(r["observed_max_tokens"]) <= int(r["max_length"]) == 32
        assert r["observed_batch_size"] == r["batch_size"] == "1"  # the batch dimension the model received
    flash = rows["flash_attention_2"]  # not installed on this host: a failure row with the reason
    assert flash["status"] == "error" and "FlashAttention2" in flash["notes"]
    assert flash["corpus_accepted"] == "False" and flash["observed_attention"] == ""


def test_truncation_is_visible_per_item_per_bucket_and_in_the_decision_note(attention_campaign):
    orch, rows = attention_campaign
    r = rows["eager"]
    preds = [json.loads(x) for x in (orch.dir / r["predictions_path"]).read_text().splitlines()]
    corpus = {x["id"]: x for x in map(json.loads, orch.proto.corpus_path.read_text().splitlines())}
    assert all({"truncated", "tokens_kept", "tokens_total"} <= set(p) for p in preds)
    for p in preds:
        assert p["tokens_kept"] <= 32 and p["truncated"] == (p["tokens_total"] > p["tokens_kept"])
        assert p["tokens_total"] == corpus[p["id"]]["n_tokens"] + 2  # [CLS] and [SEP]
    long_ids = [i for i, x in corpus.items() if x["bucket"] == "long"]
    assert all(p["truncated"] for p in preds if p["id"] in long_ids)
    assert float(r["truncated_long"]) == 1.0 and int(r["n_truncated"]) >= 2
    note = (orch.dir / "report" / "decision_note.md").read_text()
    assert "Items truncated at max_length 32" in note and "long 100%" in note
    assert "The long bucket was judged on truncated text" in note


def test_a_declared_value_the_model_contradicts_is_refused(model_dir):
    from dataclasses import replace

    from lab.inputs.variants import Variant
    from lab.passes.inference import load_model
    from lab.passes.observed import NotHonoured, observe_model, require_honoured

    _, model = load_model(str(model_dir), "fp32", "cpu", attention="eager")
    seen = observe_model(model, 0)
    declared = Variant(attention="eager")
    require_honoured(declared, seen, "cpu")  # what was declared is what loaded
    for field, value, words in (("precision", "bf16", "precision bf16 declared, weights loaded as float32"),
                                ("attention", "sdpa", "attention sdpa declared, the model reports eager")):
        with pytest.raises(NotHonoured, match=words):
            require_honoured(replace(declared, **{field: value}), seen, "cpu")
    with pytest.raises(NotHonoured, match="padding max_length declared, batches padded: longest"):
        require_honoured(replace(declared, padding="max_length"), {**seen, "padding": "longest"}, "cpu")
