"""The conditions a pass's measured window ran under, and whether they starved it.

A duration says as much about the host as about the variant: on a loaded 2-core host a pass
with threads 2 ran 17.1 s against 1.27 s for threads 1, and a pass inside a cgroup CPU quota
of 0.15 CPU ran 18.3 s against 5.0-7.3 s outside, with identical manifests (issue 19). So
each pass records, around its measured window (:class:`WindowConditions`):

- ``cpu_time_s``: the pass process's CPU time (user + system, every thread) over the window
  (``time.process_time``: CLOCK_PROCESS_CPUTIME_ID, nanoseconds; psutil's ``cpu_times`` count
  whole 10 ms ticks, too coarse for a 0.1 s window), next to its wall time and the torch threads;
- ``engine_cpu_time_s``: for a pass whose engine runs in its own processes (vLLM:
  lab.passes.backends.vllm_backend's ``pid``), the CPU time of that process and every
  descendant over the window (:func:`tree_cpu_times`, read at the window's start and end), counted
  in the CPU share beside ``cpu_time_s``: the pass process only sends the engine its requests;
  ``engine_processes`` / ``engine_processes_exited`` / ``engine_processes_missed``: how many were
  read at the end, how many read at the start were gone by then, and how many of those could not
  be counted (:func:`tree_cpu_seconds`: their window time is left out, never guessed);
- ``cpu_affinity``: the CPUs the process may run on (``os.sched_getaffinity``);
  ``cpu_quota``: the CPUs its cgroup quota allows (:func:`cpu_quota`, cgroup v2 ``cpu.max``
  or v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``; None with the reason when no quota
  applies); ``cpus_available``: the smaller of the two;
- ``load_1m_start`` / ``load_1m_end``: the host's 1-minute load average (``os.getloadavg``);
- ``steal_share``: the share of all CPUs' time the hypervisor took during the window
  (``/proc/stat`` steal column; None with the reason where the kernel does not report it);
- ``gpu_start`` / ``gpu_end``: the GPU's SM and memory clocks and its throttle reasons
  (NVML on CUDA, amdsmi on ROCm; :func:`gpu_state`), so a throttled rental is visible;
- ``limits``: every other limit the host or container puts on the pass, read where it runs
  (:func:`host_limits`: the cgroup memory, swap and process limits, the resource limits, the
  size of /dev/shm), ``{"values": {name: value or None}, "sources": {name: where read or why
  None}}``;
- ``starved`` and ``starved_reason``: :func:`starvation`, the one rule.

Missing figures are None with a reason in ``reasons``, never 0 (SPEC 3.10).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from lab.facts.errors import clip
from lab.facts.numbers import beside

STARVED_SHARE = 0.5
"""A CPU pass whose window CPU share (:func:`cpu_share`) is below this fraction was starved."""
STARVED_STEAL = 0.1
"""A pass during whose window the hypervisor stole at least this share of the CPUs' time was starved."""
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
PROC_STAT = Path("/proc/stat")

# NVML clock event ("throttle") reasons, nvml.h nvmlClocksEventReason* / nvmlClocksThrottleReason*
NVML_REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap",
                0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
                0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}
THROTTLING = frozenset({"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                        "hw_power_brake_slowdown"})
"""Reasons that lower the clocks under load (power, thermal, hardware slowdown); idle and
application settings are not throttling."""


def starvation(cond: dict) -> str:
    """The one starvation rule: '' when the window's conditions did not starve the pass, else why.

    ``cond``: a :class:`WindowConditions` record (``cpus_needed``, ``cpus_available``,
    ``cpu_share``, ``steal_share``, ``device``). A pass was starved when any of:

    1. the CPUs it may use (``cpus_available``: the smaller of its affinity and its cgroup
       quota) are fewer than it needs (``cpus_needed``: torch's threads on a CPU device, 1 on
       a GPU, whose host thread tokenizes, transfers and launches every kernel; times the
       workers a multi-card pass runs on this host). Threads
       beyond the CPUs wait for each other at every parallel region (OpenMP barriers): the
       17.1 s against 1.27 s of issue 19 was 2 threads on a loaded 2-core host; a quota of
       0.15 CPU starves even one thread;
    2. on a CPU device, its window CPU share (:func:`cpu_share`) is below ``STARVED_SHARE``
       (0.5): it got less than half the CPU time its threads could have used on the CPUs it
       had, because other processes (or the hypervisor) took the rest. A CPU-bound pass on
       free CPUs keeps this near 1 (torch's intra-op threads spin between parallel regions);
       not applied on a GPU, whose host waits on the device by design;
    3. the hypervisor stole at least ``STARVED_STEAL`` (10 %) of all CPUs' time during the
       window (``steal_share``): the host was not the machine the durations describe.

    A figure that was not measured (None) proves nothing either way and triggers no rule.
    """
    why = []
    engine = cond.get("engine_cpu_time_s")
    got = (cond.get("cpu_time_s") or 0.0) + (engine or 0.0)
    of = "" if engine is None else (f" ({cond.get('cpu_time_s'):.3f} s the pass process, {engine:.3f} s its "
                                    f"engine's {cond.get('engine_processes')} process(es))")
    need, avail = cond.get("cpus_needed"), cond.get("cpus_available")
    if need is not None and avail is not None and avail < need:
        why.append(f"{need} CPU(s) needed ({cond.get('needs', 'threads')}), {avail:g} available "
                   f"({cond.get('available_from', 'affinity and quota')})")
    share = cond.get("cpu_share")
    if share is not None and not str(cond.get("device", "cpu")).startswith("cuda") and share < STARVED_SHARE:
        why.append(f"CPU share {beside(share, STARVED_SHARE)} < {STARVED_SHARE}: the window got {got:.3f} s of "
                   f"CPU time{of} in {cond.get('wall_s'):.3f} s on {cond.get('cpus_usable', 1):g} usable CPU(s)")
    steal = cond.get("steal_share")
    if steal is not None and steal >= STARVED_STEAL:
        why.append(f"the hypervisor stole {steal:.0%} of the CPUs' time (>= {STARVED_STEAL:.0%})")
    return "; ".join(why)


def cpu_share(cpu_time_s: float | None, wall_s: float | None, cpus_needed: float | None,
              cpus_available: float | None) -> float | None:
    """CPU time over the window / (wall s x min(cpus needed, cpus available)), rounded to 4
    places; 1 = every CPU the pass could use was busy for it the whole window. None when a
    figure is missing or the wall time is 0. A worker of a multi-card pass passes its usable
    part (min(its threads, available / workers on the host)) as ``cpus_available``."""
    if cpu_time_s is None or not wall_s or not cpus_needed:
        return None
    usable = min(float(cpus_needed), cpus_available) if cpus_available else float(cpus_needed)
    return round(cpu_time_s / (wall_s * usable), 4) if usable > 0 else None


def tree_cpu_times(pid: int | None) -> dict[int, tuple[float, float, int]]:
    """{pid: (create time, CPU s, parent pid)} of process ``pid`` and all its descendants
    (psutil ``children(recursive=True)``); CPU s is user + system + the times of the children it
    has reaped (Linux ``utime + stime + cutime + cstime``, whole clock ticks: 10 ms). A process
    that vanishes or refuses while being read is left out. {} for None or a gone ``pid``."""
    if pid is None:
        return {}
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return {}
    out = {}
    for p in procs:
        try:
            with p.oneshot():
                t = p.cpu_times()
                out[p.pid] = (p.create_time(), t.user + t.system + t.children_user + t.children_system, p.ppid())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def tree_cpu_seconds(start: dict[int, tuple[float, float, int]],
                     end: dict[int, tuple[float, float, int]]) -> tuple[float, int, int]:
    """(CPU s the process tree used between two :func:`tree_cpu_times` readings, processes of
    ``start`` gone at ``end``, of which missed). A process read at both (same pid and create
    time) counts its difference; one started in between counts all its time; one that exited in
    between is counted through its parent's children times when its parent is still in the tree
    (its parent reaped it: its whole time moved there, so its ``start`` reading, the part before
    the window, is taken off); one whose parent is gone too is missed: its time in the window is
    not counted (an undercount, never a guess), and the missed count says how many."""
    total, gone, missed = 0.0, 0, 0
    for pid, (created, cpu, _) in end.items():
        before = start.get(pid)
        total += cpu - before[1] if before and before[0] == created else cpu
    for pid, (created, cpu, parent) in start.items():
        after = end.get(pid)
        if after is None or after[0] != created:
            gone += 1
            if parent in end and end[parent][0] == start.get(parent, end[parent])[0]:
                total -= cpu
            else:
                missed += 1
    return round(total, 4), gone, missed


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _cgroup_place(controller: str, cgroup_root: Path, proc_cgroup: Path) -> tuple[str, Path, str] | str:
    """("v1" or "v2", the controller's mount, the process's cgroup path in it) of ``controller``
    for the process whose ``/proc/<pid>/cgroup`` is ``proc_cgroup``, or why none was found.
    cgroup v1: the line ``N:...<controller>...:/path``, mounted as ``<root>/<controllers>`` (or
    ``cpu,cpuacct`` / the controller's own name); cgroup v2: the line ``0::/path`` under the root."""
    text = _read(proc_cgroup)
    if text is None:
        return f"{proc_cgroup} absent (not Linux)"
    v1 = v2 = None
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        elif controller in parts[1].split(","):
            v1 = (parts[1], parts[2])
    if v1 is not None:
        mounts = [cgroup_root / v1[0], *([cgroup_root / "cpu,cpuacct"] if controller == "cpu" else []),
                  cgroup_root / controller]
        mount = next((m for m in mounts if m.is_dir()), None)
        if mount is None:
            return f"cgroup v1 {controller} controller not mounted under {cgroup_root}"
        return "v1", mount, v1[1]
    if v2 is not None:
        return "v2", cgroup_root, v2
    return f"{proc_cgroup} names no {controller} controller"


def cpu_quota(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> tuple[float | None, str]:
    """(CPUs the cgroup CPU quota allows this process, where it was read), or (None, why none).

    ``proc_cgroup``: the process's ``/proc/self/cgroup``; ``cgroup_root``: where the cgroup
    file systems are mounted. cgroup v1 (a line ``N:...cpu...:/path``): ``cpu.cfs_quota_us``
    / ``cpu.cfs_period_us`` of the cpu controller's folder (``cpu,cpuacct`` or ``cpu``),
    quota -1 = none. cgroup v2 (the line ``0::/path``): ``cpu.max`` ("QUOTA PERIOD", "max" =
    none). The effective quota is the smallest one on the path from the process's cgroup up to
    the mount's root; inside a container the mount's root is the container's own cgroup (its
    path under the host's hierarchy is not there), so that folder is read.
    """
    place = _cgroup_place("cpu", cgroup_root, proc_cgroup)
    if isinstance(place, str):
        return None, f"no CPU quota read: {place}"
    version, mount, path = place
    if version == "v1":
        return _smallest(mount, path, _v1_quota, "cgroup v1 cpu.cfs_quota_us", "a CPU quota")
    return _smallest(mount, path, _v2_quota, "cgroup v2 cpu.max", "a CPU quota")


def _v1_quota(folder: Path) -> float | None:
    """cpu.cfs_quota_us / cpu.cfs_period_us of ``folder``; None: no quota (-1) or unreadable."""
    try:
        quota, period = int(_read(folder / "cpu.cfs_quota_us") or "-1"), int(_read(folder / "cpu.cfs_period_us") or "0")
    except ValueError:
        return None
    return quota / period if quota >= 0 and period > 0 else None


def _v2_quota(folder: Path) -> float | None:
    """cpu.max of ``folder`` ("QUOTA PERIOD"); None: "max" (no quota), absent or unreadable."""
    words = (_read(folder / "cpu.max") or "").split()
    try:
        return int(words[0]) / int(words[1]) if len(words) >= 2 and words[0] != "max" and int(words[1]) > 0 else None
    except ValueError:
        return None


def _smallest(mount: Path, path: str, read, what: str, limit: str) -> tuple[float | None, str]:
    here = mount / path.strip("/")
    folders = [here, *[p for p in here.parents if p.is_relative_to(mount)]] if here.is_dir() else [mount]
    found = [(q, f) for f in folders if (q := read(f)) is not None]
    if not found:
        return None, f"not in {limit} ({what}: none set from {folders[0]} up to {mount})"
    q, f = min(found, key=lambda x: x[0])
    return round(q, 4), f"{what} at {f}"


V1_UNLIMITED = 1 << 62
"""A cgroup v1 memory limit at or above this is the kernel's "no limit" (it writes
PAGE_COUNTER_MAX rounded to pages, 9223372036854771712 on 4 KiB pages)."""

CGROUP_LIMITS = {
    # name: (controller, v1 file, v2 file)
    "memory_max_bytes": ("memory", "memory.limit_in_bytes", "memory.max"),
    "memory_swap_max_bytes": ("memory", "memory.memsw.limit_in_bytes", "memory.swap.max"),
    "pids_max": ("pids", "pids.max", "pids.max"),
}
"""The cgroup limits a pass records besides the CPU quota (:func:`host_limits`): the smallest
value from the process's cgroup up to the mount's root, as for ``cpu.max``. A container's
memory limit (Docker's ``--memory``; the Docker launcher sets one, lab.launchers.docker) is
``memory.max``; cgroup v1's ``memory.memsw`` counts memory and swap together."""

RLIMITS = {"rlimit_as_bytes": "RLIMIT_AS", "rlimit_data_bytes": "RLIMIT_DATA", "rlimit_nofile": "RLIMIT_NOFILE",
           "rlimit_nproc": "RLIMIT_NPROC"}
"""The process resource limits a pass records (soft limits, ``resource.getrlimit``; setrlimit(2))."""

FS_LIMITS = {"shm_bytes": Path("/dev/shm")}
"""File systems whose size bounds a pass (``os.statvfs``): /dev/shm holds the shared memory that
data-loader workers and multi-process engines pass tensors through (Docker's ``--shm-size``)."""


def _cgroup_value(file: str):
    def read(folder: Path) -> float | None:
        text = (_read(folder / file) or "").strip()
        if not text or text == "max":
            return None
        try:
            v = int(text)
        except ValueError:
            return None
        return None if v >= V1_UNLIMITED else v
    return read


def host_limits(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP,
                fs: dict[str, Path] | None = None) -> tuple[dict[str, int | None], dict[str, str]]:
    """Every limit the host or container puts on this process besides the CPU quota, read where
    the pass runs: ({name: value or None}, {name: where it was read, or why it is None}).

    Names and units: ``CGROUP_LIMITS`` (bytes; ``pids_max`` processes), ``RLIMITS`` (bytes; files;
    processes), ``FS_LIMITS`` (bytes). None: no limit set (the reason says "no limit" and where
    it looked) or not readable (the reason says why); never 0 for "unknown" (SPEC 3.10)."""
    values: dict[str, int | None] = {}
    where: dict[str, str] = {}
    for name, (controller, v1_file, v2_file) in CGROUP_LIMITS.items():
        place = _cgroup_place(controller, cgroup_root, proc_cgroup)
        if isinstance(place, str):
            values[name], where[name] = None, f"not read: {place}"
            continue
        version, mount, path = place
        file = v1_file if version == "v1" else v2_file
        v, src = _smallest(mount, path, _cgroup_value(file), f"cgroup {version} {file}", "a limit")
        values[name], where[name] = (int(v) if v is not None else None), src
    try:
        import resource
    except ImportError:  # not POSIX
        resource = None  # type: ignore[assignment]
    for name, const in RLIMITS.items():
        if resource is None or not hasattr(resource, const):
            values[name], where[name] = None, f"not read: no {const} on this system"
            continue
        soft, _hard = resource.getrlimit(getattr(resource, const))
        unlimited = soft == resource.RLIM_INFINITY
        values[name] = None if unlimited else int(soft)
        where[name] = f"{const} soft limit" + (": unlimited" if unlimited else "")
    for fs_name, fs_path in (FS_LIMITS if fs is None else fs).items():
        try:
            st = os.statvfs(fs_path)
        except OSError as exc:
            values[fs_name], where[fs_name] = None, f"not read: {fs_path}: {exc.strerror or exc}"
            continue
        values[fs_name], where[fs_name] = st.f_blocks * st.f_frsize, f"size of {fs_path} (statvfs)"
    return values, where


def limits_text(limits: dict | None) -> str | None:
    """One cell: every limit set, ``name value`` joined by ", " (bytes as GiB/MiB), "none set" when
    none is; None when the pass recorded no limits (its runner predates them)."""
    if not limits:
        return None
    values = limits.get("values") or {}

    def shown(name: str, v: int) -> str:
        if not name.endswith("_bytes"):
            return f"{name} {v}"
        return f"{name.removesuffix('_bytes')} " + (f"{v / 2**30:.2f} GiB" if v >= 2**30 else f"{v / 2**20:.1f} MiB")
    return ", ".join(shown(k, v) for k, v in values.items() if v is not None) or "none set"


def cpu_affinity() -> tuple[int | None, str]:
    """(CPUs this process may run on, source): ``os.sched_getaffinity``, else ``os.cpu_count``."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)), "os.sched_getaffinity"
    n = os.cpu_count()
    return n, "os.cpu_count (no affinity call on this system)" if n else "CPU count unknown"


def proc_stat_ticks(path: Path = PROC_STAT) -> tuple[int, int] | None:
    """(steal ticks, total ticks) summed over the host's CPUs from ``/proc/stat``'s ``cpu`` line
    (user nice system idle iowait irq softirq steal); None when the file or the steal column
    is absent."""
    text = _read(path)
    if not text or not text.startswith("cpu "):
        return None
    vals = [int(x) for x in text.splitlines()[0].split()[1:]]
    if len(vals) < 8:
        return None
    return vals[7], sum(vals[:8])


def gpu_state(device: str) -> dict:
    """{"sm_clock_mhz", "mem_clock_mhz", "sm_clock_max_mhz", "throttle_reasons", "throttled"} of
    torch's ``device`` now (NVML on CUDA, amdsmi on ROCm; matched by UUID or PCI id, never by
    index: lab.memory.gpu_map), or {"reason": why not read}. ``throttle_reasons``: names of
    NVML's clock event reasons set (``NVML_REASONS``); ``throttled``: one of them is a
    power, thermal or hardware slowdown (``THROTTLING``)."""
    if not device.startswith("cuda"):
        return {"reason": f"{device} pass: no GPU clocks"}
    import torch

    from lab.memory.gpu_map import GpuNotMatched, amdsmi_handle, nvml_handle, torch_identity

    try:
        if torch.version.hip:
            import amdsmi

            amdsmi.amdsmi_init()
            try:
                h = amdsmi_handle(amdsmi, torch_identity(device))
                gfx = amdsmi.amdsmi_get_clock_info(h, amdsmi.AmdSmiClkType.GFX)
                mem = amdsmi.amdsmi_get_clock_info(h, amdsmi.AmdSmiClkType.MEM)
                status = (amdsmi.amdsmi_get_gpu_metrics_info(h) or {}).get("throttle_status")
                return {"sm_clock_mhz": gfx.get("clk"), "mem_clock_mhz": mem.get("clk"),
                        "sm_clock_max_mhz": gfx.get("max_clk"),
                        "throttle_reasons": [] if not status else [f"amdsmi throttle_status {status}"],
                        "throttled": bool(status) if status is not None else None, "source": "amdsmi"}
            finally:
                amdsmi.amdsmi_shut_down()
        from lab.facts.host import nvml

        pynvml = nvml()
        h = nvml_handle(pynvml, torch_identity(device))
        get_reasons = (getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                       or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons)
        mask = int(get_reasons(h))
        names = [n for bit, n in NVML_REASONS.items() if mask & bit]
        return {"sm_clock_mhz": int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
                "mem_clock_mhz": int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)),
                "sm_clock_max_mhz": int(pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)),
                "throttle_reasons": names, "throttled": bool(THROTTLING.intersection(names)), "source": "NVML"}
    except ImportError as exc:
        return {"reason": f"GPU clocks not read: {exc.name or 'management library'} not installed"}
    except GpuNotMatched as exc:
        return {"reason": f"GPU clocks not read: {exc}"}
    except Exception as exc:  # no driver answering, a library/driver mismatch
        return {"reason": f"GPU clocks not read: {type(exc).__name__}: {clip(str(exc), 120)}"}


class WindowConditions:
    """Readings at the start and the end of one measured window (one pass, or one card).

    ``device``: the resolved device; ``threads``: torch's thread count in this process;
    ``workers_on_host``: processes of this pass on this host (a multi-card pass's workers share
    its CPUs: the pass needs each worker's CPUs once per worker, and each worker's share is
    judged against its part, ``cpus_available`` / workers, of what the host gives).
    Call :meth:`start` right before the window's first clock reading and :meth:`stop` with the
    window's wall seconds right after its last; :meth:`stop` returns the record (module doc).
    """

    def __init__(self, device: str, threads: int, workers_on_host: int = 1, engine_pid: int | None = None):
        self.device, self.threads, self.workers = device, threads, max(1, workers_on_host)
        self.engine_pid = engine_pid
        self._t0: dict = {}

    def start(self) -> None:
        self._t0 = {"gpu": gpu_state(self.device), "load": _load(), "stat": proc_stat_ticks(),
                    "engine": tree_cpu_times(self.engine_pid), "cpu": time.process_time()}

    def stop(self, wall_s: float | None) -> dict:
        cpu_end, engine_end = time.process_time(), tree_cpu_times(self.engine_pid)
        stat_end, load_end = proc_stat_ticks(), _load()
        gpu_end = gpu_state(self.device)
        t0 = self._t0
        reasons: dict[str, str] = {}
        cpu_s = round(cpu_end - t0["cpu"], 4) if t0 and wall_s is not None else None
        if cpu_s is None:
            reasons["cpu_time_s"] = "window not completed: no end reading"
        engine: dict[str, float | int | None] = {}
        if self.engine_pid is not None:
            engine = {"engine_cpu_time_s": None, "engine_processes": len(engine_end), "engine_processes_exited": None,
                      "engine_processes_missed": None}
            if cpu_s is not None and t0.get("engine") and engine_end:
                (engine["engine_cpu_time_s"], engine["engine_processes_exited"],
                 engine["engine_processes_missed"]) = tree_cpu_seconds(t0["engine"], engine_end)
            else:
                reasons["engine_cpu_time_s"] = (f"the engine's process {self.engine_pid} could not be read at the "
                                                "window's " + ("start" if not t0.get("engine") else "end"))
        affinity, _ = cpu_affinity()
        quota, quota_src = cpu_quota()
        if quota is None:
            reasons["cpu_quota"] = quota_src
        avail = min(x for x in (affinity, quota) if x is not None) if (affinity or quota) else None
        on_gpu = self.device.startswith("cuda")
        per_worker = 1 if on_gpu else max(1, self.threads)
        need = per_worker * self.workers
        usable = min(float(per_worker), avail / self.workers) if avail else float(per_worker)
        steal = None
        if t0.get("stat") and stat_end and stat_end[1] > t0["stat"][1]:
            steal = round((stat_end[0] - t0["stat"][0]) / (stat_end[1] - t0["stat"][1]), 4)
        else:
            reasons["steal_share"] = ("the kernel reports no steal time (/proc/stat has no steal column, "
                                      "or no /proc/stat)" if not stat_end
                                      else "no CPU tick elapsed in /proc/stat over the window")
        if on_gpu:
            reasons["cpu_share_rule"] = "share rule not applied on a GPU: its host thread waits on the device"
        for k, g in (("gpu_start", t0.get("gpu") or {}), ("gpu_end", gpu_end)):
            if "reason" in g:
                reasons[k] = g["reason"]
        rec = {"device": self.device, "wall_s": wall_s, "cpu_time_s": cpu_s, "threads": self.threads,
               "cpu_affinity": affinity, "cpu_quota": quota, "cpu_quota_source": quota_src,
               "cpus_available": avail, "cpus_needed": need, "workers_on_host": self.workers,
               "needs": ("1 host thread on a GPU" if on_gpu else f"torch threads {self.threads}")
               + (f" x {self.workers} workers on this host" if self.workers > 1 else ""),
               "available_from": f"affinity {affinity}" + (f", quota {quota:g} CPU" if quota is not None else
                                                           ", no quota"),
               "cpus_usable": round(usable, 4),
               **engine,
               "cpu_share": cpu_share(cpu_s + engine["engine_cpu_time_s"] if engine.get("engine_cpu_time_s") is not None
                                      and cpu_s is not None else cpu_s,
                                      wall_s, per_worker, avail / self.workers if avail else None),
               "load_1m_start": t0.get("load"), "load_1m_end": load_end, "steal_share": steal,
               "gpu_start": t0.get("gpu"), "gpu_end": gpu_end, "rule": "lab.passes.conditions.starvation"}
        values, where = host_limits()
        rec["limits"] = {"values": values, "sources": where}
        rec["starved_reason"] = starvation(rec)
        rec["starved"] = bool(rec["starved_reason"])
        rec["reasons"] = reasons
        return rec


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        return None
