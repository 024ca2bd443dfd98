"""Doctor checks that need the real host: a real Docker engine without the NVIDIA runtime,
and the host's own torch (the pure verdicts on probe fixtures are in tests/unit)."""

from __future__ import annotations

import pytest

from lab.orchestration.doctor import Probes, evaluate

SMI_4090_580 = "0, NVIDIA GeForce RTX 4090, 580.82.07\n"


def by_name(checks):
    return {c.name: c for c in checks}


@pytest.mark.docker
def test_toolkit_probe_on_a_real_engine_without_the_toolkit():
    """The engine here has no NVIDIA runtime: the probe's test container must fail as on a
    rental whose toolkit is missing, and the doctor must give the exact fix."""
    docker = pytest.importorskip("docker")
    from lab.facts.host import read_pins
    from lab.orchestration.doctor import _engine_probes

    try:
        client = docker.from_env(timeout=30)
        info = client.info()
    except Exception as exc:
        pytest.skip(f"no Docker engine reachable ({type(exc).__name__}: {exc}); run scripts/ci_docker.sh")
    if "nvidia" in (info.get("Runtimes") or {}):
        pytest.skip("this engine has the NVIDIA runtime registered")
    image = read_pins()["CPU_IMAGE"]
    found = _engine_probes(image, "nvidia", container_test=True)
    assert found["image_present"], f"image {image} is not built; run `bash scripts/ci_docker.sh` first"
    ok, text = found["toolkit_test"]
    assert not ok and "could not select device driver" in text
    tk = by_name(evaluate(Probes(**found, nvidia_smi=SMI_4090_580)))["nvidia container toolkit"]
    assert not tk.ok and tk.blocking and "nvidia-ctk runtime configure --runtime=docker" in tk.fix
    assert not client.containers.list(all=True, filters={"label": "iteralab.doctor"})


def test_host_torch_check_flags_a_gpu_host_whose_torch_sees_none():
    from lab.orchestration.doctor import host_torch_check

    ok = host_torch_check("cpu")
    assert ok.ok and "torch 2.13.0" in ok.detail and "sees 0 GPU(s)" in ok.detail
    bad = host_torch_check("nvidia", expect_gpu="nvidia")  # this machine's torch sees no GPU
    assert not bad.ok and bad.blocking and "would run on CPU" in bad.detail


def test_doctor_exit_status_follows_its_verdict(monkeypatch, capsys):
    """`iteralab doctor` on a container rental (no engine, the host's torch works): WARN and
    exit 0; the same host when a campaign expects an NVIDIA GPU it lacks: FAIL and exit 1."""
    import lab.orchestration.doctor
    from lab.cli import main

    container = Probes(engine_version=None, engine_error="FileNotFoundError: /var/run/docker.sock",
                       in_container=True)
    monkeypatch.setattr(lab.orchestration.doctor, "probe", lambda expect_gpu=None, **kw: Probes(
        **{**container.__dict__, "expect_gpu": expect_gpu}))
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "WARN engine: no Docker engine reachable (this host is itself a container)" in out
    assert "FAIL" not in out and out.splitlines()[-1].startswith("verdict: ready, with 1 warning(s)")
    assert main(["doctor", "--expect-gpu", "nvidia"]) == 1
    out = capsys.readouterr().out
    assert "FAIL gpu: a nvidia GPU is expected" in out
    assert out.splitlines()[-1].startswith("verdict: not ready: 1 blocking failure(s) (gpu)")
