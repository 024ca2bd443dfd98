"""A compile = true variant that can never compile where its passes run is refused before any
pass, in one line: torch.compile needs a C++ compiler for a CPU device (Triton's C compiler
on a GPU), and the pass image ships none. Before, every pass of the variant became a failure
row at its compile phase, after the other variants had run.

Real probes: the local Python (with the host's g++, and with CXX pointing at a program that
is no compiler), the CPU pass image through Docker, and the CLI's one line.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import DOCKER_TEST_LABELS, REPO, cut_corpus, write_campaign

from lab.launchers.local import LocalLauncher
from lab.orchestration.orchestrator import Orchestrator
from lab.orchestration.protocol import ProtocolError, load_protocol, lock

pytestmark = pytest.mark.slow
NO_CXX = {**os.environ, "CXX": "/bin/false"}  # `/bin/false --version` fails: torch finds no compiler


def compile_campaign(tmp_path, model_dir):
    f = write_campaign(tmp_path, model_dir, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1), values=(1, 2))
    f.write_text(f.read_text().replace('padding = "longest"', 'padding = "longest"\ndevice = "cpu"\ncompile = true'))
    lock(load_protocol(f))
    return f


def test_the_local_probe_finds_the_host_compiler_or_says_why_not():
    assert LocalLauncher().probe_compile_toolchain("cpu") == ""
    why = LocalLauncher(env=NO_CXX).probe_compile_toolchain("cpu")
    assert why.startswith("InvalidCxxCompiler: No working C++ compiler found"), why


def test_a_compile_variant_without_a_compiler_is_refused_before_any_pass(tmp_path, model_dir):
    f = compile_campaign(tmp_path, model_dir)
    orch = Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher(env=NO_CXX))
    with pytest.raises(ProtocolError, match=r"variant batch/batch_size=1 declares compile = true, but torch.compile "
                                            r"cannot build cpu kernels where passes run \(local launcher: "
                                            r"InvalidCxxCompiler: .*\); declare compile = false") as e:
        orch.run()
    assert "\n" not in str(e.value)
    assert orch.journal.attempts() == [] and orch.journal.get_control("orchestrator") is None
    r = subprocess.run([sys.executable, "-m", "lab.cli", "campaign", "run", str(f), "--launcher", "local"],
                       capture_output=True, text=True, cwd=REPO, timeout=600,
                       env={**NO_CXX, "ITERALAB_RUNS": str(tmp_path / "runs")})
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "declares compile = true" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.docker
def test_the_cpu_pass_image_has_no_compiler_and_says_so(docker_client):
    from lab.facts.host import read_pins
    from lab.launchers.docker import DockerLauncher

    image = read_pins()["CPU_IMAGE"]
    try:
        launcher = DockerLauncher(image, "cpu", labels=DOCKER_TEST_LABELS, client=docker_client)
    except Exception as exc:  # image not built here
        pytest.skip(f"{image} not available ({type(exc).__name__}); run scripts/ci_docker.sh")
    why = launcher.probe_compile_toolchain("cpu")
    assert why.startswith("InvalidCxxCompiler: No working C++ compiler found"), why
