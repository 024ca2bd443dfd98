"""Local launcher: one fresh Python process per pass, for hosts without a Docker engine.

Used on rentals that are themselves containers. The manifest then says "no container
isolation". An optional address-space limit (RLIMIT_AS) lets a host-memory OOM happen
for real, as a failure row with the items completed.

A pass's processes are its runner's session and every process carrying ``PASS_ENV`` (the
pass folder) in its environment, which children inherit, so a double-forked daemon that left
the session is still found. When the runner exits, whatever of them is left is killed and
listed in the outcome (``extra["leftover_processes"]``); the event channel is read at most
``PASS_DRAIN_S`` more, so nothing a pass leaves behind can hold the orchestrator.
"""

from __future__ import annotations

import os
import queue
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import psutil

from lab.facts.constants import PASS_DRAIN_S, PASS_ENV
from lab.facts.files import REPO_ROOT
from lab.launchers.base import LaunchOutcome, LineSink, limit_reason
from lab.passes.spec import PassSpec

STOP_GRACE_S = 10.0  # a stopped pass's processes have this long to write their files, then SIGKILL


def pass_leftovers(session: int, pass_dir: Path | str) -> list[psutil.Process]:
    """Live processes of a pass besides its runner: those of session ``session`` (the runner's
    pid: it starts a new session) and those whose environment has PASS_ENV = ``pass_dir``
    (children keep it, daemons that left the session too). This process never counts."""
    mark = f"{PASS_ENV}={pass_dir}".encode()
    found = []
    for p in psutil.process_iter(["pid"]):
        pid = p.info["pid"]
        if pid == os.getpid():
            continue
        try:
            same = os.getsid(pid) == session
        except OSError:
            continue
        if not same:
            try:
                with open(f"/proc/{pid}/environ", "rb") as fh:
                    same = mark in fh.read().split(b"\0")
            except OSError:  # another user's process, or gone
                continue
        if same:
            found.append(p)
    return found


def end_leftovers(session: int, pass_dir: Path | str) -> list[dict]:
    """SIGKILL every process ``pass_leftovers`` finds and wait for them (5 s at most); returns
    them as [{pid, name, cmd}] (cmd cut at 200 characters), for the pass's record."""
    procs = pass_leftovers(session, pass_dir)
    out = []
    for p in procs:
        try:
            out.append({"pid": p.pid, "name": p.name(), "cmd": " ".join(p.cmdline())[:200]})
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=5)
    return out


def stop_pass_tree(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """Stop a pass process and every process it started; returns within about ``grace_s`` s.

    SIGTERM (and SIGCONT, so a stopped process acts on it) to the pass's process group, then
    SIGKILL to the group after ``grace_s``. Processes it started in other sessions are
    listed first and get the same treatment: torchrun starts the workers of a multi-card pass
    in their own sessions (the group signal never reaches them) and waits 30 s for them to
    end, so a worker that does not act on torchrun's SIGTERM (stopped, hung) would outlive a
    pass killed after ``grace_s``.
    """
    try:
        tree = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        tree = []
    deadline = time.monotonic() + grace_s
    _signal_group(proc, signal.SIGTERM)
    _signal_group(proc, signal.SIGCONT)  # a stopped process acts on SIGTERM only once continued
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGKILL)
    for p in tree:
        try:
            p.send_signal(signal.SIGCONT)  # psutil checks the start time: never a recycled pid
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(tree, timeout=max(0.0, deadline - time.monotonic()))
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass


def kill_pass_tree(proc: subprocess.Popen) -> None:
    """SIGKILL a pass process's group and every process it started (other sessions included:
    torchrun's workers), then reap it: for a launch interrupted by Ctrl-C, SIGTERM or SIGHUP,
    when nothing may be left running with nothing watching it."""
    try:
        tree = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        tree = []
    _signal_group(proc, signal.SIGKILL)
    for p in tree:
        try:
            p.kill()
        except psutil.Error:
            pass
    proc.wait()
    psutil.wait_procs(tree, timeout=5)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:  # the whole group ended meanwhile
        pass


class LocalLauncher:
    """Runs ``python -m lab.passes.runner`` in a new process session.

    ``address_space_limit_bytes``: RLIMIT_AS for the pass process (None = unlimited).
    ``timeout_s``: a pass still running after this many seconds is killed (None = no limit).
    ``stall_s``: a pass that writes no event line for this many seconds is killed (None = no
    rule): a stopped (SIGSTOP) or hung runner fails once, with the reason, instead of running
    forever. The orchestrator sets both from the campaign's [timing].
    """

    name = "local"

    def __init__(self, python: str = sys.executable, address_space_limit_bytes: int | None = None,
                 env: dict | None = None, timeout_s: float | None = None, stall_s: float | None = None):
        self.timeout_s = timeout_s
        self.stall_s = stall_s
        self.python = python
        self.address_space_limit_bytes = address_space_limit_bytes
        self.env = env

    def describe(self) -> dict:
        return {"launcher": "local", "isolation": "no container isolation (local process)",
                "python": self.python, "address_space_limit_bytes": self.address_space_limit_bytes,
                **({"address_space_limit_scope": "each process of a pass (RLIMIT_AS, inherited): a multi-card "
                    "pass's torchrun and each of its workers has its own, not one for the pass"}
                   if self.address_space_limit_bytes else {})}

    def probe_compile_toolchain(self, kind: str) -> str:
        """'' when torch.compile can build ``kind`` ("cpu" or "gpu") kernels in this launcher's
        Python, else why not in one line (lab.passes.compile.COMPILER_PROBE)."""
        from lab.passes.compile import COMPILER_PROBE, parse_compiler_probe

        try:
            r = subprocess.run([self.python, "-c", COMPILER_PROBE, kind], check=False, capture_output=True,
                               text=True, env=dict(os.environ if self.env is None else self.env), timeout=600)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"the compiler probe did not run ({type(exc).__name__})"
        return parse_compiler_probe(r.stdout)

    def _preexec(self) -> None:
        if self.address_space_limit_bytes:
            lim = int(self.address_space_limit_bytes)
            resource.setrlimit(resource.RLIMIT_AS, (lim, lim))

    def launch(self, spec: PassSpec, pass_dir: Path, on_line: LineSink,
               should_stop: Callable[[], bool] = lambda: False) -> LaunchOutcome:
        env = dict(os.environ if self.env is None else self.env)
        env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        env.setdefault("MALLOC_ARENA_MAX", "2")
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        env.setdefault("HF_HUB_OFFLINE", "1")
        env[PASS_ENV] = str(pass_dir)
        log = open(pass_dir / "log.txt", "ab")
        proc = subprocess.Popen(
            [self.python, "-u", "-m", "lab.passes.runner", str(pass_dir / "pass.json")],
            stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, env=env,
            cwd=str(REPO_ROOT), start_new_session=True, preexec_fn=self._preexec)
        stopped = threading.Event()
        timed_out = threading.Event()
        ended = threading.Event()  # the pass process has exited: the watcher stops at once
        started = time.monotonic()
        last_line = [started]
        why = [""]

        def watch() -> None:
            while proc.poll() is None:
                why[0] = limit_reason(started, last_line[0], self.timeout_s, self.stall_s)
                if why[0] or should_stop():
                    (timed_out if why[0] else stopped).set()
                    stop_pass_tree(proc)
                    return
                ended.wait(0.5)

        lines: queue.Queue = queue.Queue()

        def read() -> None:  # the event channel, whole lines; None at its end
            assert proc.stdout is not None
            try:
                for raw in proc.stdout:
                    lines.put(raw)
            except (OSError, ValueError):  # closed under it: the launch is over
                pass
            lines.put(None)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        threading.Thread(target=read, daemon=True, name=f"events-{spec.pass_id}").start()
        try:
            exited_at = None
            while True:  # lines handled here, in the caller's thread (on_line writes its journal)
                try:
                    raw = lines.get(timeout=0.2)
                except queue.Empty:
                    if proc.poll() is None:
                        continue
                    exited_at = exited_at or time.monotonic()
                    if time.monotonic() - exited_at > PASS_DRAIN_S:
                        break  # a process the pass left holds the channel: it is ended below
                    continue
                if raw is None:
                    break
                line = raw.decode("utf-8", "replace").rstrip("\n")
                log.write(raw)
                last_line[0] = time.monotonic()
                on_line(line)
        except BaseException:  # a full disk writing the log or the journal, Ctrl-C, SIGTERM, SIGHUP
            stopped.set()     # (lab.service.campaigns.interrupt_on_signals): never leave the pass running
            ended.set()
            kill_pass_tree(proc)
            end_leftovers(proc.pid, pass_dir)
            try:
                log.close()
            except OSError:
                pass
            raise
        code = proc.wait()
        ended.set()
        watcher.join()  # a stopped pass: until the processes it started in other sessions are gone too
        leftovers = end_leftovers(proc.pid, pass_dir)  # their end closes the channel: the reader ends
        try:
            log.close()
        except OSError:  # a full disk while flushing the log: the outcome still counts
            pass
        killed = (code == -signal.SIGKILL and self.address_space_limit_bytes is not None
                  and not timed_out.is_set() and not stopped.is_set())
        note = "stopped by the user" if stopped.is_set() else why[0] if timed_out.is_set() else ""
        return LaunchOutcome(code, killed_host_memory=killed, isolation="no container isolation (local process)",
                             note=note, extra={"pid": proc.pid,
                                               **({"leftover_processes": leftovers} if leftovers else {})})
