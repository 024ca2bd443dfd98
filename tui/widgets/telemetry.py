"""Live host telemetry: GPU (NVML where present), CPU and RAM (psutil), and its widget.

A telemetry *source* is a callable returning one sample dict; the app polls it from a
thread worker. Tests inject a fixed source so snapshots hold no live values.
"""

from __future__ import annotations

from typing import Callable

from textual.widgets import Static

TelemetrySource = Callable[[], dict]


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.1f}"


class HostTelemetry:
    """Reads psutil every call and NVML when a driver answers (initialised once).

    Sample: {"cpu_percent": float, "ram_used_bytes": int, "ram_total_bytes": int,
    "gpus": [{"index", "name", "util_percent", "mem_used_bytes", "mem_total_bytes"}],
    "gpu_note": str ('' when NVML answered)}.
    """

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

    def __call__(self) -> dict:
        vm = self.psutil.virtual_memory()
        gpus = []
        if self.nvml is not None:
            n = self.nvml
            for i in range(n.nvmlDeviceGetCount()):
                h = n.nvmlDeviceGetHandleByIndex(i)
                mem = n.nvmlDeviceGetMemoryInfo(h)
                name = n.nvmlDeviceGetName(h)
                gpus.append({"index": i, "name": name.decode() if isinstance(name, bytes) else name,
                             "util_percent": n.nvmlDeviceGetUtilizationRates(h).gpu,
                             "mem_used_bytes": int(mem.used), "mem_total_bytes": int(mem.total)})
        return {"cpu_percent": self.psutil.cpu_percent(None), "ram_used_bytes": int(vm.used),
                "ram_total_bytes": int(vm.total), "gpus": gpus, "gpu_note": self.note}


def fixed_telemetry(sample: dict) -> TelemetrySource:
    """A source that always returns ``sample`` (deterministic tests and snapshots)."""
    return lambda: dict(sample)


def render_sample(s: dict | None) -> str:
    """Two short lines: CPU/RAM, then one GPU line (device-level NVML figure) or the reason."""
    if not s:
        return "telemetry: waiting for the first reading"
    line = (f"CPU {s['cpu_percent']:5.1f} %   RAM {_gib(s['ram_used_bytes'])}/"
            f"{_gib(s['ram_total_bytes'])} GiB (host, psutil)")
    gpus = s.get("gpus") or []
    if gpus:
        g = "   ".join(f"GPU{g['index']} {g['util_percent']:3d} % {_gib(g['mem_used_bytes'])}/"
                       f"{_gib(g['mem_total_bytes'])} GiB" for g in gpus)
        return f"{line}\n{g} (device level, NVML)"
    return f"{line}\n{s.get('gpu_note') or 'no GPU reported'}"


class Telemetry(Static):
    """Shows the latest sample (``show``); the app feeds it from TelemetrySample messages."""

    DEFAULT_CSS = "Telemetry { height: 2; }"

    def show(self, sample: dict | None) -> None:
        self.update(render_sample(sample))
