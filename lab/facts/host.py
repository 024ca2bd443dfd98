"""Host facts that the doctor, the launchers and the manifest share: image pins, the GPU
vendor of this host, its GPU device nodes, and NVML access.

Stdlib only at import time (NVML is imported on demand), so the pass runner, the doctor
and the Docker launcher can all import it; it imports no other ``lab`` module.

Source of the NVIDIA Container Toolkit fix: NVIDIA Container Toolkit install guide,
"Configuring Docker"
(https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import ModuleType

from lab.facts.files import REPO_ROOT

PINS_FILE = REPO_ROOT / "images" / "pins.env"
IMAGE_KEYS = {"cpu": "CPU_IMAGE", "nvidia": "CUDA_IMAGE", "rocm": "ROCM_IMAGE"}
NO_DRIVER_MARK = "could not select device driver"


def read_pins(path: Path = PINS_FILE) -> dict[str, str]:
    """KEY=value pairs of images/pins.env (comments and blank lines skipped).

    Raises OSError when the file cannot be read.
    """
    out = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def detect_vendor() -> str:
    """"nvidia", "rocm" or "cpu" for this host: nvidia-smi or /dev/nvidiactl, else /dev/kfd."""
    if shutil.which("nvidia-smi") or Path("/dev/nvidiactl").exists():
        return "nvidia"
    return "rocm" if Path("/dev/kfd").exists() else "cpu"


def rocm_device_nodes() -> list[Path]:
    """The device nodes a ROCm pass needs that exist here: /dev/kfd and /dev/dri/renderD*."""
    devs = [Path("/dev/kfd"), *sorted(Path("/dev/dri").glob("renderD*"))]
    return [d for d in devs if d.exists()]


def rocm_device_gids() -> list[int]:
    """Host group ids owning /dev/kfd and /dev/dri/renderD* (the image's may differ)."""
    return sorted({d.stat().st_gid for d in rocm_device_nodes()})


def nvml() -> ModuleType:
    """The initialised ``pynvml`` module (nvidia-ml-py). ``nvmlInit`` may be called again
    safely (NVML counts references). Raises ImportError when nvidia-ml-py is missing and
    pynvml.NVMLError when no NVIDIA driver answers (an AMD or CPU host)."""
    import pynvml

    pynvml.nvmlInit()
    return pynvml


def gpu_count() -> tuple[int, str]:
    """(GPUs this host's torch sees, source); NVML's count when torch sees none (a host whose
    own torch is a CPU build may still hand its GPUs to containers)."""
    import torch

    n = torch.cuda.device_count()
    if n:
        return n, "torch.cuda.device_count()"
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount()), "NVML nvmlDeviceGetCount()"
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML library or no driver: torch's 0 stands
        return 0, "torch.cuda.device_count()"


def toolkit_fix() -> str:
    """The fix for a host whose Docker cannot reach its NVIDIA GPUs: install and register the NVIDIA
    Container Toolkit (source: its install guide, see the module docstring), then run the doctor
    again (named by :func:`iteralab_command`, so the line works from the user's directory)."""
    return ("install and register the NVIDIA Container Toolkit: `sudo apt-get install -y "
            "nvidia-container-toolkit && sudo nvidia-ctk runtime configure --runtime=docker "
            f"&& sudo systemctl restart docker`, then run `{iteralab_command()} doctor` again")


def iteralab_command(argv0: str | None = None, on_path: str | None = None) -> str:
    """The executable a printed next-step command names, so that it works from the user's current
    directory: ``iteralab`` when the one on PATH is the one running (``shutil.which``), else the
    absolute path of the running one (``argv0``, default ``sys.argv[0]``; a relative
    ``.venv/bin/iteralab`` works from the bundle folder only); run as ``python -m lab.cli`` with none
    on PATH: that interpreter's absolute path and ``-m lab.cli``. ``on_path`` replaces the PATH
    look-up (tests). Stdlib only."""
    import sys

    argv0 = sys.argv[0] if argv0 is None else argv0
    running = Path(argv0).resolve() if argv0 and Path(argv0).name == "iteralab" else None
    found = shutil.which("iteralab") if on_path is None else on_path
    if found and (running is None or Path(found).resolve() == running):
        return "iteralab"
    if running is not None:
        return str(running)
    # the interpreter's own path, absolute but not resolved: a venv's bin/python is a link to the
    # base interpreter, which lacks the venv's packages (its resolved path failed: no msgspec)
    return "iteralab" if found else f"{os.path.abspath(sys.executable)} -m lab.cli"


ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
             "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve", "sve2")
"""The CPU flags (/proc/cpuinfo "flags", or "Features" on ARM) that decide which kernels torch,
oneDNN and MKL dispatch to: SSE4.2/AVX/AVX2/FMA (x86 baseline), AVX-512 with its VNNI, BF16 and
FP16 parts, AMX (bf16 and int8 matmul tiles), NEON (asimd) and SVE on ARM."""


def isa_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> list[str]:
    """Of ``ISA_FLAGS``, those the first CPU of ``cpuinfo`` lists, in ISA_FLAGS' order; [] when
    the file cannot be read (not Linux)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return []
    line = next((x for x in text.splitlines() if x.split(":")[0].strip() in ("flags", "Features")), "")
    have = set(line.split(":", 1)[-1].split())
    return [f for f in ISA_FLAGS if f in have]


def cpu_capability() -> str:
    """The instruction set torch's CPU kernels dispatch to in this process
    (``torch.backends.cpu.get_cpu_capability()``: "AVX512", "AVX2", "DEFAULT", ...), as the CPU
    and ``ATEN_CPU_CAPABILITY`` set it; "unknown (torch: <error>)" when torch cannot say."""
    try:
        import torch

        return str(torch.backends.cpu.get_cpu_capability())
    except Exception as exc:  # torch missing or too old to report it
        return f"unknown (torch: {type(exc).__name__})"
