"""A server pass's figures re-derived from its per-request records (lab.engines.serving_figures),
the mapping of the load generator's result back to corpus ids (lab.engines.vllm_load.read_records),
the replay of its arrival schedule (lab.engines.vllm_load_worker.replay_schedule) and the
arguments handed to the server and the generator. No vLLM: records are built by hand; the vLLM
tier (tests/vllm/test_server_campaign.py) checks the same functions against the real tool."""

from __future__ import annotations

import itertools
import math

import msgspec
import numpy as np
import pytest

from lab.engines.serving_figures import (
    Bound,
    Objective,
    ServedRequest,
    figures,
    meets,
    percentile,
    percentiles,
    plain,
    tool_percentiles,
    verdict,
)
from lab.engines.vllm import VllmSettings
from lab.engines.vllm_load import LoadGenError, LoadRecord, LoadSettings, ToolResult, read_records, tool_args
from lab.engines.vllm_load_worker import POOLING_BACKEND, answer_of, replay_schedule
from lab.engines.vllm_server import Started, server_args
from lab.facts.errors import UserError


def req(i: str, ttft: float, e2el: float, tokens: int, itl=(), error: str = "", scheduled=None, dispatched=None):
    return ServedRequest(id=i, sent_s=0.0, ttft_s=ttft, e2el_s=e2el, itl_s=tuple(itl), output_text="x",
                         output_tokens=tokens, input_tokens=5, error=error, scheduled_s=scheduled,
                         dispatched_s=dispatched)


RECORDS = [req("a", 0.10, 0.50, 5, (0.1, 0.1, 0.1, 0.1)), req("b", 0.20, 0.20, 1),
           req("c", 0.40, 1.30, 4, (0.3, 0.3, 0.3)), req("d", 0.0, 0.0, 0, error="HTTP 500")]


def tool_like(records, ps=(50.0, 90.0, 99.0)) -> dict:
    """What `vllm bench serve` computes (its calculate_metrics, written out here with its own
    rules: answered requests only, TPOT for more than one token, ITL pooled, ms)."""
    ok = [r for r in records if not r.error]
    vals = {"ttft": [r.ttft_s for r in ok], "e2el": [r.e2el_s for r in ok],
            "tpot": [(r.e2el_s - r.ttft_s) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1],
            "itl": [g for r in ok for g in r.itl_s]}
    return {f"p{int(p)}_{m}_ms": float(np.percentile(v, p)) * 1000 for m, v in vals.items() for p in ps}


def test_percentiles_follow_the_generators_definitions():
    assert percentile(RECORDS, "ttft", 50) == pytest.approx(0.20)  # the failed request is not a figure
    assert percentile(RECORDS, "e2el", 99) == pytest.approx(float(np.percentile([0.5, 0.2, 1.3], 99)))
    # TPOT: (E2E - TTFT) / (tokens - 1), only requests with more than one token
    assert percentile(RECORDS, "tpot", 50) == pytest.approx(float(np.median([0.1, 0.3])))
    # ITL: every gap of every answered request pooled (7 gaps), not a mean per request
    assert percentile(RECORDS, "itl", 50) == pytest.approx(0.1)
    assert percentile([RECORDS[3]], "ttft", 50) is None


def test_the_rederived_table_equals_the_tools_and_a_forged_percentile_differs():
    tool = tool_like(RECORDS)
    mine, theirs = percentiles(RECORDS), tool_percentiles(tool)
    assert mine.keys() == theirs.keys()
    for m in mine:
        for p in mine[m]:
            assert mine[m][p] == pytest.approx(theirs[m][p], rel=1e-12), (m, p)
    forged = {**tool, "p99_ttft_ms": tool["p99_ttft_ms"] * 0.5}  # a flattering p99 written into the result
    differing = [(m, p) for m in mine for p in mine[m]
                 if mine[m][p] != pytest.approx(tool_percentiles(forged)[m][p], rel=1e-12)]
    assert differing == [("ttft", 99.0)]


def test_goodput_counts_requests_meeting_every_bound_and_never_a_failed_one():
    obj = Objective(bounds=(Bound("ttft", 99, 0.3), Bound("tpot", 99, 0.2)), share=0.5)
    assert [meets(r, obj) for r in RECORDS] == [True, True, False, False]  # b: one token, TPOT 0
    f = figures(RECORDS, duration_s=2.0, offered_rate=2.0, objective=obj)
    assert (f.offered, f.answered, f.failed, f.good) == (4, 3, 1, 2)
    assert f.goodput == pytest.approx(1.0) and f.achieved_rate == pytest.approx(1.5)
    assert f.output_tokens_per_s == pytest.approx((5 + 1 + 4) / 2.0)
    assert f.lag_s is None and f.dispatch_rate is None  # no schedule recorded: said, not guessed


def test_the_verdict_names_the_part_that_fails():
    ok = verdict(RECORDS, Objective(bounds=(Bound("e2el", 50, 1.0),), share=0.5))
    assert ok.holds and not ok.failed and len(ok.checks) == 2
    slow = verdict(RECORDS, Objective(bounds=(Bound("ttft", 99, 0.3),), share=0.5))
    assert not slow.holds and slow.failed == (slow.checks[0],) and "ttft p99" in slow.failed[0]
    few = verdict(RECORDS, Objective(bounds=(Bound("e2el", 50, 1.0),), share=0.9))
    assert not few.holds and "2 of 4 requests meet every bound" in few.failed[0]


def test_lag_and_dispatch_rate_come_from_the_schedule():
    recs = [req(str(k), 0.1, 0.2, 2, (0.1,), scheduled=k * 0.5, dispatched=k * 0.5 + 0.01 * k) for k in range(5)]
    f = figures(recs, duration_s=3.0, offered_rate=2.0)
    assert f.lag_s is not None and f.lag_s["max"] == pytest.approx(0.04)
    assert f.dispatch_rate == pytest.approx(4 / 2.04)


@pytest.mark.parametrize("make, words", [
    (lambda: Bound("itl", 99, 1.0), "objective metric 'itl'"),
    (lambda: Bound("ttft", 0, 1.0), "percentile"),
    (lambda: Bound("ttft", 99, 0), "bound"),
    (lambda: Objective(bounds=(), share=0.9), "at least one bound"),
    (lambda: Objective(bounds=(Bound("ttft", 99, 1), Bound("ttft", 50, 1)), share=0.9), "each metric once"),
    (lambda: Objective(bounds=(Bound("ttft", 99, 1),), share=1.5), "share"),
    (lambda: LoadSettings(rate=0, seed=0), "request rate"),
])
def test_a_wrong_objective_or_load_is_refused_in_one_line(make, words):
    with pytest.raises(UserError, match=words) as e:
        make()
    assert "\n" not in str(e.value)


def tool_result(n: int, **over) -> ToolResult:
    base = dict(duration=2.0, completed=n, failed=0, request_throughput=n / 2.0, output_throughput=1.0,
                input_lens=[5 + k for k in range(n)], output_lens=[3] * n, ttfts=[0.1 * (k + 1) for k in range(n)],
                itls=[[0.05, 0.05]] * n, latencies=[0.5] * n, start_times=[100.0 + k for k in range(n)],
                generated_texts=[f"out{k}" for k in range(n)], errors=[""] * n)
    return ToolResult(**{**base, **over})


def load_record(ids, **over) -> LoadRecord:
    base = dict(ids=list(ids), dispatched_s=[float(k) for k in range(len(ids))], scheduled_s=None,
                schedule_note="", origin_perf=99.5, cpu_s=1.0, wall_s=3.0, result_file="r.json")
    return LoadRecord(**{**base, **over})


def test_each_result_maps_back_to_the_id_sent_at_its_position():
    ids = ["x9", "a1", "m4"]
    recs = read_records(tool_result(3), load_record(ids), ids)
    assert [r.id for r in recs] == ids
    assert [r.output_text for r in recs] == ["out0", "out1", "out2"]
    assert [r.input_tokens for r in recs] == [5, 6, 7]
    assert [r.sent_s for r in recs] == pytest.approx([0.5, 1.5, 2.5])  # start_times - the schedule's origin
    with pytest.raises(LoadGenError, match="not in the order sent"):
        read_records(tool_result(3), load_record(["a1", "x9", "m4"]), ids)
    with pytest.raises(LoadGenError, match="lists"):
        read_records(tool_result(2), load_record(ids), ids)


def test_a_request_without_a_first_token_is_failed_even_without_error_text():
    recs = read_records(tool_result(2, ttfts=[0.1, 0.0], errors=["", ""]), load_record(["a", "b"]), ["a", "b"])
    assert recs[0].answered and not recs[1].answered and "no answer" in recs[1].error


def test_a_pooled_run_keeps_each_answer_and_a_missing_one_fails_its_request():
    ids = ["a", "b", "c"]
    pooled = dict(output_lens=[0] * 3, generated_texts=[""] * 3, itls=[[]] * 3)
    recs = read_records(tool_result(3, **pooled), load_record(ids, answers={"a": [0.1, 0.9], "b": [0.7, 0.3]}), ids)
    assert [r.answer for r in recs[:2]] == [(0.1, 0.9), (0.7, 0.3)] and recs[0].answered and recs[1].answered
    assert not recs[2].answered and "kept no pooled answer" in recs[2].error
    # a completions run keeps no answers: its answer is the text
    assert read_records(tool_result(1), load_record(["a"]), ["a"])[0].answer is None
    assert answer_of({"data": [{"embedding": [1, 2]}]}) == [1.0, 2.0]
    assert answer_of({"data": [{"label": "x", "probs": [0.25, 0.75]}]}) == [0.25, 0.75]
    # a non-finite value the server wrote as null reaches the lab as NaN (its non-finite check), not a failure
    nan = answer_of({"data": [{"embedding": [1, None]}]})
    assert nan[0] == 1.0 and np.isnan(nan[1])


def test_a_pooled_endpoint_is_loaded_through_the_workers_backend_without_sampling_settings():
    started = Started(url="http://127.0.0.1:8123", port=8123, pid=1, setup_s=1.0)
    for endpoint in ("/classify", "/v1/embeddings"):
        s = LoadSettings(rate=2.0, seed=3, endpoint=endpoint,
                         objective=Objective(bounds=(Bound("e2el", 99, 0.5),), share=0.9))
        t = tool_args(started, "/m", 10, s, __import__("pathlib").Path("/o"))
        assert s.pooled and t[t.index("--backend") + 1] == POOLING_BACKEND and t[t.index("--endpoint") + 1] == endpoint
        assert "--temperature" not in t and "--extra-body" not in t  # the tool refuses them off completions
        assert t[t.index("--goodput") + 1] == "e2el:500.0"
    with pytest.raises(UserError, match="endpoint '/v1/chat' is not one a server pass loads"):
        LoadSettings(rate=1.0, seed=1, endpoint="/v1/chat")


def test_a_servers_config_gives_the_declared_settings_it_runs():
    """/server_info's VllmConfig (its JSON shape as vLLM 0.32 gives it) read into the keys the pass
    compares with what was declared (lab.passes.tasks.server_job.ServerJob.observe)."""
    from lab.engines.vllm_server import config_facts

    cfg = {"scheduler_config": {"max_num_seqs": 4, "max_num_batched_tokens": 576},
           "model_config": {"dtype": "torch.float32", "enforce_eager": True, "max_model_len": 144},
           "cache_config": {"gpu_memory_utilization": 0.1, "enable_prefix_caching": False}, "instance_id": "x"}
    assert config_facts(cfg) == {"max_num_seqs": 4, "max_num_batched_tokens": 576, "max_model_len": 144,
                                 "dtype": "float32", "enforce_eager": True, "gpu_memory_utilization": 0.1,
                                 "enable_prefix_caching": False}
    pooled = {"model_config": {"pooler_config": {"pooling_type": "MEAN", "use_activation": True, "task": "embed"}}}
    assert config_facts(pooled) == {"pooling": {"pooling_type": "MEAN", "use_activation": "True"}}
    from lab.engines.vllm import pooling_mismatch

    assert pooling_mismatch("mean", True, config_facts(pooled)["pooling"]) == ""
    assert "vLLM pools MEAN" in pooling_mismatch("cls", True, config_facts(pooled)["pooling"])
    odd = {"scheduler_config": {"max_num_seqs": "4", "max_num_batched_tokens": True}, "model_config": None}
    assert config_facts(odd) == {}  # a value of another type is not claimed


def test_the_replayed_schedule_is_the_tools_formula():
    np.random.seed(7)
    state = np.random.get_state()
    times, after = replay_schedule(state, 50, 4.0, 1.0)
    assert times[-1] == pytest.approx(50 / 4.0) and all(b > a for a, b in itertools.pairwise(times))
    for _ in range(50):  # the tool draws one gamma per request from the global generator
        np.random.gamma(shape=1.0, scale=0.25)
    assert np.array_equal(after[1], np.random.get_state()[1]) and after[2] == np.random.get_state()[2]
    even, _ = replay_schedule(state, 4, 2.0, math.inf)
    assert even == pytest.approx([0.5, 1.0, 1.5, 2.0])


def test_the_server_and_generator_are_asked_for_what_is_declared():
    s = VllmSettings(model="/m", dtype="float32", max_model_len=144, enforce_eager=True, gpu_memory_utilization=0.1,
                     max_num_seqs=4, max_num_batched_tokens=512, runner="generate", prefix_caching=False)
    a = server_args(s, 8123)
    assert a[a.index("--max-num-batched-tokens") + 1] == "512"
    assert a[a.index("--host") + 1] == "127.0.0.1" and a[a.index("--port") + 1] == "8123"
    assert "--enforce-eager" in a and a[a.index("--max-num-seqs") + 1] == "4"
    assert a[a.index("--generation-config") + 1] == "vllm"  # the checkpoint's decoding defaults not applied
    obj = Objective(bounds=(Bound("ttft", 99, 0.25),), share=0.9)
    t = tool_args(Started(url="http://127.0.0.1:8123", port=8123, pid=1, setup_s=1.0), "/m", 10,
                  LoadSettings(rate=2.0, seed=3, max_concurrency=8, warmups=2, stop=("\n",), objective=obj),
                  __import__("pathlib").Path("/o"))
    assert t[t.index("--goodput") + 1] == "ttft:250.0" and t[t.index("--max-concurrency") + 1] == "8"
    assert t[t.index("--request-rate") + 1] == "2.0" and t[t.index("--temperature") + 1] == "0"
    assert "--save-detailed" in t and t[t.index("--extra-body") + 1] == '{"stop": ["\\n"]}'


def test_the_scripts_run_in_the_vllm_venv_import_no_lab_module():
    """They run with the vLLM venv's python, whose transformers is not the lab's: a `lab` import
    there would fail at a pass's start (or import the lab's client as `vllm`)."""
    import ast
    from pathlib import Path

    import lab.engines

    folder = Path(lab.engines.__file__).parent
    for name in ("vllm_worker.py", "vllm_probe.py", "vllm_server_main.py", "vllm_load_worker.py"):
        tree = ast.parse((folder / name).read_text(encoding="utf-8"))
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [m for m in names if m == "lab" or m.startswith("lab.")], name


def test_a_process_sampled_as_it_exits_counts_its_cpu_but_no_resident_set():
    """A server's tree may hold a process that has exited and not been reaped (a zombie) when it is
    sampled: its resident set reads 0, which is no reading of its memory (CI once failed on it)."""
    import os
    import subprocess
    import time

    from lab.engines.vllm_server import TreeWatch

    child = subprocess.Popen(["true"])  # exits at once; left unreaped: a zombie of this process
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open(f"/proc/{child.pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    break
            time.sleep(0.01)
        watch = TreeWatch(os.getpid())
        watch.sample()
        usage = watch.stop()
        assert child.pid in watch.cpu and child.pid not in usage.peak_rss_bytes
        assert usage.peak_rss_bytes[os.getpid()] > 0 and usage.processes >= 2
    finally:
        child.wait()


def test_figures_written_as_json_read_back_equal():
    """result.json's "serving" and served.jsonl hold plain() values; reading them back (as the
    report and verify do) gives the same records, percentile keys included."""
    import json

    objective = Objective(bounds=(Bound("ttft", 99.0, 0.3),), share=0.5)
    f = figures(RECORDS, 2.0, 2.0, objective)
    text = json.dumps(plain(f))
    assert '"99.0"' in text
    assert msgspec.convert(json.loads(text), type(f), strict=False) == f
    assert [msgspec.convert(json.loads(json.dumps(plain(r))), ServedRequest) for r in RECORDS] == RECORDS
