"""The host's environment as the Environment screen and the plan's memory budget read it
(``lab.service.views.collect_environment`` builds it): a typed, frozen record, so that no
reader names a fact by a string key."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from lab.inputs.gpu_record import GpuDevice, GpuFacts

if TYPE_CHECKING:
    from lab.orchestration.doctor import Check

__all__ = ["EnvironmentFacts", "GpuDevice", "GpuFacts"]


@dataclass(frozen=True)
class EnvironmentFacts:
    """What the host offers (collect_environment): ``backend`` "cuda", "rocm" (a HIP build of
    torch sees the GPUs) or "cpu" (no GPU visible); ``gpu`` the GPUs (lab.inputs.manifest.gpu_facts);
    ``ram_total_bytes`` / ``ram_available_bytes`` host RAM (psutil; None: not measured);
    ``disk_free_bytes`` free bytes at ``disk_path`` (the runs folder, else the nearest existing
    parent or the working directory; None: not measured); ``cpu_cores`` logical cores
    (os.cpu_count; None: unknown); ``checks`` the doctor's verdicts (lab.orchestration.doctor,
    no test container), in its order."""

    backend: Literal["cpu", "cuda", "rocm"] = "cpu"
    gpu: GpuFacts = field(default_factory=GpuFacts)
    ram_total_bytes: int | None = None
    ram_available_bytes: int | None = None
    disk_free_bytes: int | None = None
    disk_path: str = ""
    cpu_cores: int | None = None
    checks: tuple[Check, ...] = ()

