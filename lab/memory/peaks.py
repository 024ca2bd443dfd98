"""Peak memory counters of one process, each with its scope; never added together.

- ``peak_allocated_bytes``: torch ``max_memory_allocated`` — tensors alive on the device.
- ``peak_reserved_bytes``: torch ``max_memory_reserved`` — held by the caching allocator.
- ``process_peak_rss_bytes``: Linux VmHWM of this process — host resident memory.
Peaks are reset before the measured window: torch ``reset_peak_memory_stats`` and, on
Linux, writing "5" to /proc/self/clear_refs resets VmHWM. Source: seed, "Usare la memoria
come criterio di fattibilità"; PyTorch docs, CUDA memory management.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from lab.facts.host import nvml

SCOPES = {
    "peak_allocated_bytes": "torch allocator: tensors on the GPU (max_memory_allocated)",
    "peak_reserved_bytes": "torch caching allocator: memory reserved on the GPU (max_memory_reserved)",
    "process_peak_rss_bytes": "host: this process's peak resident set (VmHWM, reset via clear_refs)",
    "device_used_bytes": "device-level used memory, all processes (NVML / amdsmi), read at window end",
}


@dataclass(frozen=True)
class Peaks:
    """Peak figures in bytes; None with a reason in ``reasons`` when not measured."""

    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    process_peak_rss_bytes: int | None
    device_used_bytes: int | None
    reasons: dict

    def to_json(self) -> dict:
        return {**asdict(self), "scopes": SCOPES}


def _status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def reset_rss_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux). Returns False where not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def current_rss_bytes() -> int | None:
    return _status_kb("VmRSS")


class PeakTracker:
    """Reset then read the peak counters for ``device`` ("cuda:0", "cpu", ...)."""

    def __init__(self, device: str):
        self.device = device
        self.is_gpu = device.startswith("cuda")
        self.rss_reset_ok = False

    def reset(self) -> None:
        if self.is_gpu:
            import torch

            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        self.rss_reset_ok = reset_rss_peak()

    def read(self) -> Peaks:
        reasons: dict = {}
        alloc = reserved = used = None
        if self.is_gpu:
            import torch

            alloc = int(torch.cuda.max_memory_allocated(self.device))
            reserved = int(torch.cuda.max_memory_reserved(self.device))
            used, why = device_used_bytes(self.device)
            if used is None:
                reasons["device_used_bytes"] = why
        else:
            why = "no CUDA/ROCm device in this pass (CPU): torch allocator counters do not apply"
            reasons.update(peak_allocated_bytes=why, peak_reserved_bytes=why, device_used_bytes=why)
        rss = _status_kb("VmHWM")
        if rss is None:
            reasons["process_peak_rss_bytes"] = "no /proc/self/status (not Linux)"
        elif not self.rss_reset_ok:
            reasons["process_peak_rss_bytes_note"] = "clear_refs not writable: peak since process start"
        return Peaks(alloc, reserved, rss, used, reasons)


def device_used_bytes(device: str) -> tuple[int | None, str]:
    """Device-level used memory (all processes): amdsmi on ROCm, NVML on CUDA; or (None, reason)."""
    import torch

    if torch.version.hip:
        return amdsmi_used_bytes(device)
    return nvml_used_bytes(device)


def nvml_used_bytes(device: str) -> tuple[int | None, str]:
    """Device-level used memory (all processes) via NVML, or (None, reason)."""
    try:
        pynvml = nvml()
    except ImportError:
        return None, "nvidia-ml-py not installed"
    except Exception as exc:  # NVML absent on ROCm, or driver mismatch
        return None, f"NVML unavailable: {type(exc).__name__}"
    from lab.memory.gpu_map import GpuNotMatched, nvml_handle, torch_identity

    try:
        handle = nvml_handle(pynvml, torch_identity(device))  # by UUID / PCI id, never by index
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used), ""
    except GpuNotMatched as exc:
        return None, str(exc)
    except Exception as exc:  # NVML absent on ROCm, or driver mismatch
        return None, f"NVML unavailable: {type(exc).__name__}"


def amdsmi_used_bytes(device: str) -> tuple[int | None, str]:
    """Device-level used VRAM via amdsmi (ROCm), or (None, reason)."""
    try:
        import amdsmi
    except ImportError:
        return None, "amdsmi not installed (ROCm device-level counter)"
    from lab.memory.gpu_map import GpuNotMatched, amdsmi_handle, torch_identity

    try:
        amdsmi.amdsmi_init()
        try:
            handle = amdsmi_handle(amdsmi, torch_identity(device))  # by PCI id / UUID, never by index
            used = amdsmi.amdsmi_get_gpu_memory_usage(handle, amdsmi.AmdSmiMemoryType.VRAM)
            return int(used), ""
        finally:
            amdsmi.amdsmi_shut_down()
    except GpuNotMatched as exc:
        return None, str(exc)
    except Exception as exc:  # driver / library mismatch
        return None, f"amdsmi unavailable: {type(exc).__name__}"
