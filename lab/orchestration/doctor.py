"""Preflight (`iteralab doctor`): can this host run passes, in containers, on its GPUs?

``doctor()`` probes the host (``probe()``) and judges the probes (``evaluate()``, a pure
function, unit-tested with fixtures). Each ``Check`` has a name, ok, a one-line detail and
the fix. A GPU that is expected but not usable is a blocking failure with its reason: a
campaign never falls back to CPU silently. No engine at all is a warning, not a failure,
where the local launcher can run passes (the rental is itself a container): the manifest says
"no container isolation". Each check is ok, WARN or FAIL (blocking); the last line is the
verdict, and `iteralab doctor` exits 1 exactly when a check FAILs.

Host facts (pins, vendor, device nodes) come from ``lab.facts.host``. Sources of the pinned tables:
- NVIDIA CUDA Toolkit Release Notes, "CUDA Toolkit and Corresponding Driver Versions" and
  "Minimum Required Driver Version for CUDA Minor Version Compatibility"
  (https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/): CUDA 13.x needs Linux
  driver >= 580.65.06 (13.0 GA); 12.x >= 525.60.13; 11.x >= 450.80.02.
- AMD ROCm compatibility matrix, ROCm 7.1.1 column, "GPU / LLVM target"
  (https://rocm.docs.amd.com/en/latest/compatibility/compatibility-matrix.html).
"""

from __future__ import annotations

import grp
import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lab.facts import host
from lab.facts.errors import clip
from lab.facts.host import IMAGE_KEYS, NO_DRIVER_MARK, read_pins, toolkit_fix

CUDA_MIN_DRIVER = {13: "580.65.06", 12: "525.60.13", 11: "450.80.02"}
ROCM_MATRIX_VERSION = "7.1.1"
ROCM_SUPPORTED_ARCHS = ("gfx950", "gfx1201", "gfx1200", "gfx1101", "gfx1100", "gfx1030",
                        "gfx942", "gfx90a", "gfx908")
KFD_TOPOLOGY = Path("/sys/class/kfd/kfd/topology/nodes")


@dataclass(frozen=True)
class Check:
    """One preflight verdict. ``blocking``: a failure stops the campaign."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    blocking: bool = False

    @property
    def level(self) -> str:
        """"ok", "warn" (a failed check that does not stop a campaign: its consequence is in
        the detail) or "fail" (blocking: the doctor's exit status is 1)."""
        return "ok" if self.ok else "fail" if self.blocking else "warn"

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Probes:
    """What ``probe()`` saw. None means "not probed / absent"; strings are raw tool output."""

    engine_version: str | None = None
    engine_error: str = ""
    engine_runtimes: tuple[str, ...] = ()
    in_container: bool = False
    local_torch: bool = True                # the host's Python imports torch: the local launcher can run passes
    nvidia_smi: str | None = None           # `nvidia-smi --query-gpu=index,name,driver_version`
    nvidia_smi_error: str = ""
    image: str = ""
    image_present: bool | None = None
    image_cuda_requirement: str | None = None  # "13.0" (image env NVIDIA_REQUIRE_CUDA)
    toolkit_test: tuple[bool, str] | None = None  # (GPU seen in a test container, output/error)
    kfd_exists: bool = False
    kfd_open_error: str | None = None       # None: opened fine
    kfd_groups: tuple[str, ...] = ()        # groups owning /dev/kfd and /dev/dri/renderD*
    user_groups: tuple[str, ...] = ()
    rocm_archs: tuple[str, ...] = ()        # one per GPU, e.g. ("gfx942", "gfx942")
    expect_gpu: str | None = None           # "nvidia", "rocm" or None
    extra: dict = field(default_factory=dict)


def _ver(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def min_driver_for_cuda(cuda: str) -> str | None:
    """Minimum Linux NVIDIA driver for a CUDA version "13.0" (None when not in the table)."""
    major = _ver(cuda)[0] if _ver(cuda) else None
    return CUDA_MIN_DRIVER.get(major) if major is not None else None


def gfx_name(target_version: int) -> str:
    """KFD ``gfx_target_version`` (major*10000 + minor*100 + stepping) to an LLVM target.

    90010 -> gfx90a, 90402 -> gfx942, 110000 -> gfx1100. 0 is a CPU node: "".
    """
    if target_version <= 0:
        return ""
    major, minor, step = target_version // 10000, target_version // 100 % 100, target_version % 100
    return f"gfx{major}{minor:x}{step:x}"


def nvidia_gpus(smi: str | None) -> list[tuple[str, str]]:
    """(name, driver version) per GPU from ``nvidia-smi --query-gpu=index,name,driver_version``."""
    out = []
    for line in (smi or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            out.append((parts[1], parts[2]))
    return out


def detect_vendor(p: Probes | None = None) -> str:
    """"nvidia", "rocm" or "cpu" from the probes (from the host, ``lab.facts.host``, when None)."""
    if p is None:
        return host.detect_vendor()
    if nvidia_gpus(p.nvidia_smi):
        return "nvidia"
    return "rocm" if p.kfd_exists else "cpu"


def _engine_checks(p: Probes) -> list[Check]:
    if p.engine_version is None:
        where = " (this host is itself a container)" if p.in_container else ""
        why = p.engine_error or "docker not found"
        if not p.local_torch:
            return [Check("engine", False, f"no Docker engine reachable{where}: {why}; and this host's Python "
                          "has no torch, so the local launcher cannot run passes either: no pass can run",
                          "run `make env` (the local launcher's environment), or install Docker and start "
                          "dockerd", blocking=True)]
        # a warning, not a failure: the documented path on a rental that is itself a container
        return [Check("engine", False,
                      f"no Docker engine reachable{where}: {why}; the local launcher will be used: each pass "
                      "runs as a process of this host's Python and torch, with no container isolation and "
                      "not the pass image's pinned versions (the manifest says \"no container isolation\")",
                      "nothing to do on a container rental; elsewhere install Docker and start dockerd for "
                      "container isolation")]
    out = [Check("engine", True, f"Docker engine {p.engine_version} answers; runtimes: "
                 f"{', '.join(p.engine_runtimes) or 'unknown'}")]
    if p.image:
        out.append(Check("image", bool(p.image_present),
                         f"image {p.image} is built" if p.image_present else
                         f"image {p.image} is not built on this host: until it is, --launcher auto runs each "
                         "pass as a local process (no container isolation, the manifest says so)",
                         "" if p.image_present
                         else "run `make images` (scripts/ci_docker.sh where no registry is reachable)"))
    return out


def _gpu_check(p: Probes, vendor: str) -> Check:
    if vendor == "nvidia":
        gpus = nvidia_gpus(p.nvidia_smi)
        return Check("gpu", True, f"NVIDIA, {len(gpus)} GPU(s): {', '.join(sorted({g[0] for g in gpus}))}")
    if vendor == "rocm":
        n = len(p.rocm_archs)
        archs = ", ".join(sorted(set(p.rocm_archs))) or "architecture unknown"
        return Check("gpu", True, f"AMD ROCm, {n} GPU(s): {archs}")
    detail = "no GPU found (nvidia-smi " + ("failed: " + p.nvidia_smi_error if p.nvidia_smi_error else "absent") + \
             ", no /dev/kfd)"
    if p.expect_gpu:
        return Check("gpu", False, f"a {p.expect_gpu} GPU is expected but {detail}; the campaign stops "
                     "instead of running on CPU", "run on a host with that GPU and its driver, or declare "
                     "device = \"cpu\" variants (a new campaign)", blocking=True)
    return Check("gpu", True, f"{detail}: CPU passes only")


def _nvidia_checks(p: Probes) -> list[Check]:
    out = []
    gpus = nvidia_gpus(p.nvidia_smi)
    drivers = sorted({d for _, d in gpus}, key=_ver)
    need_cuda = p.image_cuda_requirement
    need = min_driver_for_cuda(need_cuda) if need_cuda else None
    if drivers and need:
        ok = _ver(drivers[0]) >= _ver(need)
        out.append(Check("nvidia driver", ok,
                         f"driver {drivers[0]}; the image needs CUDA {need_cuda}, i.e. driver >= {need} "
                         "(NVIDIA CUDA release notes)",
                         "" if ok else f"install NVIDIA driver >= {need} on the host, or rent a host whose "
                         f"driver is >= {need}", blocking=not ok))
    elif drivers:
        out.append(Check("nvidia driver", True, f"driver {drivers[0]} (image CUDA requirement unknown)"))
    if p.engine_version is None:
        return out
    t = p.toolkit_test
    if t is None:
        registered = "nvidia" in p.engine_runtimes
        out.append(Check("nvidia container toolkit", registered,
                         "nvidia runtime " + ("registered with the engine (GPU test container not run)"
                                              if registered else "not registered with the engine"),
                         "" if registered else toolkit_fix(), blocking=not registered))
    elif t[0]:
        out.append(Check("nvidia container toolkit", True, f"a test container sees the GPU: {clip(t[1], 120)}"))
    else:
        no_driver = NO_DRIVER_MARK in t[1]
        out.append(Check("nvidia container toolkit", False,
                         ("Docker answered \"could not select device driver\": the NVIDIA Container Toolkit "
                          "is not installed or not registered with Docker") if no_driver
                         else f"a test container did not see the GPU: {t[1].strip()[:200]}",
                         toolkit_fix() if no_driver else "check `docker run --rm --gpus all <image> nvidia-smi`; "
                         + toolkit_fix(), blocking=True))
    return out


def _rocm_checks(p: Probes) -> list[Check]:
    out = []
    if p.kfd_open_error is None:
        out.append(Check("rocm /dev/kfd", True, "/dev/kfd opens"))
    else:
        missing = [g for g in p.kfd_groups if g not in p.user_groups]
        out.append(Check("rocm /dev/kfd", False, f"/dev/kfd does not open: {p.kfd_open_error}",
                         "add the user to the groups owning the GPU devices: `sudo usermod -aG "
                         f"{','.join(missing or ['render', 'video'])} $USER`, then log in again "
                         "(containers get these groups from the launcher)", blocking=False))
    out.append(Check("rocm groups", True, f"GPU devices owned by groups {', '.join(p.kfd_groups) or 'unknown'}; "
                     f"this user is in {', '.join(p.user_groups) or 'none'}; containers get video and render"))
    bad = sorted({a for a in p.rocm_archs if a not in ROCM_SUPPORTED_ARCHS})
    if not p.rocm_archs:
        out.append(Check("rocm gpu architecture", False, "no GPU architecture found in the KFD topology",
                         "check the amdgpu driver (`rocminfo`)", blocking=True))
    elif bad:
        out.append(Check("rocm gpu architecture", False,
                         f"{', '.join(bad)} is not in the ROCm {ROCM_MATRIX_VERSION} compatibility matrix "
                         f"({', '.join(ROCM_SUPPORTED_ARCHS)})",
                         f"rent a GPU listed for ROCm {ROCM_MATRIX_VERSION}; an override "
                         "(HSA_OVERRIDE_GFX_VERSION) is unsupported by AMD and would be a new declared variant",
                         blocking=True))
    else:
        out.append(Check("rocm gpu architecture", True, f"{', '.join(sorted(set(p.rocm_archs)))} listed in the "
                         f"ROCm {ROCM_MATRIX_VERSION} compatibility matrix"))
    return out


def evaluate(p: Probes) -> list[Check]:
    """The checks for these probes, in display order. Pure: no I/O."""
    vendor = detect_vendor(p)
    checks = _engine_checks(p) + [_gpu_check(p, vendor)]
    if vendor == "nvidia":
        checks += _nvidia_checks(p)
    elif vendor == "rocm":
        checks += _rocm_checks(p)
    if p.expect_gpu and vendor not in ("cpu", p.expect_gpu):
        checks.append(Check("gpu vendor", False, f"a {p.expect_gpu} GPU is expected, this host has {vendor}",
                            "use the image and variants of this host's vendor", blocking=True))
    return checks


def blocking_failures(checks: list[Check]) -> list[Check]:
    """The failed checks that must stop a campaign."""
    return [c for c in checks if c.blocking and not c.ok]


MARKS = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}


def verdict(checks: list[Check]) -> str:
    """The doctor's last line, which its exit status follows: "ready" (exit 0), with the
    warnings counted, or "not ready" naming the blocking failures (exit 1)."""
    fails = blocking_failures(checks)
    warns = [c for c in checks if c.level == "warn"]
    if fails:
        return (f"verdict: not ready: {len(fails)} blocking failure(s) ({', '.join(c.name for c in fails)}); "
                "fix them and run the doctor again")
    if warns:
        return (f"verdict: ready, with {len(warns)} warning(s) ({', '.join(c.name for c in warns)}): "
                "campaigns run, with the consequences stated above")
    return "verdict: ready"


def format_checks(checks: list[Check]) -> str:
    """One line per check (`ok`/`WARN`/`FAIL`, name, detail), an indented fix line, and the
    verdict line."""
    lines = []
    for c in checks:
        lines.append(f"{MARKS[c.level]} {c.name}: {c.detail}")
        if c.fix and not c.ok:
            lines.append(f"     fix: {c.fix}")
    lines.append(verdict(checks))
    return "\n".join(lines)


def _run(cmd: list[str], timeout: float = 20) -> tuple[int, str]:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        return r.returncode, (r.stdout + r.stderr).strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return -1, f"{type(exc).__name__}: {exc}"


def _rocm_probes() -> dict:
    out: dict = {"kfd_exists": Path("/dev/kfd").exists()}
    if not out["kfd_exists"]:
        return out
    try:
        os.close(os.open("/dev/kfd", os.O_RDWR))
        out["kfd_open_error"] = None
    except OSError as exc:
        out["kfd_open_error"] = f"{type(exc).__name__}: {exc.strerror}"
    out["kfd_groups"] = tuple(sorted({grp.getgrgid(d.stat().st_gid).gr_name for d in host.rocm_device_nodes()}))
    archs = []
    for props in sorted(KFD_TOPOLOGY.glob("*/properties")):
        m = re.search(r"^gfx_target_version\s+(\d+)", props.read_text(), re.M)
        if m and gfx_name(int(m.group(1))):
            archs.append(gfx_name(int(m.group(1))))
    out["rocm_archs"] = tuple(archs)
    return out


def _engine_probes(image: str, vendor: str, container_test: bool) -> dict:
    try:
        import docker

        client = docker.from_env(timeout=30)
        info = client.info()
    except Exception as exc:  # SDK missing, socket absent, permission denied
        return {"engine_error": f"{type(exc).__name__}: {exc}"[:300]}
    out: dict = {"engine_version": info.get("ServerVersion", "?"),
                 "engine_runtimes": tuple(sorted(info.get("Runtimes") or {}))}
    try:
        img = client.images.get(image)
        out["image_present"] = True
        env = dict(e.split("=", 1) for e in img.attrs.get("Config", {}).get("Env") or [] if "=" in e)
        m = re.search(r"cuda>=(\d+\.\d+)", env.get("NVIDIA_REQUIRE_CUDA", ""))
        out["image_cuda_requirement"] = m.group(1) if m else None
    except Exception:
        out["image_present"] = False
    if vendor == "nvidia" and container_test and out["image_present"]:
        from lab.launchers.gpu_access import gpu_run_kwargs

        c = None
        try:
            c = client.containers.create(image, ["nvidia-smi", "-L"], network_mode="none",
                                         labels={"iteralab.doctor": "1"}, **gpu_run_kwargs("nvidia"))
            c.start()
            code = c.wait(timeout=60).get("StatusCode")
            out["toolkit_test"] = (code == 0, c.logs().decode("utf-8", "replace"))
        except Exception as exc:  # "could not select device driver" lands here
            out["toolkit_test"] = (False, f"{type(exc).__name__}: {exc}")
        finally:
            if c is not None:
                c.remove(force=True)
    return out


def probe(expect_gpu: str | None = None, image: str | None = None, container_test: bool = True) -> Probes:
    """Look at this host: nvidia-smi, /dev/kfd and the KFD topology, the engine, the image."""
    kw: dict = {"expect_gpu": expect_gpu,
                "in_container": Path("/.dockerenv").exists() or Path("/run/.containerenv").exists(),
                "local_torch": importlib.util.find_spec("torch") is not None}
    if shutil.which("nvidia-smi"):
        code, text = _run(["nvidia-smi", "--query-gpu=index,name,driver_version", "--format=csv,noheader"])
        kw["nvidia_smi" if code == 0 else "nvidia_smi_error"] = text
    kw.update(_rocm_probes())
    try:
        kw["user_groups"] = tuple(sorted({grp.getgrgid(g).gr_name for g in os.getgroups()}))
    except KeyError:
        pass
    vendor = detect_vendor(Probes(**kw))
    pins = read_pins()
    kw["image"] = image or os.environ.get("ITERALAB_IMAGE") or pins[IMAGE_KEYS[vendor]]
    kw.update(_engine_probes(kw["image"], vendor, container_test))
    if vendor == "nvidia" and not kw.get("image_cuda_requirement"):
        kw["image_cuda_requirement"] = pins.get("CUDA_IMAGE_CUDA_VERSION")
    return Probes(**kw)


def doctor(expect_gpu: str | None = None, image: str | None = None, container_test: bool = True) -> list[Check]:
    """Probe this host and judge it: the list of checks, in display order. Never raises.

    ``expect_gpu``: "nvidia" or "rocm" when the campaign's variants need that GPU (its
    absence is then a blocking failure); ``image``: the image to check (default: this
    vendor's image in images/pins.env, or ITERALAB_IMAGE); ``container_test``: on NVIDIA
    hosts, run a short test container (`nvidia-smi -L`) to prove the toolkit works.
    """
    try:
        checks = evaluate(probe(expect_gpu=expect_gpu, image=image, container_test=container_test))
        return checks + [host_torch_check(detect_vendor(), expect_gpu)]
    except Exception as exc:  # a probe that broke is a finding, not a crash
        return [Check("doctor", False, f"probing failed: {type(exc).__name__}: {exc}"[:300],
                      "report this output", blocking=True)]  # nothing is known: not "ready"


def host_torch_check(vendor: str, expect_gpu: str | None = None) -> Check:
    """The host's own torch (what the local launcher runs): version, build, GPUs it sees."""
    try:
        import torch
    except ImportError:
        return Check("host torch", False, "torch is not installed on the host", "run `make env`")
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else (
        f"ROCm/HIP {torch.version.hip}" if torch.version.hip else "CPU-only build")
    seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
    detail = f"torch {torch.__version__} ({build}) sees {seen} GPU(s)"
    if vendor != "cpu" and not seen:
        return Check("host torch", False, detail + f" on a {vendor} host: local passes would run on CPU",
                     "use the container launcher, or install the torch build for this GPU (docs/rental.md, Containers)",
                     blocking=bool(expect_gpu))
    return Check("host torch", True, detail)

