"""The vLLM side of a vLLM pass: a child process run with the vLLM venv's python.

Runs in ``.cache/vllm-venv`` (lab.engines.vllm_env), never in the lab's venv: it imports only
the standard library and vLLM (and what vLLM's venv holds), never a ``lab`` module, which would
need the lab's own transformers. Started by lab.engines.vllm.VllmClient as
``<venv python> vllm_worker.py`` in its own process group.

The worker kills its own process group (itself and vLLM's engine core) as soon as its parent
dies (``watch_parent``), so a pass killed mid-run leaves no engine behind.

Protocol: JSON lines. Requests on stdin, one object a line; replies on the protocol channel
(the process's original stdout; fd 1 is pointed at stderr before vLLM is imported, so nothing
vLLM or its engine-core process prints can corrupt the channel). Every reply has ``"event"``.

- ``{"op": "start", "model": str, "runner": "pooling" | "generate", "dtype": str,
  "max_model_len": int, "enforce_eager": bool, "gpu_memory_utilization": float,
  "max_num_seqs": int | null, "max_num_batched_tokens": int | null, "seed": int,
  "max_new_tokens": int | null, "stop": [str, ...], "prefix_caching": bool}``
  -> ``{"event": "ready", "import_s", "engine_start_s", "architecture", "pooling",
  "scheduler": {...}, "memory": {...}, "caching": {...}, "binding": {...}, "versions": {...},
  "sampling": {...} | null}``. ``memory.kv_cache_space_bytes``: vLLM's
  ``cache_config.kv_cache_memory_bytes`` (the CPU backend sets it from ``VLLM_CPU_KVCACHE_SPACE``;
  null: vLLM sized the KV cache from ``gpu_memory_utilization``); ``caching.prefix_caching``:
  its ``enable_prefix_caching``; ``binding``: ``VLLM_CPU_OMP_THREADS_BIND`` as vLLM read it and
  the CPUs each engine process may run on (``cpus``: the union over its threads' affinities;
  ``threads``: its thread count).
  ``engine_start_s`` (s): ``LLM(...)`` built, i.e. engine-core process started, weights
  loaded, memory profiled and reserved: set-up, never in a measured window. ``sampling``
  (runner "generate" only): the ``SamplingParams`` every generate call uses, as vLLM resolved
  them (greedy: temperature 0, ``max_tokens`` = max_new_tokens, the stop strings kept in the
  output so the lab can cut by its own rule).
- ``{"op": "classify", "prompts": [[token id, ...], ...]}`` -> ``{"event": "classified",
  "probs": [[p per class, ...], ...], "infer_s", "max_running"}``.
- ``{"op": "embed", "prompts": [...]}`` -> ``{"event": "embedded", "vectors": [[...], ...],
  "infer_s", "max_running"}``.
- ``{"op": "generate", "prompts": [...]}`` -> ``{"event": "generated", "tokens": [[generated
  token id, ...], ...], "finish": [vLLM's finish reason per item: "stop" | "length" | ...],
  "infer_s", "max_running"}``: the generated ids only (eos and the token completing a stop
  string included), never text: the lab decodes and cuts them by its own rule.
- ``{"op": "close"}`` -> ``{"event": "closed"}``, then exit 0.
- Any failure -> ``{"event": "failed", "why": "oom" | "refused" | "other", "message": one
  line}``; after a failed start the process exits 3.

The words are the enums ``Op``, ``Reply`` and ``Why`` below; the client imports them from here.

``max_running``: the most requests vLLM's scheduler held running in one engine step during the
call (read from vLLM's own scheduler statistics), or null when vLLM did not report them.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from enum import StrEnum
from pathlib import Path

if __name__ in ("__main__", "__mp_main__"):
    # Run as a script, this folder would come first on sys.path, and its vllm.py (the lab's
    # client) would shadow the real vLLM: the client starts it with ``python -P``; this drops it
    # anyway. Imported by the client (for the words below), it changes nothing.
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]


class Op(StrEnum):
    """Requests, the ``"op"`` of a line on stdin."""

    START = "start"
    CLASSIFY = "classify"
    EMBED = "embed"
    GENERATE = "generate"
    CLOSE = "close"


class Reply(StrEnum):
    """Replies, the ``"event"`` of a line on the protocol channel."""

    READY = "ready"
    CLASSIFIED = "classified"
    EMBEDDED = "embedded"
    GENERATED = "generated"
    CLOSED = "closed"
    FAILED = "failed"


class Why(StrEnum):
    """Why a request failed, the ``"why"`` of a FAILED reply."""

    OOM = "oom"
    REFUSED = "refused"  # vLLM refused the input or the settings (a ValueError)
    OTHER = "other"

def send(channel, event: str, **fields) -> None:
    """One reply line on ``channel`` (the protocol channel: the process's original stdout)."""
    channel.write(json.dumps({"event": event, **fields}) + "\n")
    channel.flush()


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text[:400]}"


def failure_why(exc: BaseException) -> Why:
    text = str(exc).lower()
    if isinstance(exc, MemoryError) or "out of memory" in text or "insufficient memory" in text:
        return Why.OOM
    if isinstance(exc, ValueError):
        return Why.REFUSED
    return Why.OTHER


class Engine:
    """One vLLM offline engine (``vllm.LLM``) and the facts it reports about itself."""

    def __init__(self, req: dict) -> None:
        t0 = time.perf_counter()
        import vllm  # noqa: F401  (timed: the import alone takes seconds)
        from vllm import LLM

        self.import_s = time.perf_counter() - t0
        kwargs = {"model": req["model"], "runner": req["runner"], "dtype": req["dtype"],
                  "max_model_len": req["max_model_len"], "enforce_eager": req["enforce_eager"],
                  "gpu_memory_utilization": req["gpu_memory_utilization"], "seed": req["seed"],
                  "disable_log_stats": False, "enable_prefix_caching": bool(req.get("prefix_caching"))}
        if req.get("max_num_seqs") is not None:
            kwargs["max_num_seqs"] = req["max_num_seqs"]
        if req.get("max_num_batched_tokens") is not None:
            kwargs["max_num_batched_tokens"] = req["max_num_batched_tokens"]
        t1 = time.perf_counter()
        self.llm = LLM(**kwargs)
        self.engine_start_s = time.perf_counter() - t1
        self.versions = {"vllm": vllm.__version__, **_versions("torch", "transformers")}
        self.sampling = None
        if req["runner"] == "generate":
            from vllm import SamplingParams

            # greedy: temperature 0 is vLLM's greedy sampling (argmax, one sequence); the stop
            # strings end a sequence early, as transformers' stop_strings do, and stay in the
            # output so the lab's rule (not vLLM's text) cuts both engines' outputs
            self.sampling = SamplingParams(temperature=0.0, max_tokens=req["max_new_tokens"],
                                           stop=list(req.get("stop") or ()) or None,
                                           include_stop_str_in_output=True)

    def facts(self) -> dict:
        """What vLLM resolved and reserved: scheduler limits, memory, architecture, pooling."""
        cfg = self.llm.llm_engine.vllm_config
        sched, cache, model = cfg.scheduler_config, cfg.cache_config, cfg.model_config
        pooler = getattr(model, "pooler_config", None)
        memory = {"gpu_memory_utilization": cache.gpu_memory_utilization,
                  "num_kv_blocks": getattr(cache, "num_gpu_blocks", None),
                  "block_size": getattr(cache, "block_size", None),
                  "kv_cache_space_bytes": _cpu_kv_space(cache),
                  "budget_bytes": _budget(cache.gpu_memory_utilization, str(cfg.device_config.device_type)),
                  "device": str(getattr(cfg.device_config, "device_type", "") or "")}
        return {"architecture": list(getattr(model.hf_config, "architectures", None) or []),
                "pooling": _pooling(pooler),
                "scheduler": {"max_num_seqs": sched.max_num_seqs,
                              "max_num_batched_tokens": sched.max_num_batched_tokens,
                              "max_model_len": model.max_model_len,
                              "dtype": str(model.dtype).removeprefix("torch."),
                              "enforce_eager": model.enforce_eager},
                "memory": memory, "sampling": _sampling(self.sampling),
                "caching": {"prefix_caching": _field(cache, "enable_prefix_caching")},
                "binding": _binding()}

    def run(self, op: str, prompts: list) -> dict:
        items = [{"prompt_token_ids": list(map(int, p))} for p in prompts]
        watch = RunningWatch(self.llm)
        t0 = time.perf_counter()
        with watch:
            if op == Op.GENERATE:
                outs = self.llm.generate(items, self.sampling, use_tqdm=False)
            elif op == Op.CLASSIFY:
                outs = self.llm.classify(items, use_tqdm=False)
            else:
                outs = self.llm.embed(items, use_tqdm=False)
        infer_s = time.perf_counter() - t0
        if op == Op.GENERATE:
            done = [o.outputs[0] for o in outs]
            return {"event": Reply.GENERATED, "tokens": [list(map(int, c.token_ids)) for c in done],
                    "finish": [c.finish_reason for c in done],
                    "infer_s": infer_s, "max_running": watch.max_running, "steps": watch.steps}
        if op == Op.CLASSIFY:
            return {"event": Reply.CLASSIFIED, "probs": [list(map(float, o.outputs.probs)) for o in outs],
                    "infer_s": infer_s, "max_running": watch.max_running, "steps": watch.steps}
        return {"event": Reply.EMBEDDED, "vectors": [list(map(float, o.outputs.embedding)) for o in outs],
                "infer_s": infer_s, "max_running": watch.max_running, "steps": watch.steps}


class RunningWatch:
    """The most sequences vLLM ran in one engine step during one call, and the steps it took.

    vLLM's offline engine (``LLMEngine.step``) hands each step's outputs, one per request that
    produced output in that step, to ``output_processor.process_outputs``; this wraps that
    method for the call and keeps the largest count. A pooling request (classify, embed)
    finishes in the step that runs it, so the count is what vLLM batched together; for
    generation it is the requests decoded together. None when this vLLM has no such method
    (never a guessed value).
    """

    def __init__(self, llm) -> None:
        self.llm = llm
        self.max_running: int | None = None
        self.steps = 0
        self._restore: tuple | None = None

    def __enter__(self):
        proc = getattr(self.llm.llm_engine, "output_processor", None)
        fn = getattr(proc, "process_outputs", None)
        if proc is None or fn is None:
            return self

        def wrapped(engine_core_outputs, *a, **k):
            if engine_core_outputs:
                self.steps += 1
                self.max_running = max(self.max_running or 0, len(engine_core_outputs))
            return fn(engine_core_outputs, *a, **k)

        proc.process_outputs = wrapped
        self._restore = (proc, fn)
        return self

    def __exit__(self, *exc) -> None:
        if self._restore:
            proc, fn = self._restore
            proc.process_outputs = fn


def _versions(*names: str) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for n in names:
        try:
            out[n] = version(n)
        except PackageNotFoundError:
            out[n] = None
    return out


def _field(obj, name: str):
    """``obj.name`` as vLLM holds it; RuntimeError (never a guessed default) when vLLM has no such
    field: a vLLM upgrade renamed or dropped it (the engine start then fails, naming it)."""
    if not hasattr(obj, name):
        raise RuntimeError(f"vLLM's {type(obj).__name__} has no field {name!r} (this vLLM renamed or dropped it); "
                           "update lab/engines/vllm_worker.py for it")
    return getattr(obj, name)


def _cpu_kv_space(cache) -> int | None:
    """Bytes set aside for the KV cache when set explicitly (vLLM's ``kv_cache_memory_bytes``: the
    CPU backend sets it from ``VLLM_CPU_KVCACHE_SPACE`` GiB), or None: sized from the memory fraction."""
    v = _field(cache, "kv_cache_memory_bytes")
    return int(v) if v is not None else None


def _binding() -> dict:
    """``VLLM_CPU_OMP_THREADS_BIND`` as vLLM read it, and per engine process (this worker's
    descendants: vLLM's engine core and its workers) its name, thread count and the CPUs its
    threads may run on (the union of their affinities; a thread gone meanwhile is skipped)."""
    import psutil

    try:
        import vllm.envs as envs

        bind = envs.VLLM_CPU_OMP_THREADS_BIND
    except (ImportError, AttributeError):
        bind = None
    procs = {}
    for p in psutil.Process().children(recursive=True):
        try:
            cpus: set[int] = set()
            for t in p.threads():
                try:
                    cpus |= os.sched_getaffinity(t.id)
                except OSError:
                    continue
            procs[str(p.pid)] = {"name": p.name(), "threads": p.num_threads(), "cpus": sorted(cpus)}
        except psutil.Error:
            continue
    return {"vllm_cpu_omp_threads_bind": bind, "processes": procs}


def _budget(fraction: float, device: str) -> int | None:
    """Bytes vLLM sizes its reservation against on CPU: ``gpu_memory_utilization`` x the host's
    total memory (vLLM's CPU worker: ``math.ceil(total_memory * fraction)``); None on a GPU,
    where vLLM reports its own figure in its log."""
    if device != "cpu":
        return None
    import math

    import psutil

    return math.ceil(psutil.virtual_memory().total * fraction)


def _sampling(params) -> dict | None:
    """The sampling parameters as vLLM holds them (None: a pooling runner): its sampling type
    (GREEDY for temperature 0) and the fields that decide which tokens come out."""
    if params is None:
        return None
    keys = ("n", "temperature", "top_p", "top_k", "min_p", "seed", "max_tokens", "min_tokens", "stop",
            "stop_token_ids", "ignore_eos", "include_stop_str_in_output", "skip_special_tokens",
            "repetition_penalty", "presence_penalty", "frequency_penalty")
    out = {k: getattr(params, k) for k in keys if hasattr(params, k)}
    out["sampling_type"] = getattr(getattr(params, "sampling_type", None), "name", None)
    return json.loads(json.dumps(out, default=str))


def _pooling(pooler) -> dict | None:
    if pooler is None:
        return None
    keys = ("pooling_type", "normalize", "activation", "softmax", "use_activation", "seq_pooling_type")
    return {k: (str(getattr(pooler, k)) if getattr(pooler, k) is not None else None)
            for k in keys if hasattr(pooler, k)}


def watch_parent(every_s: float) -> None:
    """Kill this process group (the worker and vLLM's engine core) once the parent is gone.

    The client (lab.engines.vllm) starts the worker in a session of its own, so a signal to the
    lab's process group does not reach it; a parent killed outright (SIGKILL, OOM killer) runs
    no clean-up. Polling ``getppid`` every ``every_s`` s covers both: the worker is re-parented
    when its parent dies."""
    parent = os.getppid()

    def loop() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=loop, daemon=True, name="watch-parent").start()


def main() -> int:
    watch_parent(float(os.environ.get("ITERALAB_WATCH_S") or 0.2))
    channel = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # what vLLM (and its spawned engine core) prints goes to stderr
    sys.stdout = sys.stderr
    engine = None
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            op = req.get("op")
            if op == Op.START:
                engine = Engine(req)
                send(channel, Reply.READY, import_s=engine.import_s, engine_start_s=engine.engine_start_s,
                     versions=engine.versions, **engine.facts())
            elif op in (Op.CLASSIFY, Op.EMBED, Op.GENERATE):
                if engine is None:
                    raise RuntimeError(f"{op} before start")
                reply = engine.run(op, req["prompts"])
                send(channel, reply.pop("event"), **reply)
            elif op == Op.CLOSE:
                send(channel, Reply.CLOSED)
                return 0
            else:
                raise ValueError(f"unknown op {op!r}")
        except Exception as exc:  # every failure is one reply; the lab decides what it means
            send(channel, Reply.FAILED, why=failure_why(exc), message=one_line(exc))
            if engine is None:
                return 3
    return 0


if __name__ == "__main__":  # vLLM spawns its engine core: the guard is required
    sys.exit(main())
