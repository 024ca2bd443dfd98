"""The rules behind what a pass observes of its inputs and host (issue 31 part 2), without a model:
the one list of recorded environment variables, the ISA flags read from /proc/cpuinfo, the
padding side read from a mask, the checkpoint's generation fields the lab sets aside, and old
records decoding without the new fields."""

from __future__ import annotations

import json

from lab.facts.environment import ENV_VARIABLES, RECORDED_NAMES
from lab.facts.host import isa_flags
from lab.inputs.manifest import ENV_ALLOWED


def test_every_recorded_variable_is_listed_once_with_its_library_effect_and_source():
    names = [v.name for v in ENV_VARIABLES]
    assert len(names) == len(set(names)) and tuple(names) == RECORDED_NAMES == ENV_ALLOWED
    effects = {"numerics", "speed", "memory", "devices", "files"}
    for v in ENV_VARIABLES:
        assert v.library and v.source.startswith("https://"), v
        assert set(v.changes.split(", ")) <= effects, v
    for needed in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR", "OMP_NUM_THREADS",
                   "CUBLAS_WORKSPACE_CONFIG", "NCCL_ALGO", "HIP_VISIBLE_DEVICES",
                   "VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND"):
        assert needed in names


def test_the_isa_flags_are_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512_bf16 amx_tile\n\n"
                    "processor\t: 1\nflags\t\t: fpu\n")
    assert isa_flags(info) == ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile"]
    assert isa_flags(tmp_path / "absent") == []


def test_the_padding_side_is_read_from_the_mask():
    import torch

    from lab.passes.inference import NO_PADDING_SEEN, WindowResult, padding_sides

    assert padding_sides(torch.tensor([[1, 1, 1], [1, 1, 0]])) == {"right"}
    assert padding_sides(torch.tensor([[1, 1, 1], [0, 1, 1]])) == {"left"}
    assert padding_sides(torch.tensor([[1, 1], [1, 1]])) == set()
    win = WindowResult([], [], [], [], 0, 0, 0, 0, 0)
    assert win.padding_side() == NO_PADDING_SEEN
    win.count_padding_side(torch.tensor([[0, 1], [1, 1]]))
    win.count_padding_side(torch.tensor([[1, 0], [1, 1]]))
    assert win.padding_side() == "left and right"


def test_the_checkpoint_generation_fields_the_lab_sets_aside_are_named():
    from transformers import GenerationConfig

    from lab.passes.tasks.generation_core import (
        GenerationRule,
        checkpoint_overrides,
        lab_generation_config,
        overrides_line,
    )

    rule = GenerationRule(prompt="{text}\nAnswer:", max_new_tokens=16)
    lab = lab_generation_config(rule, pad_id=0, eos=[2])
    assert lab.repetition_penalty == 1.0 and lab.no_repeat_ngram_size == 0 and not lab.do_sample
    plain = GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0, do_sample=False, max_new_tokens=16)
    assert checkpoint_overrides(plain, lab) == {}
    assert checkpoint_overrides(None, lab) == {}
    bad = GenerationConfig(eos_token_id=2, repetition_penalty=1.8, suppress_tokens=[2], do_sample=True,
                           temperature=0.6)
    found = checkpoint_overrides(bad, lab)
    assert set(found) == {"repetition_penalty", "suppress_tokens", "do_sample", "temperature"}
    assert found["suppress_tokens"] == {"checkpoint": [2], "run": None}
    line = overrides_line(found)
    assert "generation_config.json" in line and "repetition_penalty 1.8" in line and "\n" not in line


def test_records_written_before_the_new_fields_decode():
    from lab.passes.records import decode_result

    old = {"pass_id": "p001", "campaign": "c", "variant": {"batch_size": 8}, "start_time": "t0", "end_time": "t1",
           "status": "ok", "error": "", "phases_s": {"measured": 1.0}, "items_total": 4, "items_completed": 4,
           "predictions_path": "predictions.jsonl", "exit_code": 0,
           "observed": {"padding": "longest", "batch_size": 8}, "generation": {"rule_sha256": "x"}}
    res = decode_result(json.dumps(old))
    assert res.observed is not None and res.observed.padding_side is None and res.observed.cpu_capability is None
    assert res.observed.input_ids_sha256 is None
    assert res.to_json()["observed"] == old["observed"]  # nothing added when written back
