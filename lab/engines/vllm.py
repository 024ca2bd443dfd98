"""The lab's side of the vLLM engine: one client object over a child process in the vLLM venv.

:class:`VllmClient` starts ``lab/engines/vllm_worker.py`` with the vLLM venv's python
(lab.engines.vllm_env) in a process group of its own, and speaks JSON lines with it. The
lab tokenizes and truncates (lab.passes.inference.tokenize, the same rule as a transformers
pass); the client sends token ids only, so both engines receive the same ids.

Interface (what a pass job calls, in this order)::

    client = VllmClient(settings_for(variant, model_dir, device), log_path=pass_dir / "vllm.log")
    ready = client.start()                # set-up: engine start + model load, timed apart
    out = client.classify(token_ids)      # or client.embed / client.generate; once per chunk
    client.observed()                     # what vLLM ran, for lab.passes.observed.require_honoured
    client.close()                        # also on exception (a context manager), and on signal

``token_ids``: a list of items, each a list of int token ids of at most ``max_model_len``.
How many items a call carries is the caller's choice (the declared ``batch_size``); vLLM
batches continuously inside a call, up to ``max_num_seqs`` sequences and
``max_num_batched_tokens`` tokens per engine step, so the declared batch size is not what it
runs together: the client reports what vLLM scheduled (``max_running``, its scheduler limits).

No engine process outlives the client: close() kills the whole process group; the worker
kills its own group when its parent dies (SIGKILL included), within WATCH_S.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import re
import signal
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Callable

from lab.engines.vllm_env import VllmEnvError, ensure_vllm_env
from lab.engines.vllm_worker import Op, Reply, Why
from lab.facts.constants import DEFAULT_SEED, VLLM_MEMORY_FRACTION
from lab.facts.errors import FailureKind, PassFailure, UserError
from lab.inputs.variants import DTYPES, Variant

WORKER = Path(__file__).with_name("vllm_worker.py")
PROBE = Path(__file__).with_name("vllm_probe.py")
START_TIMEOUT_S = 600.0  # engine start + model load; 35-40 s for the demo classifier on 2 cores
CALL_TIMEOUT_S = 3600.0  # one classify/embed call
PROBE_TIMEOUT_S = 300.0
WATCH_S = 0.2  # the worker's parent-death poll (lab/engines/vllm_worker.py reads ITERALAB_WATCH_S)


class VllmFailure(PassFailure):
    """The engine refused, ran out of memory or died; ``kind`` says which (FailureKind)."""


@dataclass(frozen=True)
class VllmSettings:
    """What the lab asks vLLM for. ``max_model_len`` in tokens; ``gpu_memory_utilization`` a
    fraction (0, 1] of device memory, on CPU of host RAM, that vLLM reserves up front."""

    model: str
    dtype: str
    max_model_len: int
    enforce_eager: bool
    gpu_memory_utilization: float
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None  # vLLM's scheduler: tokens per step at most (None: its default)
    seed: int = DEFAULT_SEED
    runner: str = "pooling"
    max_new_tokens: int | None = None  # runner "generate": vLLM's max_tokens
    stop: tuple[str, ...] = ()  # runner "generate": stop strings (kept in the output; the lab cuts)
    prefix_caching: bool = False  # vLLM's enable_prefix_caching (lab.inputs.variants.Variant.prefix_caching)
    threads: int = 0  # CPU threads the pass declares (0: none declared; vLLM binds its own): thread_binding


def settings_for(variant: Variant, model: str | Path, device: str, seed: int = DEFAULT_SEED,
                 max_new_tokens: int | None = None, stop: tuple[str, ...] = (), threads: int = 0) -> VllmSettings:
    """The settings a vLLM variant declares: ``max_length`` -> max_model_len, ``precision`` ->
    dtype, ``compile = false`` -> enforce_eager, ``vllm_memory_fraction`` (else
    lab.facts.constants.VLLM_MEMORY_FRACTION for ``device``: "cpu" or a GPU), ``max_num_seqs``,
    ``max_num_batched_tokens``,
    ``prefix_caching`` (None: off) and, on CPU, the pass's declared ``threads`` (thread_binding).

    With ``max_new_tokens`` (a generation task's rule) the runner is "generate", greedy, with
    ``stop``; ``max_length`` is then the longest prompt (tokens) and max_model_len holds the
    prompt and the generated tokens: ``max_length + max_new_tokens`` (vLLM would otherwise end
    a sequence at max_model_len, a silent cut). Raises UserError (one line) for a variant whose
    engine is not vllm."""
    if variant.engine != "vllm":
        raise UserError(f"variant {variant.name or variant.variant_id} declares engine {variant.engine!r}, "
                        "not vllm; run it with the transformers pass")
    fraction = variant.vllm_memory_fraction
    if fraction is None:
        fraction = VLLM_MEMORY_FRACTION["cpu" if device == "cpu" else "gpu"]
    return VllmSettings(model=str(model), dtype=DTYPES[variant.precision],
                        max_model_len=variant.max_length + (max_new_tokens or 0),
                        enforce_eager=not variant.compile, gpu_memory_utilization=fraction,
                        max_num_seqs=variant.max_num_seqs, max_num_batched_tokens=variant.max_num_batched_tokens,
                        seed=seed,
                        runner="pooling" if max_new_tokens is None else "generate",
                        max_new_tokens=max_new_tokens, stop=tuple(stop),
                        prefix_caching=bool(variant.prefix_caching), threads=threads if device == "cpu" else 0)


def thread_binding(threads: int, allowed: set[int] | None = None) -> dict:
    """The environment that makes vLLM's CPU backend run ``threads`` OpenMP threads: vLLM binds one
    thread per CPU of ``VLLM_CPU_OMP_THREADS_BIND`` (its default "auto" takes every physical core
    of a NUMA node, whatever the pass declares). {} for ``threads`` 0 (none declared: vLLM's own
    binding, recorded). The CPUs are the first ``threads`` of those this process may run on
    (``allowed``, default ``os.sched_getaffinity(0)``). Raises UserError (one line) when fewer
    CPUs are allowed than declared."""
    if threads <= 0:
        return {}
    cpus = sorted(allowed if allowed is not None else os.sched_getaffinity(0))
    if len(cpus) < threads:
        raise UserError(f"threads {threads} declared, but this process may run on {len(cpus)} CPU(s) "
                        f"({','.join(map(str, cpus))}); declare threads <= {len(cpus)}")
    return {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, cpus[:threads])), "OMP_NUM_THREADS": str(threads)}


def bound_threads(binding: dict) -> int | None:
    """The OpenMP threads vLLM runs the model with, read from its engine processes (the worker's
    ``binding``): the fewest CPUs any engine process may run on, i.e. the process vLLM bound
    (one thread per bound CPU); None when no process was seen (never a guessed value)."""
    cpus = [len(p["cpus"]) for p in (binding.get("processes") or {}).values() if p.get("cpus")]
    return min(cpus) if cpus else None


@dataclass(frozen=True)
class Ready:
    """What the started engine reported. Times in s; ``memory`` holds vLLM's reservation:
    ``gpu_memory_utilization`` (fraction), ``budget_bytes`` (on CPU: that fraction of host RAM,
    what vLLM sizes weights + KV cache against), ``kv_cache_space_bytes`` (an explicit CPU KV
    size, or None), ``num_kv_blocks`` x ``block_size`` tokens of KV cache (1 block for an
    encoder-only model, which keeps no KV cache). ``rss_bytes``: {pid: resident bytes} of each
    engine process at ready, per process, never summed (shared pages would count twice). A
    scope of its own, never added to torch's peaks."""

    import_s: float
    engine_start_s: float
    architecture: list
    pooling: dict | None
    scheduler: dict
    memory: dict
    versions: dict
    setup_s: float  # from spawning the worker to "ready", as the lab saw it
    rss_bytes: dict
    sampling: dict | None = None  # runner "generate": vLLM's SamplingParams as it holds them
    caching: dict = field(default_factory=dict)  # {"prefix_caching": vLLM's enable_prefix_caching}
    binding: dict = field(default_factory=dict)  # lab/engines/vllm_worker.py _binding: the CPUs vLLM bound


@dataclass(frozen=True)
class Output:
    """One call's answer: ``rows`` (per item, in the order sent: class probabilities for
    classify, a vector for embed, ``{"token_ids", "finish"}`` for generate), ``infer_s`` (the
    call inside vLLM, s), ``max_running`` (most sequences vLLM ran in one engine step during
    the call, None when not reported), ``steps`` (engine steps that produced output)."""

    rows: list
    infer_s: float
    max_running: int | None
    steps: int


@dataclass
class VllmClient:
    """One vLLM engine in a child process; see the module docstring for the call order."""

    settings: VllmSettings
    log_path: Path | None = None
    python: Path | None = None  # the vLLM venv's python; default: ensure_vllm_env()
    proc: subprocess.Popen | None = field(default=None, init=False, repr=False)
    ready: Ready | None = field(default=None, init=False)
    max_running: int | None = field(default=None, init=False)
    _replies: queue.Queue = field(default_factory=queue.Queue, init=False, repr=False)
    _log: IO[Any] | None = field(default=None, init=False, repr=False)

    def start(self) -> Ready:
        """Spawn the worker, start the engine and load the model (set-up, timed apart).

        Raises VllmEnvError (one line) when the venv cannot be had, UserError (one line) for
        more declared threads than allowed CPUs (thread_binding), VllmFailure (kind oom,
        error...) when the engine does not start; the process group is gone either way."""
        python = self.python or ensure_vllm_env()
        bind = thread_binding(self.settings.threads)  # refused (one line) before anything starts
        t0 = time.perf_counter()
        self._log = open(self.log_path, "a", encoding="utf-8") if self.log_path else None
        log = self._log if self._log is not None else subprocess.DEVNULL
        env = {**os.environ, "ITERALAB_WATCH_S": str(WATCH_S), "TOKENIZERS_PARALLELISM": "false",
               **bind}
        self.proc = subprocess.Popen([str(python), "-P", str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=log, text=True, bufsize=1, start_new_session=True, env=env)
        atexit.register(self.close)
        threading.Thread(target=self._read, daemon=True).start()
        try:
            r = self._ask({"op": Op.START, **asdict(self.settings)}, Reply.READY, START_TIMEOUT_S)
        except BaseException:
            self.close()
            raise
        self.ready = Ready(setup_s=time.perf_counter() - t0, rss_bytes=group_rss(self.proc.pid),
                           sampling=r.get("sampling"), **{k: r[k] for k in (
                               "import_s", "engine_start_s", "architecture", "pooling", "scheduler", "memory",
                               "versions", "caching", "binding")})
        return self.ready

    def classify(self, token_ids: list[list[int]]) -> Output:
        """Class probabilities per item (softmax over the model's labels, as vLLM's classify
        returns them), in the order sent. Raises ValueError for an item longer than
        max_model_len (vLLM refuses, never truncates), VllmFailure when the engine fails."""
        return self._call(Op.CLASSIFY, Reply.CLASSIFIED, token_ids, lambda r: r["probs"])

    def embed(self, token_ids: list[list[int]]) -> Output:
        """One vector per item, with the pooling vLLM applies to the model (``Ready.pooling``:
        read from the checkpoint's sentence-transformers files; MEAN and normalised for MiniLM)."""
        return self._call(Op.EMBED, Reply.EMBEDDED, token_ids, lambda r: r["vectors"])

    def generate(self, token_ids: list[list[int]]) -> Output:
        """Greedy generation (runner "generate", the settings' max_new_tokens and stop strings):
        ``rows`` per item, in the order sent, ``{"token_ids": [generated ids], "finish": vLLM's
        finish reason}``; the ids include the eos or the token completing a stop string, and no
        text is returned: the caller decodes and cuts them by its own rule. Raises as classify,
        and RuntimeError when the engine was not started for generation."""
        if self.settings.runner != "generate":
            raise RuntimeError("generate() on an engine started with runner "
                               f"{self.settings.runner!r}; give settings_for max_new_tokens")
        return self._call(Op.GENERATE, Reply.GENERATED, token_ids, lambda r: [
            {"token_ids": t, "finish": f} for t, f in zip(r["tokens"], r["finish"], strict=True)])

    def observed(self) -> dict:
        """What vLLM ran, in the keys of lab.passes.observed.require_honoured: engine,
        max_num_seqs and vllm_memory_fraction as vLLM resolved them, dtype, compile (not
        enforce_eager), max_model_len, max_num_batched_tokens, prefix_caching (read back from
        vLLM's cache config), threads (the OpenMP threads vLLM bound: bound_threads; None when
        not seen), threads_bind (the CPUs, "0,1", or vLLM's word when it bound none), max_running
        (the most sequences it ran in one step, over every call so far; None when not reported)."""
        if self.ready is None:
            raise RuntimeError("observed() before start()")
        s = self.ready.scheduler
        return {"engine": "vllm", "max_num_seqs": s["max_num_seqs"],
                "vllm_memory_fraction": self.ready.memory["gpu_memory_utilization"], "dtype": s["dtype"],
                "compile": not s["enforce_eager"], "max_model_len": s["max_model_len"],
                "max_num_batched_tokens": s["max_num_batched_tokens"],
                "prefix_caching": self.ready.caching.get("prefix_caching"),
                "threads": bound_threads(self.ready.binding),
                "threads_bind": self.ready.binding.get("vllm_cpu_omp_threads_bind"), "max_running": self.max_running}

    def close(self, grace_s: float = 10.0) -> None:
        """Ask the engine to stop (it has ``grace_s`` s to answer; 0: not asked, for a pass being
        stopped mid-call, when the worker reads no request until its call ends), then kill its
        whole process group (idempotent, never raises)."""
        p, self.proc = self.proc, None
        if p is None:
            return
        try:
            if grace_s > 0 and p.poll() is None and p.stdin:
                p.stdin.write(json.dumps({"op": Op.CLOSE}) + "\n")
                p.stdin.flush()
                p.wait(timeout=grace_s)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        kill_group(p.pid)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self._log:
            self._log.close()
        atexit.unregister(self.close)

    def __enter__(self) -> "VllmClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------------

    def _call(self, op: Op, event: Reply, token_ids: list[list[int]], rows: Callable[[dict], list]) -> Output:
        if self.ready is None:
            raise RuntimeError(f"{op}() before start()")
        limit = self.ready.scheduler["max_model_len"]
        room = self.settings.max_new_tokens if op == Op.GENERATE else None  # generated tokens need room too
        long = next((i for i, ids in enumerate(token_ids) if len(ids) + (room or 0) > limit), None)
        if long is not None and room:
            raise ValueError(f"item {long} has {len(token_ids[long])} prompt tokens, and with max_new_tokens "
                             f"{room} that passes max_model_len {limit}; vLLM would end it there, not at the "
                             "lab's rule: declare a larger max_length or cut the text (max_text_tokens)")
        if long is not None:
            raise ValueError(f"item {long} has {len(token_ids[long])} tokens, over max_model_len {limit}; "
                             "truncate with lab.passes.inference.tokenize at the variant's max_length")
        r = self._ask({"op": op, "prompts": token_ids}, event, CALL_TIMEOUT_S)
        if r.get("max_running") is not None:
            self.max_running = max(self.max_running or 0, r["max_running"])
        return Output(rows=rows(r), infer_s=r["infer_s"], max_running=r.get("max_running"), steps=r["steps"])

    def _read(self) -> None:
        p = self.proc
        assert p is not None and p.stdout is not None
        for line in p.stdout:
            try:
                self._replies.put(json.loads(line))
            except ValueError:
                self._replies.put({"event": Reply.FAILED, "why": Why.OTHER, "message": f"not JSON: {line[:200]!r}"})
        self._replies.put(None)  # the worker closed its channel: it exited

    def _ask(self, request: dict, event: Reply, timeout_s: float) -> dict:
        p = self.proc
        if p is None or p.stdin is None:
            raise VllmFailure("the vLLM engine is not running (closed or never started)")
        try:
            p.stdin.write(json.dumps(request) + "\n")
            p.stdin.flush()
        except OSError:
            pass  # the worker is gone; its end-of-channel is in the queue
        try:
            r = self._replies.get(timeout=timeout_s)
        except queue.Empty:
            self.close()
            raise VllmFailure(f"vLLM gave no answer to {request['op']} within {timeout_s:.0f} s") from None
        if r is None:
            code = p.wait()
            self.close()
            raise VllmFailure(f"the vLLM worker exited (code {code}) during {request['op']}"
                              + (f"; see {self.log_path}" if self.log_path else ""))
        if r.get("event") == Reply.FAILED:
            if r.get("why") == Why.REFUSED and request["op"] != Op.START:
                raise ValueError(f"vLLM refused the {request['op']} call: {r['message']}")
            err = VllmFailure(f"vLLM {request['op']}: {r['message']}")
            err.kind = FailureKind.OOM if r.get("why") == Why.OOM else FailureKind.ERROR
            raise err
        if r.get("event") != event:
            raise VllmFailure(f"vLLM answered {r.get('event')!r} to {request['op']}, expected {event!r}")
        return r


def reservation(ready: Ready, device: str) -> dict:
    """vLLM's up-front reservation as a memory scope of its own (result.json ``engine_memory``),
    never added to torch's peaks of the lab process (lab.memory.peaks) nor to the engine's RSS.

    ``of``: "host RAM" on CPU, "device memory" on a GPU; ``fraction``: vLLM's
    ``gpu_memory_utilization``; ``reserved_bytes``: that fraction of host RAM on CPU (what vLLM
    sizes weights + KV cache against), on a GPU that fraction of the card's total memory as
    torch reports it (None, with ``reasons``, when not known); ``kv_cache_bytes``: the CPU
    backend's explicit KV cache size (None when vLLM sized it itself; the blocks say how much);
    ``num_kv_blocks`` x ``block_size`` tokens of KV cache; ``engine_rss_bytes``: {pid: resident
    bytes} of each engine process at ready (per process, never summed: shared pages)."""
    m = ready.memory
    reasons = {}
    reserved = m.get("budget_bytes")
    if reserved is None and device.startswith("cuda"):
        try:
            import torch

            reserved = int(torch.cuda.get_device_properties(device).total_memory * m["gpu_memory_utilization"])
        except Exception as exc:  # noqa: BLE001 - a figure missing, with its reason
            reasons["reserved_bytes"] = f"device memory not read: {type(exc).__name__}"
    elif reserved is None:
        reasons["reserved_bytes"] = f"vLLM reported no budget on device {m.get('device')!r}"
    if m.get("kv_cache_space_bytes") is None:
        reasons["kv_cache_bytes"] = ("no explicit KV cache size (vLLM's kv_cache_memory_bytes None): vLLM sized it "
                                     "from the fraction (num_kv_blocks x block_size tokens)")
    return {"scope": "vLLM reservation: weights + KV cache, reserved up front by the engine process",
            "of": "host RAM" if device == "cpu" else "device memory", "fraction": m["gpu_memory_utilization"],
            "reserved_bytes": reserved, "kv_cache_bytes": m.get("kv_cache_space_bytes"),
            "num_kv_blocks": m.get("num_kv_blocks"), "block_size": m.get("block_size"),
            "engine_rss_bytes": {str(k): v for k, v in ready.rss_bytes.items()}, "reasons": reasons}


def group_rss(pid: int) -> dict:
    """{pid: resident set bytes} of process ``pid`` and its descendants (the engine's processes)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return {}
    out = {}
    for p in procs:
        try:
            out[p.pid] = p.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return out


def kill_group(pgid: int) -> None:
    """SIGKILL every process of group ``pgid`` (the worker and vLLM's engine core); no error
    when it is already gone."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def probe_model(model_dir: str | Path, build_if_missing: bool = True, runner: str = "pooling",
                load_fraction: float | None = None, dtype: str = "auto") -> dict:
    """Ask the pinned vLLM (in its venv) whether it resolves the model for ``runner``
    ("pooling": classification and embedding; "generate": generation), and with
    ``load_fraction`` (a ``gpu_memory_utilization``) whether it loads it and generates a token
    (lab/engines/vllm_probe.py; the engine's own root cause, read from its log, ends ``reason``).

    Returns ``{"architectures", "resolved", "reason", "vllm", "pooling", "dtype"}``
    (lab/engines/vllm_probe.py: ``resolved`` is the architecture vLLM would run with ``dtype``,
    None with vLLM's ``reason``; ``pooling`` the pooler it resolved). Raises
    VllmEnvError (one line) when the venv is missing and cannot be built, UserError (one line)
    when the probe fails."""
    python = ensure_vllm_env(build_if_missing)
    load = [] if load_fraction is None else [str(load_fraction)]
    r = subprocess.run([str(python), "-P", str(PROBE), str(model_dir), runner, *(load or ["-"]), dtype],
                       capture_output=True,
                       text=True, timeout=PROBE_TIMEOUT_S, check=False)
    try:
        answer = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise UserError(f"the vLLM probe of {model_dir} failed (exit {r.returncode}: {tail}); run "
                        "`make vllm-env` to rebuild the vLLM environment") from None
    if "error" in answer:
        raise UserError(f"the vLLM probe could not read the model: {answer['error']}")
    cause = ROOT_CAUSE.search(r.stderr or "") if load and not answer["resolved"] else None
    if cause:  # the engine core's own error: the exception the probe caught only says it failed
        answer["reason"] = f"loading it failed; the engine's log: {cause.group(1).split('. ')[0][:200]}"
    return answer


ROOT_CAUSE = re.compile(r"^.*ERROR.*\] (\w*Error: .*)$", re.MULTILINE)
"""The first ``...Error: message`` line vLLM's engine processes log when they fail to start."""


def pooling_mismatch(pooling: str, normalize: bool, vllm_pooling: dict | None) -> str:
    """'' when vLLM's pooler (``vllm_pooling``: the worker's or the probe's ``pooling`` fields)
    applies the declared embedding rule (``pooling``, e.g. "mean"; ``normalize``); else what
    differs, one line: "pooling mean normalize True declared, vLLM pools CLS (normalize not said)".
    The one comparison the lock (vllm_refusal) and a pass (lab.passes.backends.vllm_backend) make."""
    p = vllm_pooling or {}
    kind = str(p.get("pooling_type") or p.get("seq_pooling_type") or "").upper()
    norm = str(p.get("normalize") or p.get("use_activation") or "").lower()
    if kind == pooling.upper() and norm in ("", "none", str(normalize).lower()):
        return ""
    return (f"pooling {pooling} normalize {normalize} declared, vLLM pools {kind or 'unknown'} "
            f"(normalize {norm if norm not in ('', 'none') else 'not said'})")


def probe_cache_key(model_dir: str | Path, *parts: object) -> str:
    """The key of one probe's answer: the model folder's files (path, size, mtime), the vLLM
    venv that answered (its folder, and its stamp: the requirements it was built from, so a
    venv not built yet or rebuilt is a new key) and the requirements, with ``parts`` (runner,
    fraction, dtype); a changed file is a new key."""
    from lab.engines.vllm_env import STAMP_NAME, requirements_file, venv_dir
    from lab.facts.files import sha256_lines

    venv = venv_dir().resolve()
    stamp = venv / STAMP_NAME
    req = requirements_file()
    files = [f"{f.relative_to(model_dir)} {f.stat().st_size} {f.stat().st_mtime_ns}\n"
             for f in sorted(Path(model_dir).rglob("*")) if f.is_file()]
    return sha256_lines([*files, f"venv {venv} {stamp.read_text().strip() if stamp.is_file() else 'not built'}\n",
                         req.read_text(encoding="utf-8") + "\n" if req.is_file() else "\n", repr(parts)])


_PROBES: dict[str, dict] = {}
"""Answers of probe_model in this process, by probe_cache_key (a test session, a UI session)."""


def vllm_refusal(model_dir: str | Path, build_if_missing: bool = True, runner: str = "pooling",
                 load_fraction: float | None = None, dtype: str = "auto",
                 pooling: tuple[str, bool] | None = None) -> str:
    """'' when a vLLM variant of this model can run here with ``runner`` (probe_model, loading
    it with ``load_fraction``); else the one-line reason (lock).

    Refused: the vLLM environment missing and not buildable; a model whose config.json
    architectures the pinned vLLM does not resolve for that runner, or with ``dtype`` (asked
    of vLLM in its venv, not guessed); with ``pooling`` (the embedding rule: "mean", normalize)
    a model vLLM pools otherwise (pooling_mismatch), which every pass would refuse after its
    engine start. A probe's answer is kept for the process (probe_cache_key)."""
    key = probe_cache_key(model_dir, runner, load_fraction, dtype)
    try:
        answer = _PROBES.get(key) or probe_model(model_dir, build_if_missing, runner, load_fraction, dtype)
    except VllmEnvError as exc:
        return f"engine vllm: {exc}"
    except UserError as exc:
        return f"engine vllm: {exc}"
    _PROBES[key] = answer
    if not answer["resolved"]:
        return (f"engine vllm: model {Path(model_dir).name} declares architectures "
                f"{answer['architectures'] or 'none'}, none of which vLLM {answer['vllm']} supports "
                f"as a {runner} model ({answer['reason']}); declare engine = \"transformers\" for it")
    differs = pooling_mismatch(*pooling, answer.get("pooling")) if pooling and runner == "pooling" else ""
    if differs:
        return (f"engine vllm: model {Path(model_dir).name}: {differs}; vLLM reads its pooling from the "
                "checkpoint (sentence-transformers files), so every pass would refuse it: declare "
                "engine = \"transformers\" for this embedding model")
    return ""
