"""A pass's window conditions as result.json holds them (``conditions``, written by
lab.passes.conditions.WindowConditions.stop, or for a multi-card pass its worst card's with
``card`` and ``starved_cards``, lab.passes.multicard), decoded once by
lab.report.condition_cells and read by attribute.

Units: seconds, CPUs, bytes, MHz; shares 0-1. A field the record does not hold is None (UNSET
where its absence means something of its own: a runner that predates the reading).
"""

from __future__ import annotations

import msgspec

from lab.report.pass_row import Number


class GpuClocks(msgspec.Struct, frozen=True):
    """The device at one end of the window (lab.passes.conditions.gpu_state): SM clock and its
    maximum (MHz), NVML's clock event reasons set, whether one of them is a slowdown; or
    ``reason``, why they were not read. ``throttle_reasons`` UNSET: not read."""

    sm_clock_mhz: Number | None = None
    sm_clock_max_mhz: Number | None = None
    throttle_reasons: list[str] | msgspec.UnsetType = msgspec.UNSET
    throttled: bool | None = None
    reason: str | None = None


class HostLimits(msgspec.Struct, frozen=True):
    """The limits the pass ran under (lab.passes.conditions.host_limits): {name: value or None}
    (bytes; ``pids_max`` processes) and {name: where it was read, or why it is None}."""

    values: dict[str, int | None] = {}
    sources: dict[str, str] = {}


class PassConditions(msgspec.Struct, frozen=True, kw_only=True):
    """One pass's (or its worst card's) conditions over the measured window: the fields the raw
    table's CONDITIONS cells and notes read (lab.report.condition_cells, which names each)."""

    cpu_time_s: Number | None = None
    engine_cpu_time_s: Number | None = None
    cpu_share: Number | None = None
    cpu_affinity: int | None = None
    cpu_quota: Number | None = None
    cpus_available: Number | None = None
    load_1m_start: Number | None = None
    load_1m_end: Number | None = None
    steal_share: Number | None = None
    limits: HostLimits | None = None
    starved: bool | None = None
    starved_reason: str | None = None
    gpu_start: GpuClocks | None = None
    gpu_end: GpuClocks | None = None
    reasons: dict[str, str] = {}
    """{cell or reading: why it is empty}."""
    card: int | None = None
    starved_cards: list[int] | None = None
    """A multi-card pass: the rank whose conditions these are, and the ranks of every starved card."""
    engine_processes: int | msgspec.UnsetType | None = msgspec.UNSET
    """Engine processes read at the window's end; UNSET: the runner predates that reading."""
    engine_processes_missed: int | None = None
