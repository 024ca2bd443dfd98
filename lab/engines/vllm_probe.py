"""Does the pinned vLLM support this model? Asked of vLLM itself, in its own venv.

Run with the vLLM venv's python (lab.engines.vllm.probe_model starts it): standard library and
vLLM only, never a ``lab`` module. Reads the ``architectures`` of ``<model>/config.json`` and
has vLLM resolve the model as ``LLM(model=..., runner=RUNNER)`` would: ``vllm.config.ModelConfig``
asks vLLM's model registry (native models, adapters, its transformers back-end) and raises when
no architecture resolves. Loads no weights and starts no engine (10 s to minutes: the import
of vLLM on a loaded 2-core machine).

Usage: ``python -P vllm_probe.py MODEL_DIR [RUNNER]`` (RUNNER: "pooling" by default). Prints
one JSON object on stdout: ``{"architectures": [...], "resolved": str | null, "reason": str,
"vllm": version}`` (``reason``: vLLM's own words, one line, when nothing resolved), or
``{"error": one line}`` with exit 1 when the config cannot be read.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

# Run as a script, this folder would come first on sys.path, and its vllm.py (the lab's client)
# would shadow the real vLLM: the client starts it with ``python -P``; this drops it anyway.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]


def main(argv: list[str]) -> int:
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # whatever vLLM prints on import goes to stderr, not into the answer
    if len(argv) not in (1, 2):
        out.write(json.dumps({"error": "usage: vllm_probe.py MODEL_DIR [RUNNER]"}) + "\n")
        return 1
    runner = argv[1] if len(argv) == 2 else "pooling"
    cfg_path = Path(argv[0]) / "config.json"
    try:
        archs = list(json.loads(cfg_path.read_text(encoding="utf-8")).get("architectures") or [])
    except (OSError, ValueError) as exc:
        out.write(json.dumps({"error": f"{cfg_path}: {type(exc).__name__}: {exc}"}) + "\n")
        return 1
    import vllm
    from vllm.config import ModelConfig

    resolved, reason = None, ""
    try:
        resolved = ModelConfig(model=argv[0], runner=runner).architecture
    except Exception as exc:  # vLLM's refusal (a pydantic ValidationError around a ValueError)
        text = " ".join(str(exc).split())
        reason = text.split("Value error, ", 1)[-1].split(" Supported architectures:", 1)[0][:300]
    out.write(json.dumps({"architectures": archs, "resolved": resolved, "reason": reason,
                          "vllm": vllm.__version__}) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
