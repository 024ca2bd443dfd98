"""Live host telemetry: GPU (NVML where present), CPU and RAM (psutil), and its widget.

A telemetry *source* is a callable returning one HostSample; the app polls it from a
thread worker. Tests inject a fixed source so snapshots hold no live values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from textual.widgets import Static


@dataclass(frozen=True)
class GpuReading:
    """One GPU's device-level reading (NVML): ``index`` NVML's device index, ``name``,
    ``util_percent`` utilisation over NVML's last sample period (0-100), ``mem_used_bytes`` /
    ``mem_total_bytes`` device memory (bytes)."""

    index: int
    name: str
    util_percent: int
    mem_used_bytes: int
    mem_total_bytes: int


@dataclass(frozen=True)
class HostSample:
    """One host reading (HostTelemetry): ``cpu_percent`` host CPU use since the last reading
    (psutil, 0-100), ``ram_used_bytes`` / ``ram_total_bytes`` host RAM; ``gpus`` one reading per
    GPU NVML sees (empty without NVML); ``gpu_note`` why there is none ("" when NVML answered)."""

    cpu_percent: float
    ram_used_bytes: int
    ram_total_bytes: int
    gpus: tuple[GpuReading, ...] = ()
    gpu_note: str = ""


TelemetrySource = Callable[[], HostSample]


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.1f}"


class HostTelemetry:
    """Reads psutil every call and NVML when a driver answers (initialised once): a HostSample."""

    def __init__(self) -> None:
        import psutil

        self.psutil = psutil
        psutil.cpu_percent(None)  # first call primes the counter
        self.nvml = None
        self.note = ""
        try:
            from lab.facts.host import nvml

            self.nvml = nvml()
        except Exception as exc:  # no NVIDIA driver, or AMD: say so, never 0 %
            self.note = f"no NVML ({type(exc).__name__}): GPU telemetry not measured"

    def __call__(self) -> HostSample:
        vm = self.psutil.virtual_memory()
        gpus = []
        if self.nvml is not None:
            n = self.nvml
            for i in range(n.nvmlDeviceGetCount()):
                h = n.nvmlDeviceGetHandleByIndex(i)
                mem = n.nvmlDeviceGetMemoryInfo(h)
                name = n.nvmlDeviceGetName(h)
                gpus.append(GpuReading(i, name.decode() if isinstance(name, bytes) else name,
                                       n.nvmlDeviceGetUtilizationRates(h).gpu, int(mem.used), int(mem.total)))
        return HostSample(self.psutil.cpu_percent(None), int(vm.used), int(vm.total), tuple(gpus), self.note)


def fixed_telemetry(sample: HostSample) -> TelemetrySource:
    """A source that always returns ``sample`` (deterministic tests and snapshots)."""
    return lambda: sample


def render_sample(s: HostSample | None, error: str = "") -> str:
    """Two short lines: CPU/RAM, then one GPU line (device-level NVML figure) or the reason;
    ``error``: why the last reading failed (shown instead)."""
    if error:
        return f"telemetry: not read ({error})"
    if not s:
        return "telemetry: waiting for the first reading"
    line = (f"CPU {s.cpu_percent:5.1f} %   RAM {_gib(s.ram_used_bytes)}/"
            f"{_gib(s.ram_total_bytes)} GiB (host, psutil)")
    if s.gpus:
        g = "   ".join(f"GPU{g.index} {g.util_percent:3d} % {_gib(g.mem_used_bytes)}/"
                       f"{_gib(g.mem_total_bytes)} GiB" for g in s.gpus)
        return f"{line}\n{g} (device level, NVML)"
    return f"{line}\n{s.gpu_note or 'no GPU reported'}"


class Telemetry(Static):
    """Shows the latest sample (``show``); the app feeds it from TelemetrySample messages."""

    DEFAULT_CSS = "Telemetry { height: 2; }"

    def show(self, sample: HostSample | None, error: str = "") -> None:
        self.update(render_sample(sample, error))
