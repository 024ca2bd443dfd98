"""Preflight verdicts from probe fixtures: each failure the doctor must name, with its fix."""

from __future__ import annotations

from lab.orchestration.doctor import (
    ROCM_MATRIX_VERSION,
    Probes,
    blocking_failures,
    detect_vendor,
    evaluate,
    format_checks,
    gfx_name,
    min_driver_for_cuda,
)

SMI_2xH100_570 = ("0, NVIDIA H100 80GB HBM3, 570.124.06\n"
                  "1, NVIDIA H100 80GB HBM3, 570.124.06\n")
SMI_4090_580 = "0, NVIDIA GeForce RTX 4090, 580.82.07\n"
# As Docker 20.10 answered here, on a host without the NVIDIA Container Toolkit:
NO_DRIVER_ERROR = ('APIError: 500 Server Error for http+docker://localhost/v1.41/containers/d222366f87b6/start: '
                   'Internal Server Error ("could not select device driver "nvidia" with capabilities: [[gpu]]")')
ENGINE = dict(engine_version="27.5.1", engine_runtimes=("io.containerd.runc.v2", "runc"))


def by_name(checks):
    return {c.name: c for c in checks}


def test_nvidia_driver_too_old_for_the_image_blocks_with_the_minimum():
    p = Probes(**ENGINE, nvidia_smi=SMI_2xH100_570, image="iteralab/cuda:0.1.0", image_present=True,
               image_cuda_requirement="13.0", toolkit_test=(True, "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)"),
               expect_gpu="nvidia")
    c = by_name(evaluate(p))
    assert c["gpu"].ok and "2 GPU(s)" in c["gpu"].detail and "H100" in c["gpu"].detail
    drv = c["nvidia driver"]
    assert not drv.ok and drv.blocking
    assert "570.124.06" in drv.detail and ">= 580.65.06" in drv.detail and "CUDA 13.0" in drv.detail
    assert "580.65.06" in drv.fix
    assert blocking_failures(list(c.values())) == [drv]


def test_nvidia_recent_driver_and_working_toolkit_pass():
    p = Probes(**ENGINE, nvidia_smi=SMI_4090_580, image="iteralab/cuda:0.1.0", image_present=True,
               image_cuda_requirement="13.0", toolkit_test=(True, "GPU 0: NVIDIA GeForce RTX 4090"))
    checks = evaluate(p)
    assert all(c.ok for c in checks), format_checks(checks)
    assert by_name(checks)["nvidia container toolkit"].detail.startswith("a test container sees the GPU")


def test_toolkit_missing_gives_the_exact_fix():
    p = Probes(**ENGINE, nvidia_smi=SMI_4090_580, image="iteralab/cuda:0.1.0", image_present=True,
               image_cuda_requirement="13.0", toolkit_test=(False, NO_DRIVER_ERROR))
    tk = by_name(evaluate(p))["nvidia container toolkit"]
    assert not tk.ok and tk.blocking
    assert "could not select device driver" in tk.detail
    assert "nvidia-ctk runtime configure --runtime=docker" in tk.fix
    assert "nvidia-container-toolkit" in tk.fix and "restart docker" in tk.fix
    assert "fix: install and register the NVIDIA Container Toolkit" in format_checks(evaluate(p))


def test_toolkit_not_registered_when_no_test_container_ran():
    p = Probes(**ENGINE, nvidia_smi=SMI_4090_580, image_cuda_requirement="13.0", toolkit_test=None)
    tk = by_name(evaluate(p))["nvidia container toolkit"]
    assert not tk.ok and "not registered" in tk.detail and "nvidia-ctk" in tk.fix
    p2 = Probes(engine_version="27.5.1", engine_runtimes=("nvidia", "runc"), nvidia_smi=SMI_4090_580)
    assert by_name(evaluate(p2))["nvidia container toolkit"].ok


def test_rocm_unsupported_arch_blocks_and_names_the_matrix_version():
    p = Probes(**ENGINE, kfd_exists=True, kfd_open_error=None, kfd_groups=("render",),
               user_groups=("render", "video"), rocm_archs=("gfx1031",), expect_gpu="rocm")
    c = by_name(evaluate(p))
    assert c["gpu"].ok and "gfx1031" in c["gpu"].detail
    arch = c["rocm gpu architecture"]
    assert not arch.ok and arch.blocking
    assert f"ROCm {ROCM_MATRIX_VERSION} compatibility matrix" in arch.detail and "gfx1031" in arch.detail
    assert "HSA_OVERRIDE_GFX_VERSION" in arch.fix  # never applied silently


def test_rocm_supported_arch_and_kfd_not_openable():
    p = Probes(**ENGINE, kfd_exists=True, kfd_open_error="PermissionError: Permission denied",
               kfd_groups=("render", "video"), user_groups=("users",), rocm_archs=("gfx942",) * 8)
    c = by_name(evaluate(p))
    assert c["rocm gpu architecture"].ok and "8 GPU(s)" in c["gpu"].detail
    kfd = c["rocm /dev/kfd"]
    assert not kfd.ok and "usermod -aG render,video" in kfd.fix


def test_no_engine_means_local_launcher_without_isolation():
    p = Probes(engine_version=None, engine_error="FileNotFoundError: /var/run/docker.sock", in_container=True)
    checks = evaluate(p)
    eng = by_name(checks)["engine"]
    assert not eng.ok and not eng.blocking
    assert "local launcher will be used" in eng.detail and "no container isolation" in eng.detail
    assert "itself a container" in eng.detail
    assert blocking_failures(checks) == []
    assert by_name(checks)["gpu"].detail.endswith("CPU passes only")
    # the documented container-rental path is a warning with its consequence, not a FAIL
    assert eng.level == "warn" and "each pass runs as a process of this host's Python" in eng.detail
    text = format_checks(checks)
    assert "WARN engine: no Docker engine reachable (this host is itself a container)" in text
    assert "FAIL" not in text
    assert text.splitlines()[-1] == ("verdict: ready, with 1 warning(s) (engine): campaigns run, with the "
                                     "consequences stated above")


def test_no_engine_and_no_local_torch_is_a_blocking_failure():
    p = Probes(engine_version=None, engine_error="FileNotFoundError: /var/run/docker.sock", in_container=True,
               local_torch=False)
    checks = evaluate(p)
    eng = by_name(checks)["engine"]
    assert eng.level == "fail" and eng.blocking and "no pass can run" in eng.detail
    assert blocking_failures(checks) == [eng]
    assert format_checks(checks).splitlines()[-1].startswith("verdict: not ready: 1 blocking failure(s) (engine)")


def test_expected_gpu_missing_stops_instead_of_cpu_fallback():
    p = Probes(**ENGINE,
               nvidia_smi_error="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver",
               expect_gpu="nvidia")
    gpu = by_name(evaluate(p))["gpu"]
    assert not gpu.ok and gpu.blocking
    assert "expected" in gpu.detail and "instead of running on CPU" in gpu.detail
    assert "couldn't communicate" in gpu.detail


def test_expected_vendor_differs_from_host():
    p = Probes(**ENGINE, kfd_exists=True, kfd_open_error=None, rocm_archs=("gfx942",), expect_gpu="nvidia")
    assert not by_name(evaluate(p))["gpu vendor"].ok


def test_missing_image_is_reported_with_the_build_command():
    p = Probes(**ENGINE, image="iteralab/cpu:0.1.0", image_present=False)
    img = by_name(evaluate(p))["image"]
    assert not img.ok and "make images" in img.fix


def test_tables():
    assert min_driver_for_cuda("13.0") == "580.65.06"
    assert min_driver_for_cuda("12.8") == "525.60.13"
    assert min_driver_for_cuda("9.2") is None
    assert [gfx_name(v) for v in (90010, 90402, 90500, 110000, 120001, 100300, 90008, 0)] == \
        ["gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201", "gfx1030", "gfx908", ""]
    assert detect_vendor(Probes(nvidia_smi=SMI_4090_580)) == "nvidia"
    assert detect_vendor(Probes(kfd_exists=True)) == "rocm"
    assert detect_vendor(Probes()) == "cpu"
