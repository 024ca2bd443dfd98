"""The load generator driver of a server pass: ``vllm bench serve`` against a running server (issue 36).

``run_loads`` writes the prompts of each run of a series (one per corpus id, in the order given)
for lab/engines/vllm_load_worker.py, runs it once for the whole series with the vLLM venv's python
(the tool pinned with the server), and reads each run's detailed result and the worker's record
into one ``ServedRequest`` per prompt (lab.engines.serving_figures), mapped back to its corpus id: the tool
lists its results in the order it released the requests, and ``read_records`` refuses a record
whose release order is not the order sent. What the tool does: arrivals (Poisson at
``burstiness`` 1, gamma otherwise, seeded), a concurrency cap, warm-up requests (the first prompt,
sent before the measured requests and kept out of the results), streaming completions with
``temperature`` 0 and the stop strings, its own metrics.

What it does not record, and what the lab records instead: the scheduled time of each request
and the generator's lag behind it (the worker replays the tool's draws and checks the replay,
``ServedRequest.scheduled_s``, ``dispatched_s``; ``Load.schedule_note`` says when it could not),
and the generator's own CPU time (``Load.generator_cpu_s``, the worker process over the tool's
``main``, vLLM's import excluded).

Errors (one line): LoadGenError when the generator exits with an error or runs past its time
limit (naming its log), or when its result does not map onto the prompts sent.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from lab.engines.serving_figures import PERCENTILES, Objective, ServedRequest
from lab.engines.vllm import kill_group
from lab.engines.vllm_env import ensure_vllm_env
from lab.engines.vllm_load_worker import POOLING_BACKEND
from lab.engines.vllm_server import Started, loopback_env
from lab.facts.errors import UserError

WORKER = Path(__file__).with_name("vllm_load_worker.py")
READY_CHECK_S = 60  # the tool's own first request waits this long for the server at most
RESULT_NAME = "bench_serve.json"  # the tool's result file (--save-result --save-detailed)
RECORD_NAME = "load_record.json"  # the worker's record (ids, releases, schedule, CPU)
REQUESTS_NAME = "requests.jsonl"  # the prompts, one per corpus id
LOG_NAME = "load.log"
LIVE_SUFFIX = ".live"  # <record>.live: each measured request's outcome as it comes (progress only)
WAIT_CALL_S = 1.0  # LoadGenerator.run's on_wait: at most this often


class LoadGenError(UserError):
    """The load generator failed, or its result does not map onto the prompts sent; one line."""


COMPLETIONS = "/v1/completions"
"""The generation endpoint (streamed completions: TTFT, TPOT, ITL)."""
ENDPOINTS = {COMPLETIONS: "vllm", "/v1/embeddings": POOLING_BACKEND, "/classify": POOLING_BACKEND}
"""The server endpoints a server pass loads, and the tool's backend for each: vLLM's completions
client, or the worker's ``lab-pooling`` (one whole answer per request, kept: the embedding of
``/v1/embeddings``, the class probabilities of vLLM's ``/classify``)."""


class Prompt(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One request to send: the corpus ``id``, the ``prompt`` (completions: the text, the task's
    template filled; pooling endpoints: the lab's token ids of the item, special tokens and its cut
    included, so the server reads what the lab would), ``max_tokens`` (the generation rule's
    max_new_tokens; 0 for a pooled answer)."""

    id: str
    prompt: str | tuple[int, ...]
    max_tokens: int = 0


class LoadSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How the generator offers the load: ``rate`` (req/s; math.inf: all at once), ``burstiness``
    (1: Poisson; < 1 burstier, > 1 more regular), ``seed`` (the arrival draws), ``max_concurrency``
    (requests in flight at most; None: no cap), ``warmups`` (requests sent first and kept out),
    ``stop`` (stop strings, cut before as the generation rule cuts), ``objective`` (also handed to
    the tool as its ``--goodput``, so its own goodput can be compared), ``percentiles``,
    ``endpoint`` (one of ENDPOINTS)."""

    rate: float
    seed: int
    burstiness: float = 1.0
    max_concurrency: int | None = None
    warmups: int = 0
    stop: tuple[str, ...] = ()
    objective: Objective | None = None
    percentiles: tuple[float, ...] = PERCENTILES
    endpoint: str = COMPLETIONS

    @property
    def pooled(self) -> bool:
        """Whether each answer comes whole (a pooling endpoint), not streamed."""
        return ENDPOINTS.get(self.endpoint) == POOLING_BACKEND

    def __post_init__(self) -> None:
        if self.endpoint not in ENDPOINTS:
            raise UserError(f"endpoint {self.endpoint!r} is not one a server pass loads; use one of "
                            f"{', '.join(ENDPOINTS)}")
        if not self.rate > 0:
            raise UserError(f"request rate {self.rate!r} must be > 0 req/s (math.inf: all at once)")
        if not self.burstiness > 0:
            raise UserError(f"burstiness {self.burstiness!r} must be > 0 (1: Poisson arrivals)")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise UserError(f"max_concurrency {self.max_concurrency!r} must be >= 1 (None: no cap)")
        if self.warmups < 0:
            raise UserError(f"warmups {self.warmups!r} must be >= 0")


class ToolResult(msgspec.Struct, frozen=True):
    """The fields of ``vllm bench serve``'s result file (``--save-detailed``) the lab reads: the
    run's ``duration`` (s), counts, its own rates, and per request (in release order) the prompt
    and output token counts, TTFT, inter-token gaps, latency (s), send time (perf_counter s),
    client queue time (s), text and error."""

    duration: float
    completed: int
    failed: int
    request_throughput: float
    output_throughput: float
    input_lens: list[int]
    output_lens: list[int]
    ttfts: list[float]
    itls: list[list[float]]
    latencies: list[float]
    start_times: list[float]
    generated_texts: list[str]
    errors: list[str]
    request_goodput: float | None = None


class LoadRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The worker's record (lab/engines/vllm_load_worker.py's docstring)."""

    ids: list[str]
    dispatched_s: list[float]
    scheduled_s: list[float] | None
    schedule_note: str
    origin_perf: float | None
    cpu_s: float
    wall_s: float
    result_file: str
    answers: dict[str, list[float]] | None = None


@dataclass(frozen=True)
class Load:
    """One run of the generator: ``records`` (one per prompt, in the order sent), ``duration_s``
    (the tool's: its first release to its last answer), ``offered_rate`` (req/s), ``tool`` (the
    tool's whole result, for its own figures: ``serving_figures.tool_percentiles``),
    ``generator_cpu_s`` and ``generator_wall_s`` (the worker process over the tool's ``main``:
    tokenizer load, ready check and warm-up included, vLLM's import not), ``schedule_note`` (how the schedule was
    known, or why not), ``result_path`` (the tool's file), ``log_path``."""

    records: tuple[ServedRequest, ...]
    duration_s: float
    offered_rate: float
    tool: dict
    generator_cpu_s: float
    generator_wall_s: float
    schedule_note: str
    result_path: Path
    log_path: Path


def tool_args(started: Started, tokenizer: str, n: int, settings: LoadSettings, out_dir: Path) -> list[str]:
    """``vllm bench serve``'s arguments: the endpoint of ``settings`` against ``started``
    (completions with streaming, greedy (temperature 0) with its stop strings; or a pooled answer
    per request), the model's ``tokenizer`` (a path), ``n`` prompts, the arrivals, cap and warm-ups
    of ``settings``, every latency metric at its percentiles, the
    objective as goodput bounds (ms), the detailed result into ``out_dir``."""
    args = ["--backend", ENDPOINTS[settings.endpoint], "--base-url", started.url, "--endpoint", settings.endpoint,
            "--model", tokenizer, "--tokenizer", tokenizer, "--served-model-name", started.model,
            "--dataset-name", "custom", "--dataset-path", str(out_dir / REQUESTS_NAME), "--num-prompts", str(n),
            "--request-rate", "inf" if math.isinf(settings.rate) else repr(settings.rate),
            "--burstiness", repr(settings.burstiness), "--seed", str(settings.seed),
            "--num-warmups", str(settings.warmups),
            *(() if settings.pooled else ("--temperature", "0",
                                          "--extra-body", json.dumps({"stop": list(settings.stop)}))),
            "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--metric-percentiles", ",".join(f"{p:g}" for p in settings.percentiles),
            "--ready-check-timeout-sec", str(READY_CHECK_S), "--disable-tqdm",
            "--save-result", "--save-detailed", "--result-dir", str(out_dir), "--result-filename", RESULT_NAME]
    if settings.max_concurrency is not None:
        args += ["--max-concurrency", str(settings.max_concurrency)]
    if settings.objective is not None:
        args += ["--goodput", *(f"{b.metric}:{b.bound_s * 1000.0!r}" for b in settings.objective.bounds)]
    return args


def read_records(tool: ToolResult, record: LoadRecord, ids: Sequence[str]) -> tuple[ServedRequest, ...]:
    """One ServedRequest per id of ``ids`` (the order sent) from the tool's result and the
    worker's record. Raises LoadGenError when the tool released the requests in another order
    than sent, or its result lists another number of requests (the mapping would be a guess).

    A request is answered when the tool wrote no error and a first token came (a TTFT > 0); one
    with neither gets the error "no answer and no error text from the tool". A pooled run's
    record carries each answered request's answer (``ServedRequest.answer``)."""
    n = len(ids)
    if list(record.ids) != list(ids):
        pairs = enumerate(zip(record.ids, ids, strict=False))
        first = next((k for k, (a, b) in pairs if a != b), min(len(record.ids), n))
        raise LoadGenError(f"the load generator released {len(record.ids)} requests, not in the order sent "
                           f"({n} ids; first difference at position {first}); its results cannot be mapped to ids")
    sizes = {len(x) for x in (tool.ttfts, tool.itls, tool.latencies, tool.start_times, tool.generated_texts,
                              tool.errors, tool.output_lens, tool.input_lens)}
    if sizes != {n} or len(record.dispatched_s) != n:
        raise LoadGenError(f"the load generator's result lists {sorted(sizes)} requests for {n} sent; "
                           "rerun the pass (its result file is kept)")
    origin = record.origin_perf
    out = []
    for k, i in enumerate(ids):
        err = tool.errors[k].strip()
        if not err and not tool.ttfts[k] > 0:
            err = "no answer and no error text from the tool"
        answer = None if record.answers is None else record.answers.get(i)
        if not err and record.answers is not None and answer is None:
            err = "answered, but the generator kept no pooled answer for it"
        out.append(ServedRequest(
            id=i, sent_s=tool.start_times[k] - origin if origin is not None else tool.start_times[k],
            ttft_s=tool.ttfts[k], e2el_s=tool.latencies[k], itl_s=tuple(tool.itls[k]),
            output_text=tool.generated_texts[k], output_tokens=tool.output_lens[k], input_tokens=tool.input_lens[k],
            error=err, scheduled_s=None if record.scheduled_s is None else record.scheduled_s[k],
            dispatched_s=record.dispatched_s[k], answer=None if answer is None else tuple(answer)))
    return tuple(out)


class LoadRun(msgspec.Struct, frozen=True):
    """One run of a series: the ``prompts`` to offer, how (``settings``), and ``out_dir`` (its
    prompts, the tool's result and the worker's record)."""

    prompts: tuple[Prompt, ...]
    settings: LoadSettings
    out_dir: Path


class LiveOutcomes:
    """The outcomes the worker has written so far for one run (``<record>.live``: ok, ttft_s,
    e2el_s, t_s per measured request), read a whole line at a time from where the last read
    stopped. ``read()`` returns every outcome read since the run started (a list, in the order
    answered); a line cut short is kept for the next read."""

    def __init__(self, run: LoadRun) -> None:
        self.path = run.out_dir / (RECORD_NAME + LIVE_SUFFIX)
        self.outcomes: list[dict] = []
        self._offset = 0

    def read(self) -> list[dict]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except OSError:
            return self.outcomes
        end = data.rfind(b"\n") + 1
        for line in data[:end].splitlines():
            try:
                self.outcomes.append(json.loads(line))
            except ValueError:
                continue  # not an outcome line: progress only, never a figure
        self._offset += end
        return self.outcomes


def run_load(started: Started, tokenizer: str | Path, prompts: Sequence[Prompt], settings: LoadSettings,
             out_dir: Path, timeout_s: float | None = None, python: Path | None = None) -> Load:
    """Offer ``prompts`` to the server ``started`` with ``vllm bench serve`` (the vLLM venv's) and
    return its Load: :func:`run_loads` with one run, its log in ``out_dir``. Raises as it does."""
    run = LoadRun(prompts=tuple(prompts), settings=settings, out_dir=out_dir)
    return run_loads(started, tokenizer, [run], out_dir / LOG_NAME, timeout_s=timeout_s, python=python)[0]


def run_loads(started: Started, tokenizer: str | Path, runs: Sequence[LoadRun], log_path: Path,
              timeout_s: float | None = None, python: Path | None = None) -> list[Load]:
    """Offer each run's prompts to the server ``started``, one run after the other, with ``vllm
    bench serve`` in ONE generator process of the vLLM venv (its import paid once for a series of
    rates), and return one Load per run, in order: a :class:`LoadGenerator` started, given the
    series, stopped. ``tokenizer``: the served model's folder (the tool counts prompt tokens with
    it). ``log_path``: the generator's log (every run's output). ``timeout_s``: wall limit of the
    series once the generator is ready (default :func:`series_timeout`).

    Raises LoadGenError (one line naming the log) when the generator exits with an error or runs
    past ``timeout_s`` (its process group is killed), or when a result does not map onto its
    prompts (read_records); UserError for no run, a run without prompts, a repeated id in a run,
    or two runs sharing an out_dir."""
    check_runs(runs)
    with LoadGenerator(log_path, python=python) as gen:
        gen.start()
        return gen.run(started, tokenizer, runs, timeout_s=timeout_s)


def check_runs(runs: Sequence[LoadRun]) -> None:
    """Refuse a series the generator cannot map back to ids (UserError, one line): no run, a run
    without prompts, a repeated id in a run, two runs sharing an out_dir."""
    if not runs:
        raise UserError("a load series needs at least one run")
    if len({r.out_dir.resolve() for r in runs}) != len(runs):
        raise UserError("two runs of a load series share an output folder; give each its own")
    for r in runs:
        ids = [p.id for p in r.prompts]
        if not ids:
            raise UserError("a server pass needs at least one prompt")
        if len(set(ids)) != len(ids):
            raise UserError("a server pass's prompts repeat an id; each corpus id is one request")


def series_timeout(runs: Sequence[LoadRun]) -> float:
    """The default wall limit (s) of a series once the generator is ready: per run 300 s plus
    twice its schedule's length (n / rate)."""
    return sum(300.0 + (0.0 if math.isinf(r.settings.rate) else 2.0 * len(r.prompts) / r.settings.rate)
               for r in runs)


class LoadGenerator:
    """The load generator's process (lab/engines/vllm_load_worker.py in the vLLM venv), started
    before it is needed: :meth:`start` spawns it and waits until vLLM's tool is imported (set-up,
    ``import_s``), :meth:`run` hands it a series and waits for its result (the requests' time
    only), :meth:`stop` ends it (its process group killed when it does not end). Its output goes
    to ``log_path``. A context manager: leaving the block stops it."""

    def __init__(self, log_path: Path, python: Path | None = None, start_timeout_s: float = 600.0):
        self.log_path = log_path
        self.python = python
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen | None = None
        self.import_s: float | None = None
        self._log: Any = None
        self._jobs = 0

    @property
    def pid(self) -> int | None:
        """The generator's process id while it runs; None before start and after stop."""
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def start(self) -> float:
        """Spawn the generator and wait until its tool is imported; returns the wall seconds.
        Raises LoadGenError (one line naming the log) when it exits first or takes longer than
        ``start_timeout_s``; VllmEnvError when the venv cannot be had."""
        import time

        python = self.python or ensure_vllm_env()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        ready = self.log_path.with_name(self.log_path.name + ".ready")
        ready.unlink(missing_ok=True)
        t0 = time.perf_counter()
        self._log = open(self.log_path, "w", encoding="utf-8")
        self.proc = subprocess.Popen([str(python), "-P", str(WORKER), str(ready)], stdin=subprocess.PIPE,
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True, text=True,
                                     env=loopback_env({**os.environ, "TOKENIZERS_PARALLELISM": "false"}))
        while not ready.is_file():
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.stop()
                raise LoadGenError(f"the load generator exited with code {code} before it was ready; "
                                   f"see {self.log_path}")
            if time.perf_counter() - t0 > self.start_timeout_s:
                self.stop()
                raise LoadGenError(f"the load generator was not ready within {self.start_timeout_s:.0f} s; "
                                   f"see {self.log_path}")
            time.sleep(0.05)
        self.import_s = float(json.loads(ready.read_text(encoding="utf-8") or "{}").get("import_s", 0.0))
        return time.perf_counter() - t0

    def run(self, started: Started, tokenizer: str | Path, runs: Sequence[LoadRun],
            timeout_s: float | None = None, on_wait: Callable[[], None] | None = None) -> list[Load]:
        """Offer each run's prompts to ``started``, in order (see :func:`run_loads`); returns one
        Load per run. ``on_wait``: called about every WAIT_CALL_S while the runs go on (a pass
        reads the answers so far: :class:`LiveOutcomes`). Raises LoadGenError when the generator
        fails, exits, or runs past ``timeout_s`` (then it is stopped), or a result does not map;
        UserError as check_runs."""
        import time

        check_runs(runs)
        if self.proc is None or self.proc.poll() is not None or self.proc.stdin is None:
            raise LoadGenError(f"the load generator is not running; see {self.log_path}")
        entries = []
        for r in runs:
            r.out_dir.mkdir(parents=True, exist_ok=True)
            lines = (json.dumps({"id": p.id, "prompt": p.prompt, "output_tokens": p.max_tokens}) + "\n"
                     for p in r.prompts)
            (r.out_dir / REQUESTS_NAME).write_text("".join(lines), encoding="utf-8")
            (r.out_dir / RECORD_NAME).unlink(missing_ok=True)
            (r.out_dir / (RECORD_NAME + LIVE_SUFFIX)).unlink(missing_ok=True)
            entries.append({"requests": str(r.out_dir / REQUESTS_NAME), "record": str(r.out_dir / RECORD_NAME),
                            "argv": tool_args(started, str(tokenizer), len(r.prompts), r.settings, r.out_dir)})
        self._jobs += 1
        job = runs[0].out_dir / f"load_job{self._jobs}.json"
        done = Path(f"{job}.done")
        done.unlink(missing_ok=True)
        job.write_text(json.dumps({"runs": entries}), encoding="utf-8")
        limit = series_timeout(runs) if timeout_s is None else timeout_s
        t0 = called = time.perf_counter()
        try:
            self.proc.stdin.write(f"{job}\n")
            self.proc.stdin.flush()
        except OSError:
            pass  # it exited: said below
        while not done.is_file():
            if self.proc.poll() is not None:
                finished = sum((r.out_dir / RECORD_NAME).is_file() for r in runs)
                raise LoadGenError(f"the load generator exited with code {self.proc.returncode} after {finished} "
                                   f"of {len(runs)} run(s); see {self.log_path}")
            if time.perf_counter() - t0 > limit:
                self.stop()
                raise LoadGenError(f"the load generator ran past {limit:.0f} s and was stopped; see {self.log_path}")
            if on_wait is not None and time.perf_counter() - called >= WAIT_CALL_S:
                called = time.perf_counter()
                on_wait()
            time.sleep(0.02)
        outcome = json.loads(done.read_text(encoding="utf-8"))
        if outcome.get("code"):
            finished = sum((r.out_dir / RECORD_NAME).is_file() for r in runs)
            raise LoadGenError(f"the load generator failed after {finished} of {len(runs)} run(s) "
                               f"({outcome.get('error', 'no reason given')}); see {self.log_path}")
        return [read_load(r, self.log_path) for r in runs]

    def stop(self, grace_s: float = 5.0) -> None:
        """End the generator: its input closed (it exits after the job it runs), then its process
        group killed after ``grace_s``; idempotent, never raises."""
        p = self.proc
        if p is not None:
            try:
                if p.stdin is not None:
                    p.stdin.close()
            except OSError:
                pass
            try:
                p.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
            kill_group(p.pid)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LoadGenerator:
        return self

    def __exit__(self, *exc) -> None:
        self.stop(grace_s=0.0 if exc[0] is not None else 5.0)


def read_load(run: LoadRun, log_path: Path) -> Load:
    """The Load of one finished run, from its worker record and the tool's result file. Raises
    LoadGenError when either is missing or unreadable, or does not map onto the run's prompts."""
    try:
        record = msgspec.json.decode((run.out_dir / RECORD_NAME).read_bytes(), type=LoadRecord)
        raw = (run.out_dir / RESULT_NAME).read_bytes()
        tool = msgspec.json.decode(raw, type=ToolResult)
    except (OSError, msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise LoadGenError(f"the load generator's result could not be read ({exc}); see {log_path}") from None
    return Load(records=read_records(tool, record, [p.id for p in run.prompts]), duration_s=tool.duration,
                offered_rate=run.settings.rate, tool=json.loads(raw), generator_cpu_s=record.cpu_s,
                generator_wall_s=record.wall_s, schedule_note=record.schedule_note,
                result_path=run.out_dir / RESULT_NAME, log_path=log_path)
