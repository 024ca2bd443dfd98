"""GPU access per vendor: the launcher's kwargs and compose.yaml say the same thing."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lab.launchers.gpu_access import gpu_run_kwargs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def services() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]


def _compose_devices(svc: dict) -> list[str]:
    out = []
    for d in svc.get("devices", []):
        parts = d.split(":")
        host = parts[0]
        cont = parts[1] if len(parts) > 1 else host
        perms = parts[2] if len(parts) > 2 else "rwm"
        out.append(f"{host}:{cont}:{perms}")
    return out


def test_nvidia_matches_compose_device_reservation(services):
    kw = gpu_run_kwargs("nvidia")
    assert set(kw) == {"device_requests"}
    (req,) = kw["device_requests"]
    (res,) = services["cuda"]["deploy"]["resources"]["reservations"]["devices"]
    assert req["driver"] == res["driver"] == "nvidia"
    assert req["capabilities"] == [res["capabilities"]] == [["gpu"]]
    assert res["count"] == "all" and req["count"] == -1  # -1 is the API's "all"
    assert "devices" not in services["cuda"] and "group_add" not in services["cuda"]


def test_nvidia_selected_devices_replace_count():
    (req,) = gpu_run_kwargs("nvidia", device_ids=[0, "GPU-1234"])["device_requests"]
    assert req["device_ids"] == ["0", "GPU-1234"] and "count" not in req


def test_rocm_matches_compose(services):
    kw = gpu_run_kwargs("rocm")
    svc = services["rocm"]
    assert kw["devices"] == _compose_devices(svc) == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
    assert kw["group_add"] == svc["group_add"] == ["video", "render"]
    assert kw["security_opt"] == svc["security_opt"] == ["seccomp=unconfined"]
    assert "deploy" not in svc


def test_rocm_adds_host_group_ids_once():
    kw = gpu_run_kwargs("rocm", extra_group_ids=[44, 993, 993])
    assert kw["group_add"] == ["video", "render", "44", "993"]


def test_cpu_has_no_gpu_access(services):
    assert gpu_run_kwargs("cpu") == {}
    svc = services["cpu"]
    assert not ({"deploy", "devices", "group_add", "security_opt"} & set(svc))


def test_every_service_is_offline_and_profiled(services):
    for name in ("cpu", "cuda", "rocm"):
        svc = services[name]
        assert svc["profiles"] == [name]
        assert svc["network_mode"] == "none"
        assert svc["build"]["dockerfile"] == f"images/{name}/Dockerfile"
        assert (ROOT / svc["build"]["dockerfile"]).is_file()


def test_base_pins_live_in_one_file(services):
    pins = dict(line.split("=", 1) for line in (ROOT / "images/pins.env").read_text().splitlines()
                if line and not line.startswith("#"))
    for name, key in (("cpu", "CPU_BASE_IMAGE"), ("cuda", "CUDA_BASE_IMAGE"), ("rocm", "ROCM_BASE_IMAGE")):
        assert key in services[name]["build"]["args"]["BASE_IMAGE"]
        tag = pins[key].rsplit(":", 1)[1]
        assert tag and tag != "latest", f"{key} must be an exact version tag"
        dockerfile = (ROOT / f"images/{name}/Dockerfile").read_text()
        assert "ARG BASE_IMAGE\n" in dockerfile and "FROM ${BASE_IMAGE}" in dockerfile
        assert pins[key] not in dockerfile, "the pin belongs in images/pins.env only"


def test_unknown_vendor_is_refused():
    with pytest.raises(ValueError, match="unknown GPU vendor"):
        gpu_run_kwargs("intel")
