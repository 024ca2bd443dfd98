"""vLLM's OpenAI-compatible server as the lab runs it for a server pass (issue 36).

:class:`VllmServer` starts the server of the bundle's vLLM venv (lab.engines.vllm_env) on the
loopback address and a free port, in a process group of its own (lab/engines/vllm_server_main.py:
vLLM's own ``api_server`` entry point behind the worker's parent watch), with the declared
threads bound as lab.engines.vllm.thread_binding binds them. ``start`` polls ``/health`` until it
answers 200 (its time is set-up, ``Started.setup_s``); a thread samples the server's process tree
while it runs (CPU time, peak resident memory per process, psutil); ``stop`` kills the whole group
and returns what was sampled. Used as a context manager, the group is killed also when the caller
raises; the parent watch kills it when the lab's process dies.

Interface::

    with VllmServer(settings_for(variant, model_dir, "cpu", ...), log_path=pass_dir / "server.log") as server:
        started = server.start()        # Started: url, port, setup_s
        ...                             # requests to started.url (lab.engines.vllm_load)
    server.usage                        # Usage: CPU s, peak RSS per process, after stop/exit

Errors (one line, naming the log): ServerStartError when the server exits during its start or
does not answer within ``start_timeout_s``; lab.engines.vllm_env.VllmEnvError when the venv is
missing; UserError for more declared threads than allowed CPUs.
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from lab.engines.vllm import WATCH_S, VllmSettings, kill_group, thread_binding
from lab.engines.vllm_env import ensure_vllm_env
from lab.facts.errors import UserError

MAIN = Path(__file__).with_name("vllm_server_main.py")
HOST = "127.0.0.1"
START_TIMEOUT_S = 600.0  # import + engine start + model load; 60-110 s for the demo generator on 2 cores
HEALTH_EVERY_S = 0.5
SAMPLE_EVERY_S = 0.5  # the process tree's CPU time and RSS, sampled this often
SERVED_NAME = "served"  # the model's name in the server's API (requests name it)


class ServerStartError(UserError):
    """The server exited during its start or never answered /health; one line naming its log."""


def loopback_env(env: dict) -> dict:
    """``env`` with the loopback addresses added to ``no_proxy``/``NO_PROXY``: a host's HTTP proxy
    never carries the lab's requests to its own server (aiohttp and urllib read them)."""
    out = dict(env)
    for key in ("no_proxy", "NO_PROXY"):
        have = [h for h in (out.get(key) or "").split(",") if h]
        out[key] = ",".join([*have, *(h for h in (HOST, "localhost") if h not in have)])
    return out


def free_port(host: str = HOST) -> int:
    """A TCP port free on ``host`` now (the kernel's pick; a port taken between this call and the
    server's bind makes the server exit at start, ServerStartError)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def server_args(settings: VllmSettings, port: int, host: str = HOST) -> list[str]:
    """The server's command-line arguments for ``settings`` (the engine settings a vLLM pass
    declares, lab.engines.vllm.settings_for): the model, its dtype, max_model_len, memory fraction,
    seed, eager or compiled, max_num_seqs and max_num_batched_tokens (when declared), prefix caching, the runner; the
    checkpoint's generation_config.json is not applied (``--generation-config vllm``: the request
    states its own decoding); access log off (one line per request would cost the server CPU)."""
    args = ["--model", settings.model, "--served-model-name", SERVED_NAME, "--host", host, "--port", str(port),
            "--runner", settings.runner, "--dtype", settings.dtype, "--max-model-len", str(settings.max_model_len),
            "--gpu-memory-utilization", str(settings.gpu_memory_utilization), "--seed", str(settings.seed),
            "--generation-config", "vllm", "--disable-uvicorn-access-log",
            "--enable-prefix-caching" if settings.prefix_caching else "--no-enable-prefix-caching"]
    if settings.enforce_eager:
        args.append("--enforce-eager")
    if settings.max_num_seqs is not None:
        args += ["--max-num-seqs", str(settings.max_num_seqs)]
    if settings.max_num_batched_tokens is not None:
        args += ["--max-num-batched-tokens", str(settings.max_num_batched_tokens)]
    return args


@dataclass(frozen=True)
class Started:
    """A server that answers: ``url`` (``http://127.0.0.1:<port>``), ``port``, ``pid`` (its process
    group's leader), ``setup_s`` (from spawning it to its first 200 on /health: set-up, never in a
    measured window), ``model`` (the name requests give, SERVED_NAME)."""

    url: str
    port: int
    pid: int
    setup_s: float
    model: str = SERVED_NAME


@dataclass(frozen=True)
class Usage:
    """What the server's process tree used while it ran, sampled every SAMPLE_EVERY_S s:
    ``cpu_s`` (user + system CPU seconds, summed over every process seen, each at its last
    sample), ``peak_rss_bytes`` ({pid: the largest resident set seen}, per process, never
    summed: shared pages would count twice; a process only ever sampled as it exited, with no
    resident set, has none), ``processes`` (how many were seen), ``samples``."""

    cpu_s: float
    peak_rss_bytes: dict[int, int]
    processes: int
    samples: int


@dataclass
class TreeWatch:
    """Samples the process tree rooted at ``pid`` every ``every_s`` s in a thread until ``stop``."""

    pid: int
    every_s: float = SAMPLE_EVERY_S
    cpu: dict[int, float] = field(default_factory=dict)
    rss: dict[int, int] = field(default_factory=dict)
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True, name="server-tree-watch")
        self._thread.start()

    def sample(self) -> None:
        """One sample: each process's CPU time and resident set, the largest kept."""
        import psutil

        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for p in procs:
            try:
                with p.oneshot():
                    t = p.cpu_times()
                    rss = p.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            self.cpu[p.pid] = t.user + t.system
            if rss > 0:  # a process sampled as it exits (a zombie) has no resident set: not a reading
                self.rss[p.pid] = max(self.rss.get(p.pid, 0), rss)
        self.samples += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sample()

    def stop(self) -> Usage:
        """Stop sampling (one last sample first) and return what was seen."""
        if not self._stop.is_set():
            self.sample()
            self._stop.set()
            if self._thread is not None:
                self._thread.join(timeout=5)
        return Usage(cpu_s=sum(self.cpu.values()), peak_rss_bytes=dict(self.rss), processes=len(self.cpu),
                     samples=self.samples)


@dataclass
class VllmServer:
    """One vLLM OpenAI-compatible server in a process group of its own; see the module docstring."""

    settings: VllmSettings
    log_path: Path
    python: Path | None = None  # the vLLM venv's python; default: ensure_vllm_env()
    start_timeout_s: float = START_TIMEOUT_S
    proc: subprocess.Popen | None = field(default=None, init=False, repr=False)
    started: Started | None = field(default=None, init=False)
    usage: Usage | None = field(default=None, init=False)
    _watch: TreeWatch | None = field(default=None, init=False, repr=False)
    _log: IO[Any] | None = field(default=None, init=False, repr=False)

    def start(self) -> Started:
        """Spawn the server and wait for its /health (set-up, timed). Raises ServerStartError (one
        line naming the log) when it exits first or does not answer within ``start_timeout_s``;
        VllmEnvError, UserError as the module docstring says. The group is killed on any failure."""
        python = self.python or ensure_vllm_env()
        bind = thread_binding(self.settings.threads)  # refused (one line) before anything starts
        port = free_port()
        # VLLM_SERVER_DEV_MODE: /server_info gives the server's whole config (server_config reads what
        # the pass declared from it); the server listens on the loopback address only
        env = loopback_env({**os.environ, "ITERALAB_WATCH_S": str(WATCH_S), "TOKENIZERS_PARALLELISM": "false",
                            "VLLM_SERVER_DEV_MODE": "1", **bind})
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "a", encoding="utf-8")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen([str(python), "-P", str(MAIN), *server_args(self.settings, port)],
                                     stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True, env=env)
        atexit.register(self.stop)
        self._watch = TreeWatch(self.proc.pid)
        self._watch.start()
        url = f"http://{HOST}:{port}"
        try:
            self._wait_healthy(url, t0)
        except BaseException:
            self.stop()
            raise
        self.started = Started(url=url, port=port, pid=self.proc.pid, setup_s=time.perf_counter() - t0)
        return self.started

    def _wait_healthy(self, url: str, t0: float) -> None:
        assert self.proc is not None
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ServerStartError(f"the vLLM server exited (code {code}) during its start; see {self.log_path}")
            try:
                with direct.open(f"{url}/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass  # not listening yet, or not ready (503)
            if time.perf_counter() - t0 > self.start_timeout_s:
                raise ServerStartError(f"the vLLM server did not answer {url}/health within "
                                       f"{self.start_timeout_s:.0f} s; see {self.log_path}")
            time.sleep(HEALTH_EVERY_S)

    def alive(self) -> bool:
        """Whether the server's process is still running."""
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> Usage | None:
        """Kill the server's whole process group (idempotent, never raises) and return its usage
        (None when it was never started)."""
        p, self.proc = self.proc, None
        if p is None:
            return self.usage
        if self._watch is not None:
            self.usage = self._watch.stop()
        kill_group(p.pid)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self._log is not None:
            self._log.close()
        atexit.unregister(self.stop)
        return self.usage

    def __enter__(self) -> VllmServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


POOLER_KEYS = ("pooling_type", "seq_pooling_type", "normalize", "use_activation")
"""The pooler settings read from a server's config: what lab.engines.vllm.pooling_mismatch compares."""

SERVER_INFO_TIMEOUT_S = 120.0
"""Seconds the lab waits for ``/server_info``: its first call collects the host's environment
(vLLM's collect_env: pip, the GPU's tools), which takes tens of seconds on a cold host."""


def server_config(url: str, timeout_s: float = 10.0) -> dict:
    """What a running server says of its configuration: from ``/metrics``, the labels of
    ``vllm:cache_config_info`` (``gpu_memory_utilization`` as a float, ``enable_prefix_caching`` as
    a bool), from ``/v1/models`` the served model's ``max_model_len`` (int), and from
    ``/server_info`` (the server's whole VllmConfig; the lab starts it with
    ``VLLM_SERVER_DEV_MODE=1``, on the loopback address only) the scheduler's ``max_num_seqs`` and
    ``max_num_batched_tokens``, the model's ``dtype`` ("float32": torch's name without its
    prefix) and ``enforce_eager``, which override the others where both say. A value the server
    does not give is absent; never raises (an unreachable server gives {}). ``timeout_s`` per
    request (``/server_info``: at least SERVER_INFO_TIMEOUT_S)."""
    import json
    import re

    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    out: dict = {}
    try:
        with direct.open(f"{url}/server_info?config_format=json", timeout=max(timeout_s, SERVER_INFO_TIMEOUT_S)) as r:
            cfg = json.loads(r.read().decode("utf-8")).get("vllm_config") or {}
        out.update(config_facts(cfg))
    except (urllib.error.URLError, OSError, ValueError, AttributeError):
        pass
    try:
        with direct.open(f"{url}/metrics", timeout=timeout_s) as r:
            text = r.read().decode("utf-8", "replace")
        m = re.search(r"^vllm:cache_config_info\{([^}]*)\}", text, re.M)
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1))) if m else {}
        if "gpu_memory_utilization" in labels:
            out.setdefault("gpu_memory_utilization", float(labels["gpu_memory_utilization"]))
        if labels.get("enable_prefix_caching") in ("True", "False"):
            out.setdefault("enable_prefix_caching", labels["enable_prefix_caching"] == "True")
    except (urllib.error.URLError, OSError, ValueError):
        pass
    try:
        with direct.open(f"{url}/v1/models", timeout=timeout_s) as r:
            models = json.loads(r.read().decode("utf-8"))
        lengths = [d.get("max_model_len") for d in models.get("data", []) if isinstance(d, dict)]
        if lengths and isinstance(lengths[0], int):
            out.setdefault("max_model_len", lengths[0])
    except (urllib.error.URLError, OSError, ValueError, AttributeError):
        pass
    return out


def config_facts(cfg: dict) -> dict:
    """The settings a pass declares, from a server's VllmConfig as ``/server_info?config_format=json``
    gives it (``cfg``: its ``vllm_config``): ``max_num_seqs``, ``max_num_batched_tokens``,
    ``max_model_len``, ``dtype`` (without "torch."), ``enforce_eager``, ``gpu_memory_utilization``,
    ``enable_prefix_caching``; a value of another type than expected is left out. A pooling
    model's ``pooling``: its pooler's POOLER_KEYS as strings (None where unset)."""
    def section(name: str) -> dict:
        value = cfg.get(name)
        return value if isinstance(value, dict) else {}

    sched, model, cache = section("scheduler_config"), section("model_config"), section("cache_config")
    found: dict[str, tuple[object, type]] = {
        "max_num_seqs": (sched.get("max_num_seqs"), int),
        "max_num_batched_tokens": (sched.get("max_num_batched_tokens"), int),
        "max_model_len": (model.get("max_model_len"), int), "dtype": (model.get("dtype"), str),
        "enforce_eager": (model.get("enforce_eager"), bool),
        "gpu_memory_utilization": (cache.get("gpu_memory_utilization"), float),
        "enable_prefix_caching": (cache.get("enable_prefix_caching"), bool)}
    out: dict = {k: v for k, (v, kind) in found.items()
                 if isinstance(v, kind) and (kind is bool or not isinstance(v, bool))}
    if isinstance(out.get("dtype"), str):
        out["dtype"] = out["dtype"].removeprefix("torch.")
    pooler = model.get("pooler_config")
    if isinstance(pooler, dict):  # as the offline worker reports its pooler (lab.engines.vllm.pooling_mismatch)
        out["pooling"] = {k: None if pooler[k] is None else str(pooler[k]) for k in POOLER_KEYS if k in pooler}
    return out
