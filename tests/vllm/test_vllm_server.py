"""vLLM's OpenAI-compatible server on the real product (issue 36), the parts a server pass does not
show: a server started and left by an exception inside its with-block takes its whole process group
with it, its process tree's usage kept; a server that dies at start is one line naming its log.
A served rate series (outputs against the offline reference, figures re-derived from the records
and compared with the load generator's own result) is tests/vllm/test_server_campaign.py, through
the whole product.

Time: one server start of the native demo generator (25 s measured on the quiet 2-core machine,
longer when it is loaded) and one failed start (a model folder that does not exist: vLLM's import,
then its refusal). Skipped, saying why, where the vLLM venv is absent or stale (`make vllm-env`).
The native model is built once (minutes) when `make model-gen-native` has not run.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from lab.engines import vllm_env

pytestmark = pytest.mark.skipif(not vllm_env.is_ready(), reason=(
    f"the vLLM venv {vllm_env.venv_dir()} is absent or older than requirements-vllm.txt; run "
    "`make vllm-env` (CI does) to run the vLLM server tests"))

THREADS = 1  # the server's declared OpenMP threads


def report(what: str, **figures) -> None:
    print(f"\n[vllm server] {what}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))


def group_gone(pgid: int, within_s: float = 10.0) -> bool:
    """Whether process group ``pgid`` has no process left within ``within_s`` s (killed members
    are reaped by init, not at once)."""
    end = time.monotonic() + within_s
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.2)


class Leave(Exception):
    """Raised inside the server's with-block: the caller fails, the server must go anyway."""


def test_a_server_left_by_an_exception_takes_its_process_group_with_it(tmp_path, native_gen_model_dir):
    from lab.engines.vllm import VllmSettings
    from lab.engines.vllm_server import VllmServer, server_config
    from lab.facts.constants import VLLM_MEMORY_FRACTION

    settings = VllmSettings(model=str(native_gen_model_dir), dtype="float32", max_model_len=256, enforce_eager=True,
                            gpu_memory_utilization=VLLM_MEMORY_FRACTION["cpu"], runner="generate", threads=THREADS)
    server = VllmServer(settings, log_path=tmp_path / "server.log")
    with pytest.raises(Leave), server:
        started = server.start()
        assert started.url.startswith("http://127.0.0.1:") and started.setup_s > 0
        report("server", setup_s=round(started.setup_s, 1), threads=THREADS, url=started.url)
        seen = server_config(started.url)  # the server answers and says what it runs
        assert seen["max_model_len"] == 256, seen
        assert server.alive()
        raise Leave  # the caller fails here: the server's whole group must still go
    pgid = started.pid
    assert group_gone(pgid)
    usage = server.usage
    assert usage is not None and usage.cpu_s > 0 and usage.processes >= 2 and usage.samples > 0
    assert all(v > 0 for v in usage.peak_rss_bytes.values())
    report("server usage", cpu_s=round(usage.cpu_s, 1), processes=usage.processes,
           peak_rss_mib=json.dumps({str(k): round(v / 2**20) for k, v in usage.peak_rss_bytes.items()}))


def test_a_server_that_dies_at_start_is_one_line_naming_its_log(tmp_path):
    from lab.engines.vllm import VllmSettings
    from lab.engines.vllm_server import ServerStartError, VllmServer

    settings = VllmSettings(model=str(tmp_path / "no-such-model"), dtype="float32", max_model_len=64,
                            enforce_eager=True, gpu_memory_utilization=0.1, runner="generate")
    server = VllmServer(settings, log_path=tmp_path / "server.log")
    with pytest.raises(ServerStartError) as e:
        server.start()
    msg = str(e.value)
    assert "exited" in msg and str(tmp_path / "server.log") in msg and "\n" not in msg
    assert (tmp_path / "server.log").stat().st_size > 0 and server.proc is None and not server.alive()
