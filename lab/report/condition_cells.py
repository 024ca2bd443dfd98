"""The conditions a pass ran under, as raw-table cells, and the starved passes of a variant.

Cells (``CONDITIONS``, read from ``result.json`` ``conditions``, written by
lab.passes.conditions.WindowConditions around the measured window):

- ``cpu_time_s``: the pass process's CPU time (user + system, all threads) over the window;
- ``engine_cpu_time_s``: a pass whose engine runs in its own processes (vLLM): the CPU time of
  that process tree over the window (empty for an engine in the pass process);
- ``cpu_share``: (``cpu_time_s`` + ``engine_cpu_time_s``) / (window wall s x min(CPUs needed, CPUs
  available)); CPUs needed = torch's threads on a CPU device, 1 on a GPU;
- ``cpu_affinity``: CPUs the process could run on; ``cpu_quota``: CPUs its cgroup quota
  allows (empty: no quota, reason in notes); ``cpus_available``: the smaller of the two;
- ``load_1m_start`` / ``load_1m_end``: the host's 1-minute load average;
- ``steal_share``: share of all CPUs' time stolen by the hypervisor during the window;
- ``memory_max_bytes`` / ``pids_max``: the cgroup memory and process limits the pass ran under
  (empty: none set, where it looked in notes); ``limits``: every limit set, in one cell
  (lab.passes.conditions.host_limits, limits_text); all three empty for a pass whose runner
  predates them;
- ``starved`` (True/False) and ``starved_reason``: lab.passes.conditions.starvation, the one rule;
- ``gpu_sm_clock_mhz_start`` / ``_end`` and ``gpu_throttle_start`` / ``_end`` ("none" or the
  NVML clock event reasons joined by "+"): the device at both ends of the window.

A cell that was not measured is empty, and ``notes`` says why (SPEC 3.10).
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from lab.passes.conditions import limits_text
from lab.report.conditions_record import GpuClocks, PassConditions

CONDITIONS = ("cpu_time_s", "engine_cpu_time_s", "cpu_share", "cpu_affinity", "cpu_quota", "cpus_available",
              "load_1m_start", "load_1m_end", "steal_share", "memory_max_bytes", "pids_max", "limits", "starved",
              "starved_reason", "gpu_sm_clock_mhz_start",
              "gpu_sm_clock_mhz_end", "gpu_throttle_start", "gpu_throttle_end")
INT_CONDITIONS = ("cpu_affinity", "memory_max_bytes", "pids_max", "gpu_sm_clock_mhz_start", "gpu_sm_clock_mhz_end")
NOT_RECORDED = ("window conditions not recorded: the pass ended before its measured window "
                "(or its runner predates them)")


def condition_cells(conditions: dict | None, running: bool, own_engine: bool = False) -> tuple[dict, list[str]]:
    """({column: value} for ``CONDITIONS``, notes) from one pass's result ``conditions``
    (lab.passes.records.PassResult.conditions, decoded here once into a PassConditions); every cell
    None with one note when the pass recorded no conditions (``running``: no note yet). ``own_engine``:
    the pass's engine runs in its own processes (a variant with engine "vllm"), so an empty
    ``engine_cpu_time_s`` needs its reason even when the runner that wrote the pass predates the
    engine's reading."""
    if not conditions:
        return {k: None for k in CONDITIONS}, [] if running else [NOT_RECORDED]
    c = msgspec.convert(conditions, PassConditions)
    g0, g1 = c.gpu_start or GpuClocks(), c.gpu_end or GpuClocks()
    lim = c.limits if c.limits is not None and (c.limits.values or c.limits.sources) else None
    values = lim.values if lim is not None else {}
    cells = {"cpu_time_s": c.cpu_time_s, "engine_cpu_time_s": c.engine_cpu_time_s, "cpu_share": c.cpu_share,
             "cpu_affinity": c.cpu_affinity, "cpu_quota": c.cpu_quota, "cpus_available": c.cpus_available,
             "load_1m_start": c.load_1m_start, "load_1m_end": c.load_1m_end, "steal_share": c.steal_share,
             "memory_max_bytes": values.get("memory_max_bytes"), "pids_max": values.get("pids_max"),
             "limits": limits_text({"values": values}) if lim is not None else None,
             "starved": bool(c.starved), "starved_reason": c.starved_reason or None,
             "gpu_sm_clock_mhz_start": g0.sm_clock_mhz, "gpu_sm_clock_mhz_end": g1.sm_clock_mhz,
             "gpu_throttle_start": _reasons(g0), "gpu_throttle_end": _reasons(g1)}
    notes = []
    if c.card is not None:
        notes.append(f"window conditions of card {c.card}, the worst card (starved cards: "
                     f"{c.starved_cards or 'none'}); each card's in result.json per_card")
    if c.starved:
        notes.append(f"starved (lab.passes.conditions.starvation): {c.starved_reason}: its duration "
                     "measures a host short of CPU, not the variant")
    reasons = c.reasons
    for value, key, col in ((c.cpu_time_s, "cpu_time_s", "cpu_time_s and cpu_share"),
                            (c.cpu_quota, "cpu_quota", "cpu_quota"), (c.steal_share, "steal_share", "steal_share")):
        if value is None and reasons.get(key):
            notes.append(f"empty {col}: {reasons.get(key)}")
    if lim is not None:
        for key in ("memory_max_bytes", "pids_max"):
            if values.get(key) is None:
                notes.append(f"empty {key}: {lim.sources.get(key) or 'not read'}")
    engine_why = reasons.get("engine_cpu_time_s")
    if c.engine_cpu_time_s is None and engine_why:
        notes.append(f"empty engine_cpu_time_s (cpu_share is the pass process's alone): {engine_why}")
    elif own_engine and c.engine_processes is msgspec.UNSET:
        notes.append("empty engine_cpu_time_s (cpu_share is the pass process's alone): the engine's processes "
                     "were not read; the runner that wrote this pass predates that reading")
    if c.engine_processes_missed:
        notes.append(f"engine_cpu_time_s leaves out {c.engine_processes_missed} engine process(es) that exited "
                     "in the window with their parent (lab.passes.conditions.tree_cpu_seconds)")
    gpu_why = sorted({why for k in ("gpu_start", "gpu_end") if (why := reasons.get(k))})
    notes += [f"empty GPU clock cells: {w}" for w in gpu_why]
    if g1.throttled or g0.throttled:
        notes.append(f"GPU throttled in the window: start {_reasons(g0)}, end {_reasons(g1)} "
                     f"(SM clock {g0.sm_clock_mhz} -> {g1.sm_clock_mhz} MHz, "
                     f"max {g1.sm_clock_max_mhz})")
    return cells, notes


def _reasons(gpu: GpuClocks) -> str | None:
    """A throttle cell: NVML's reasons joined by "+", "none" when none is set, None when not read."""
    if gpu.throttle_reasons is msgspec.UNSET:
        return None
    return "+".join(gpu.throttle_reasons) or "none"


def pass_name(pass_id: str, host: str = "") -> str:
    """A pass as every output names it: its id, or 'A rtx-4090 / p001-r1-...' given its host's tag
    (a comparison of several hosts: rentals run the same plan, so the same pass ids). The one
    formatter of "host + pass"."""
    return f"{host} / {pass_id}" if host else pass_id


@dataclass(frozen=True)
class StarvedPass:
    """A pass ok whose measured window was starved of CPU (lab.passes.conditions.starvation; raw
    table ``starved``): its ``pass_id``, the ``reason`` the raw table gives ('' when none), and
    ``host``, the tag of the rental it ran on in a comparison of several (its lines name the host
    with it, :func:`pass_name`; '' within one campaign). summary.json holds {"pass_id", "reason"}."""

    pass_id: str
    reason: str = ""
    host: str = ""

    def to_json(self) -> dict:
        """summary.json's {"pass_id", "reason"} (the host is a comparison's, never written there)."""
        return {"pass_id": self.pass_id, "reason": self.reason}

    @classmethod
    def from_json(cls, d: dict) -> StarvedPass:
        """A summary.json record; raises msgspec.ValidationError for one without a str ``pass_id``."""
        return msgspec.convert(d, cls)

    @property
    def name(self) -> str:
        """The pass as lines name it (:func:`pass_name`)."""
        return pass_name(self.pass_id, self.host)


def starved_text(passes) -> str:
    """'' when ``passes`` (StarvedPass records; in a comparison of several hosts each is named
    with its host) is empty; else one clause naming them: the one wording for pairs, the
    decision note and the Results screen."""
    if not passes:
        return ""
    names = ", ".join(p.name for p in passes)
    return (f"starved pass(es) among these durations: {names} "
            "(lab.passes.conditions: the host gave them less CPU than they needed), so the gap or the "
            "spread may be the host's, not the variants'")
