"""The manifest: what is needed to reproduce a campaign (SPEC 2: manifest; seed: "Preparare gli
input, il riferimento e il manifesto").

Only named facts are recorded. Environment variables are read from one list
(lab.facts.environment: device selection and the settings that change numerics, speed or
memory, each with its source); tokens and secrets are never read into the manifest. The CPU is
recorded as the kernels see it: the instruction set torch dispatches to and the ISA flags. Each
pass also records its own (``result.json`` ``environment``), with the conditions of its window
(lab.passes.conditions).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from lab.facts.environment import RECORDED_NAMES
from lab.facts.files import REPO_ROOT
from lab.facts.host import cpu_capability, isa_flags, nvml

PACKAGES = ("torch", "transformers", "tokenizers", "safetensors", "numpy", "pandas", "textual",
            "docker", "psutil", "nvidia-ml-py")
ENV_ALLOWED = RECORDED_NAMES
"""Environment variables that change a pass's numerics, speed or memory (or which devices and
files it uses), recorded by name and value when set; nothing else of the environment is read
(no secrets). The one list, with each variable's library and source: lab.facts.environment."""


def pass_environment() -> dict:
    """{name: value} of the ``ENV_ALLOWED`` variables set in this process (a pass records its
    own: a container's environment is not the orchestrator's)."""
    return {k: os.environ[k] for k in ENV_ALLOWED if k in os.environ}


def _pkg(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


def git_commit() -> dict:
    """The lab's git commit and whether the working tree had uncommitted changes."""
    try:
        head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=False).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=False).stdout.strip()
        return {"commit": head or "absent (not a git checkout)", "uncommitted_changes": bool(dirty)}
    except (OSError, subprocess.SubprocessError):
        return {"commit": "absent (git not available)", "uncommitted_changes": None}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def gpu_facts() -> dict:
    """GPU name/count/memory, driver and runtime from NVML and torch; 'absent' otherwise."""
    out: dict = {"count": 0, "devices": [], "driver": "absent", "cuda_runtime": "absent",
                 "hip_runtime": "absent"}
    try:
        import torch

        out["cuda_runtime"] = torch.version.cuda or "absent"
        out["hip_runtime"] = torch.version.hip or "absent"
        if torch.cuda.is_available():
            out["count"] = torch.cuda.device_count()
            for i in range(out["count"]):
                p = torch.cuda.get_device_properties(i)
                out["devices"].append({"index": i, "name": p.name, "memory_bytes": int(p.total_memory)})
    except Exception as exc:  # torch missing or broken: say so
        out["torch_error"] = f"{type(exc).__name__}: {exc}"[:200]
    try:
        out["driver"] = nvml().nvmlSystemGetDriverVersion()
    except Exception:
        out["driver_note"] = "NVML not available (no NVIDIA driver, or an AMD GPU)"
    return out


HOST_KEYS = ("lab", "python", "packages", "os", "cpu", "ram_bytes", "gpu", "environment")
"""The manifest's environment fields (``host_facts``): where the orchestrator ran the passes."""


def host_facts() -> dict:
    """The environment this process runs in: lab commit, Python, packages, OS, CPU (name, cores,
    torch's kernel capability and the ISA flags: lab.facts.host.cpu_capability, isa_flags), RAM, GPUs
    (lab.inputs.manifest.gpu_facts: torch and NVML), the allowed environment variables. Keys: HOST_KEYS.
    The orchestrator records it in the journal when it starts (``python -m lab.inputs.manifest``, a
    process of its own: querying torch.cuda there would hold a CUDA context on the device
    the passes measure)."""
    import psutil

    return {
        "lab": {"version": _pkg("iteragpu-lab"), **git_commit()},
        "python": sys.version.split()[0],
        "packages": {p: _pkg(p) for p in PACKAGES},
        "os": {"system": platform.system(), "release": platform.release(), "platform": platform.platform()},
        "cpu": {"name": cpu_name(), "logical_cores": os.cpu_count(), "capability": cpu_capability(),
                "isa_flags": isa_flags()},
        "ram_bytes": psutil.virtual_memory().total,
        "gpu": gpu_facts(),
        "environment": pass_environment(),
    }


def record_host_facts(timeout_s: float = 300) -> dict:
    """``host_facts()`` read in a child process, with ``recorded_at`` (UTC ISO); on failure
    {"recorded_at", "error"} (the manifest then says the environment was not recorded)."""
    import json

    at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    try:
        path = str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
        r = subprocess.run([sys.executable, "-m", "lab.inputs.manifest"], capture_output=True, text=True, check=False,
                           timeout=timeout_s, cwd=str(REPO_ROOT), env={**os.environ, "PYTHONPATH": path})
        facts = json.loads(r.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        return {"recorded_at": at, "error": f"host facts not recorded ({type(exc).__name__})"}
    return {"recorded_at": at, **facts}


def environment_section(recorded: list[dict] | None, now: dict) -> dict:
    """The manifest's environment fields: those of the passes' environment, as the orchestrator
    recorded it when it started (``recorded``: one snapshot per start or resume, oldest
    first), never the report's. ``environment_recorded`` says which; ``environment_changes``
    lists what differed at a later resume (the passes after it ran there);
    ``report_environment`` the fields of ``now`` (where the report is built) that differ
    from the passes' ({} when none). A journal without a recorded snapshot (written before
    the lab recorded one) gives ``now`` with that reason.
    """
    usable = [h for h in (recorded or []) if "error" not in h]
    if not usable:
        why = (recorded[0]["error"] if recorded else "the journal predates run-time recording")
        return {**now, "environment_recorded": f"at report time, not when the passes ran: {why}"}
    first = usable[0]
    changes = [{"recorded_at": h["recorded_at"], **{k: h.get(k) for k in HOST_KEYS if h.get(k) != first.get(k)}}
               for h in usable[1:] if any(h.get(k) != first.get(k) for k in HOST_KEYS)]
    return {**{k: first.get(k) for k in HOST_KEYS},
            "environment_recorded": f"when the orchestrator started, {first['recorded_at']} "
                                    f"({len(usable)} start(s) recorded)",
            "environment_changes": changes,
            "report_environment": {k: now[k] for k in HOST_KEYS if now.get(k) != first.get(k)}}


def build_manifest(campaign: dict, launcher: dict, model: dict, corpus: dict, extra: dict | None = None,
                   recorded_hosts: list[dict] | None = None) -> dict:
    """Assemble the manifest dict. ``campaign``: name, protocol version/hash, order, seeds.
    ``recorded_hosts``: the journal's host snapshots (``environment_section``)."""
    return {
        "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **environment_section(recorded_hosts, host_facts()),
        "launcher": launcher,
        "model": model,
        "corpus": corpus,
        "campaign": campaign,
        "reproduce": ("bounded numeric gap and acceptable quality: predictions are compared "
                      "per id with the reference variant; bit-identical outputs are not expected "
                      "across batch sizes, precisions, devices or library versions"),
        **(extra or {}),
    }


if __name__ == "__main__":  # the orchestrator's snapshot of its host (record_host_facts)
    import json

    from lab.facts.process import leave_process

    print(json.dumps(host_facts(), default=str))
    leave_process(0)
