"""The host's GPUs as ``lab.inputs.manifest.gpu_facts`` sees them, typed (issue 33, part 3).

``gpu_facts`` returns a dict because the manifest writes it as JSON (its ``gpu`` field, an
on-disk format kept as it is); a reader decodes that dict once, here, with ``GpuFacts.of``,
and reads attributes from then on (the Environment screen, the plan's memory budget).
"""

from __future__ import annotations

import msgspec

__all__ = ["GpuDevice", "GpuFacts"]


class GpuDevice(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One visible GPU (torch.cuda.get_device_properties): ``index`` torch's device index
    (0-based), ``name`` the device name, ``memory_bytes`` its total memory in bytes."""

    index: int
    name: str
    memory_bytes: int


class GpuFacts(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """GPU count, devices, driver and runtimes (lab.inputs.manifest.gpu_facts' dict, decoded):
    ``count`` devices torch sees; ``devices`` in index order; ``driver`` NVML's driver version
    or "absent"; ``cuda_runtime`` / ``hip_runtime`` torch's build runtime versions or "absent";
    ``driver_note`` why the driver is unknown ("" when NVML answered); ``torch_error`` why torch
    could not be asked ("" when it could)."""

    count: int = 0
    devices: tuple[GpuDevice, ...] = ()
    driver: str = "absent"
    cuda_runtime: str = "absent"
    hip_runtime: str = "absent"
    driver_note: str = ""
    torch_error: str = ""

    @classmethod
    def of(cls, facts: dict) -> GpuFacts:
        """The record of ``gpu_facts()``'s dict (also a manifest's ``gpu`` field). Raises
        msgspec.ValidationError on a field of the wrong type or an unknown one."""
        return msgspec.convert(facts, cls)
