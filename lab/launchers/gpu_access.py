"""GPU access of a pass container, per vendor: the one source that compose.yaml mirrors.

``gpu_run_kwargs(vendor)`` gives the keyword arguments of the docker SDK's
``containers.create``/``run`` (plain values, no docker import) that hand the host's GPUs to
a container. ``tests/unit/test_gpu_access.py`` checks each vendor against the matching service
of ``compose.yaml``, so the launcher and ``docker compose`` cannot drift apart.

Sources:
- NVIDIA: a device request with driver "nvidia" and capability "gpu" (what
  ``docker run --gpus all`` sends; compose's ``deploy.resources.reservations.devices``).
  Needs the NVIDIA Container Toolkit registered with the engine (``iteralab doctor``).
- AMD ROCm: ``--device=/dev/kfd --device=/dev/dri --group-add video
  --security-opt seccomp=unconfined`` as in AMD's "Installing PyTorch for ROCm" guide
  (https://rocm.docs.amd.com/projects/install-on-linux/en/docs-6.2.0/how-to/3rd-party/pytorch-install.html);
  the ``render`` group too, which owns /dev/dri/renderD* on current distributions.
"""

from __future__ import annotations

VENDORS = ("nvidia", "rocm", "cpu")
NVIDIA_CAPABILITIES = ["gpu"]
ROCM_DEVICES = ["/dev/kfd", "/dev/dri"]
ROCM_GROUPS = ["video", "render"]
ROCM_SECURITY_OPT = ["seccomp=unconfined"]


def gpu_run_kwargs(vendor: str, device_ids: list[str] | None = None,
                   extra_group_ids: list[int] | None = None) -> dict:
    """Docker SDK run kwargs giving a container the GPUs of ``vendor``.

    ``vendor``: "nvidia", "rocm" or "cpu" (cpu: no GPU, empty dict).
    ``device_ids``: NVIDIA only, GPU indexes or UUIDs to hand over (default: all GPUs).
    ``extra_group_ids``: ROCm only, numeric group ids to add (the host's owners of
    /dev/kfd and /dev/dri/renderD*, whose ids may differ from the image's groups).
    Returns e.g. ``{"device_requests": [{"driver": "nvidia", "count": -1,
    "capabilities": [["gpu"]]}]}``. Raises ValueError for an unknown vendor.
    """
    if vendor == "cpu":
        return {}
    if vendor == "nvidia":
        req: dict = {"driver": "nvidia", "capabilities": [list(NVIDIA_CAPABILITIES)]}
        if device_ids:
            req["device_ids"] = [str(d) for d in device_ids]
        else:
            req["count"] = -1  # all GPUs (compose: count: all)
        return {"device_requests": [req]}
    if vendor == "rocm":
        groups = list(ROCM_GROUPS) + [str(g) for g in (extra_group_ids or []) if str(g) not in ROCM_GROUPS]
        return {"devices": [f"{d}:{d}:rwm" for d in ROCM_DEVICES],
                "group_add": list(dict.fromkeys(groups)),
                "security_opt": list(ROCM_SECURITY_OPT)}
    raise ValueError(f"unknown GPU vendor {vendor!r}; use one of {', '.join(VENDORS)}")
