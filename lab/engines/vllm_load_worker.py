"""The load generator of a server pass: vLLM's own ``vllm bench serve``, run in the vLLM venv.

Started by lab.engines.vllm_load as ``<venv python> -P vllm_load_worker.py <ready file>``;
imports no ``lab`` module. It imports vLLM's tool first (about half a minute of CPU on a small
host), then writes the ready file (``{"import_s": seconds}``): the lab times that as set-up. Then
it reads job paths from its standard input, one per line, until end of input; for each it runs
the job and writes ``<job path>.done`` (``{"code": 0}``, or ``{"code": 1, "error": one line}``).
``job.json``: ``{"runs": [{"requests": path of a JSONL of {"id", "prompt", "output_tokens"},
"record": path this script writes, "argv": the arguments of ``vllm bench serve``}, ...]}``: one
or more runs of the tool against the same server, in order, in this one process (vLLM's import is
paid once for every job and run it is given: a series of rates, or a server pass's load started
before its measured window). For each run it builds the tool's own parser (``vllm.benchmarks.serve.add_cli_args``),
runs the tool's ``main`` (arrivals, concurrency cap, warm-up, streaming requests, its metrics, its
result file with ``--save-detailed``) and writes that run's record before the next starts; it
changes two things around the tool, both written down here:

- The prompts: the tool's "custom" JSONL dataset reads its file with pandas, which the pinned
  vLLM venv does not hold (``PlaceholderModule``); ``get_samples`` is replaced by a reader of the
  same JSONL (standard library) that keeps the file's order and gives each request its corpus id
  as ``request_id`` (the tool sends it as ``x-request-id``). The tool sends requests, and lists
  its per-request results, in that order; the record below lists the ids in the order the tool
  released them, so the lab can check the mapping rather than assume it.
- The schedule: the tool draws its arrival gaps (gamma with shape ``burstiness``, Poisson at 1,
  rescaled so that the last arrival falls at n / rate) from numpy's global generator inside
  ``get_request`` and records neither the schedule nor its lag. ``get_request`` is wrapped: it
  keeps numpy's state at entry, replays the same draws on a copy of it (``replay_schedule``, the
  tool's formula for a constant rate) and times each release. The replay is checked: the copy's
  state after the draws must equal the global one after the tool's draws, else the schedule is
  written as unknown, with the reason.

- Pooled answers (classification, embedding): the tool's pooling request functions read the
  server's answer and drop it. The backend ``lab-pooling`` (POOLING_BACKEND, registered in the
  tool's table before its parser is built) posts each prompt (the lab's token ids) as
  ``{"model", "input"}`` to the run's endpoint (``/v1/embeddings`` or ``/classify``), times it as
  the tool times a pooled answer (TTFT = end-to-end latency: the answer comes whole), and keeps
  each measured request's answer (the embedding, or the class probabilities) in the record's
  ``answers``. The tool sees it as a completions backend with no output tokens (its result keeps
  per-request send times and errors, which its pooling result does not); no sampling setting is
  sent.
- The prompt lengths: the tool is given UNREPORTED for every prompt rather than a local count, so
  a prompt length in its result is the server's own ``usage.prompt_tokens`` or UNREPORTED.

While a run's measured requests are answered, each one's outcome is appended to ``<record>.live``
(JSONL, flushed per line: ``ok``, ``ttft_s``, ``e2el_s``, ``t_s`` s after the schedule's origin):
the tool's request function is wrapped for that, the warm-up requests (sent before the schedule
starts) are left out. The lab reads it while the run goes on, for progress only; every figure
of the pass comes from the tool's result and the record below.

``record`` (JSON): ``ids`` (released order), ``dispatched_s`` (each release, s after the wrapper's
entry), ``scheduled_s`` (the replayed schedule, same origin; null when unknown) and
``schedule_note``, ``origin_perf`` (that origin on the process's perf_counter, the clock of the
tool's ``start_times``), ``cpu_s`` (this process's CPU seconds, every thread, over the tool's
``main``: tokenizer load, ready check, warm-up and the measured requests; vLLM's import before it
is not counted, nor an earlier run's), ``wall_s`` (its wall seconds, same span), ``result_file``
(the tool's result), ``answers`` (``lab-pooling`` runs: {id: the answer's list of floats}, the
measured requests answered; null otherwise).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

if __name__ in ("__main__", "__mp_main__"):
    # this folder's vllm.py (the lab's client) must not shadow the real vLLM (started with -P too)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]


def replay_schedule(state, n: int, rate: float, burstiness: float):
    """The tool's arrival times (s from its start, cumulative) for ``n`` requests at a constant
    ``rate`` (req/s; inf: all at 0) and ``burstiness``, drawn from numpy ``state`` as the tool
    draws them (vllm.benchmarks.serve.get_request, vLLM 0.32), and the generator's state after the
    draws (for the check)."""
    import numpy as np

    rs = np.random.RandomState()
    rs.set_state(state)
    if rate == float("inf"):
        delays = [0.0] * n
    elif burstiness == float("inf"):
        delays = [1.0 / rate] * n
    else:
        theta = 1.0 / (rate * burstiness)
        delays = [float(rs.gamma(shape=burstiness, scale=theta)) for _ in range(n)]
    times = list(np.cumsum(delays))
    if times and times[-1] != 0:
        factor = (n / rate) / times[-1]
        times = [t * factor for t in times]
    return [float(t) for t in times], rs.get_state()


def same_state(a, b) -> bool:
    import numpy as np

    return a[0] == b[0] and bool(np.array_equal(a[1], b[1])) and tuple(a[2:]) == tuple(b[2:])


def live_request(func, live, rec: dict):
    """The tool's request function ``func``, appending each measured request's outcome to the
    open file ``live`` (one JSON line, flushed) once it is answered or failed; a request sent
    before the schedule's origin (``rec["origin_perf"]``: a warm-up) is not written."""

    async def request(request_func_input, session, pbar=None):
        out = await func(request_func_input=request_func_input, session=session, pbar=pbar)
        origin = rec.get("origin_perf")
        if origin is not None:
            live.write(json.dumps({"ok": bool(out.success and out.ttft > 0), "ttft_s": out.ttft,
                                   "e2el_s": out.latency, "t_s": time.perf_counter() - origin}) + "\n")
            live.flush()
        return out

    return request


POOLING_BACKEND = "lab-pooling"

UNREPORTED = -1
"""Each request's prompt length as the tool is given it: the tool (and ``lab-pooling``) replace it
by the server's ``usage.prompt_tokens``; a request whose answer did not report it keeps this value,
never the lab's own count, so the lab's check of the server's tokenization cannot compare the lab
with itself (lab.passes.tasks.server_job)."""
"""The backend name of :func:`pooling_request` in the tool's table (lab.engines.vllm_load reads it)."""


def answer_of(data: dict) -> list[float]:
    """The pooled answer of one request from the server's JSON: ``data[0].embedding`` (the
    OpenAI embeddings answer) or ``data[0].probs`` (vLLM's ``/classify``). A non-finite value,
    which the server writes as ``null`` (embeddings), becomes NaN so that the lab's non-finite check
    names it (``/classify`` answers HTTP 500 for non-finite logits: a failed request). Raises
    KeyError for neither."""
    item = data["data"][0]
    return [float("nan") if x is None else float(x)
            for x in (item["embedding"] if "embedding" in item else item["probs"])]


def pooling_request(rec: dict):
    """The ``lab-pooling`` request function (module docstring): one pooled answer per request,
    each measured one's answer kept in ``rec["answers"]`` under its request id."""
    from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput

    async def request(request_func_input, session, pbar=None):
        inp = request_func_input
        out = RequestFuncOutput(prompt_len=inp.prompt_len)
        headers = {"Content-Type": "application/json", **(inp.extra_headers or {})}
        if inp.request_id:
            headers["x-request-id"] = inp.request_id
        body = {"model": inp.model_name or inp.model, "input": inp.prompt}
        measured = rec.get("origin_perf") is not None  # the ready check and warm-ups come before it
        out.start_time = start = time.perf_counter()
        try:
            async with session.post(url=inp.api_url, json=body, headers=headers) as response:
                raw = await response.read()
                out.ttft = out.latency = time.perf_counter() - start
                if response.status == 200:
                    data = json.loads(raw)
                    answer = answer_of(data)
                    reported = (data.get("usage") or {}).get("prompt_tokens")
                    out.prompt_len = UNREPORTED if reported is None else int(reported)
                    out.success = True
                    if measured:
                        rec["answers"][inp.request_id] = answer
                else:
                    out.error = f"HTTP {response.status}: {raw[:300].decode('utf-8', 'replace')}"
        except Exception as exc:  # noqa: BLE001 - the tool's rule: a failed request carries its error
            out.success = False
            out.error = f"{type(exc).__name__}: {exc}"
        if pbar:
            pbar.update(1)
        return out

    return request


def run_one(run: dict, serve, parser_of) -> None:
    """One run of the tool's ``main`` (``run``: one entry of the job's ``runs``); writes its record."""
    import numpy as np
    from vllm.benchmarks.datasets import SampleRequest

    rec: dict = {"ids": [], "dispatched_s": [], "scheduled_s": None, "schedule_note": "", "origin_perf": None,
                 "answers": None}
    funcs = dict(serve.ASYNC_REQUEST_FUNCS)
    serve.ASYNC_REQUEST_FUNCS[POOLING_BACKEND] = pooling_request(rec)  # before the parser: one of its choices
    args = parser_of().parse_args(run["argv"])
    if args.backend == POOLING_BACKEND:
        rec["answers"] = {}
    rows = [json.loads(line) for line in Path(run["requests"]).read_text(encoding="utf-8").splitlines() if line.strip()]

    def get_samples(args, tokenizer, **_):  # a prompt is text (completions) or the lab's token ids (pooling)
        return [SampleRequest(prompt=r["prompt"], prompt_len=UNREPORTED, expected_output_len=int(r["output_tokens"]),
                              request_id=str(r["id"])) for r in rows]

    tool_get_request = serve.get_request

    async def get_request(input_requests, request_rate, burstiness=1.0, ramp_up_strategy=None,
                          ramp_up_start_rps=None, ramp_up_end_rps=None, self_timed=False):  # the tool's signature
        state = np.random.get_state()
        origin = time.perf_counter()
        rec["origin_perf"] = origin
        after = None
        async for request, rate in tool_get_request(input_requests, request_rate, burstiness, ramp_up_strategy,
                                                    ramp_up_start_rps, ramp_up_end_rps, self_timed):
            rec["dispatched_s"].append(time.perf_counter() - origin)
            rec["ids"].append(request.request_id)
            if after is None:
                after = np.random.get_state()
            yield request, rate
        if ramp_up_strategy is not None or self_timed:
            rec["schedule_note"] = "not replayed: ramp-up or self-timed arrivals"
            return
        times, replayed = replay_schedule(state, len(input_requests), request_rate, burstiness)
        if after is not None and not same_state(replayed, after):
            rec["schedule_note"] = "not replayed: numpy's state after the tool's draws differs from the replay's"
            return
        rec["scheduled_s"] = times
        rec["schedule_note"] = "replayed from numpy's state at the tool's get_request (checked)"

    serve.get_samples = get_samples
    serve.get_request = get_request
    live = open(f"{run['record']}.live", "w", encoding="utf-8")  # noqa: SIM115 - closed below, after the run
    for name, func in list(serve.ASYNC_REQUEST_FUNCS.items()):
        serve.ASYNC_REQUEST_FUNCS[name] = live_request(func, live, rec)
    try:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        serve.main(args)
        rec["cpu_s"] = time.process_time() - cpu0
        rec["wall_s"] = time.perf_counter() - wall0
    finally:
        serve.get_request = tool_get_request
        serve.ASYNC_REQUEST_FUNCS.clear()
        serve.ASYNC_REQUEST_FUNCS.update(funcs)
        live.close()
    rec["result_file"] = str(Path(args.result_dir or ".") / args.result_filename)
    Path(run["record"]).write_text(json.dumps(rec), encoding="utf-8")


def main() -> int:
    t0 = time.perf_counter()
    from vllm.benchmarks import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    def parser_of():
        parser = FlexibleArgumentParser()
        serve.add_cli_args(parser)
        return parser

    Path(sys.argv[1]).write_text(json.dumps({"import_s": time.perf_counter() - t0}), encoding="utf-8")
    for line in sys.stdin:
        if not line.strip():
            continue
        path = Path(line.strip())
        done: dict = {"code": 0}
        try:
            job = json.loads(path.read_text(encoding="utf-8"))
            for k, run in enumerate(job["runs"]):
                print(f"== run {k + 1} of {len(job['runs'])}: {run['requests']}", flush=True)
                run_one(run, serve, parser_of)
        except BaseException as exc:  # noqa: BLE001 - the lab reads the reason; the log keeps the traceback
            import traceback

            traceback.print_exc()
            done = {"code": 1, "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
        sys.stdout.flush()
        Path(f"{path}.done").write_text(json.dumps(done), encoding="utf-8")
        if isinstance(done.get("error"), str) and done["error"].startswith("KeyboardInterrupt"):
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
