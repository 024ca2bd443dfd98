"""Does the pinned vLLM support this model? Asked of vLLM itself, in its own venv.

Run with the vLLM venv's python (lab.engines.vllm.probe_model starts it): standard library and
vLLM only, never a ``lab`` module. Reads the ``architectures`` of ``<model>/config.json`` and
has vLLM resolve the model as ``LLM(model=..., runner=RUNNER)`` would: ``vllm.config.ModelConfig``
asks vLLM's model registry (native models, adapters, its transformers back-end) and raises when
no architecture resolves. Loads no weights and starts no engine (10 s to minutes: the import
of vLLM on a loaded 2-core machine).

Usage: ``python -P vllm_probe.py MODEL_DIR [RUNNER [LOAD_FRACTION [DTYPE]]]`` (RUNNER: "pooling"
by default; LOAD_FRACTION "-": resolve only; DTYPE: vLLM's dtype, default "auto"). Prints one
JSON object on stdout: ``{"architectures": [...], "resolved": str | null, "reason": str, "vllm":
version, "pooling": {...} | null, "dtype": str | null}`` (``reason``: vLLM's own words, one line,
when nothing resolved; ``pooling``: the pooler vLLM resolved for a pooling runner, the fields of
lab/engines/vllm_worker.py ``_pooling``; ``dtype``: the dtype vLLM resolved), or ``{"error": one
line}`` with exit 1 when the config cannot be read.

With LOAD_FRACTION (a ``gpu_memory_utilization``; the lab asks it for generation) a resolved
model is also loaded: the engine is started as a pass would start it (fp32, eager,
``max_model_len`` 64) and one token generated from the first token id the tokenizer has; a
failure sets ``resolved`` to null and ``reason`` to vLLM's error, one line. Resolving is not
loading: the pinned vLLM resolves a BERT decoder (BertLMHeadModel) through its transformers
back-end, which then has no parameter for BERT's LM head weights (``cls.*``). 35-60 s on
2 cores (the engine's start).
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
    if len(argv) not in (1, 2, 3, 4):
        out.write(json.dumps({"error": "usage: vllm_probe.py MODEL_DIR [RUNNER [LOAD_FRACTION [DTYPE]]]"}) + "\n")
        return 1
    runner = argv[1] if len(argv) >= 2 else "pooling"
    load = argv[2] if len(argv) >= 3 and argv[2] != "-" else None
    dtype = argv[3] if len(argv) == 4 else "auto"
    cfg_path = Path(argv[0]) / "config.json"
    try:
        archs = list(json.loads(cfg_path.read_text(encoding="utf-8")).get("architectures") or [])
    except (OSError, ValueError) as exc:
        out.write(json.dumps({"error": f"{cfg_path}: {type(exc).__name__}: {exc}"}) + "\n")
        return 1
    import vllm
    from vllm.config import ModelConfig

    resolved, reason, pooling, resolved_dtype = None, "", None, None
    try:
        cfg = ModelConfig(model=argv[0], runner=runner, dtype=dtype)
        resolved = cfg.architecture
        resolved_dtype = str(cfg.dtype).removeprefix("torch.")
        pooling = _pooling(getattr(cfg, "pooler_config", None))
    except Exception as exc:  # vLLM's refusal (a pydantic ValidationError around a ValueError)
        text = " ".join(str(exc).split())
        reason = text.split("Value error, ", 1)[-1].split(" Supported architectures:", 1)[0][:300]
    if resolved and load is not None:
        reason = load_and_generate(argv[0], runner, float(load))
        resolved = None if reason else resolved
    out.write(json.dumps({"architectures": archs, "resolved": resolved, "reason": reason,
                          "vllm": vllm.__version__, "pooling": pooling, "dtype": resolved_dtype}) + "\n")
    out.flush()
    return 0


def _pooling(pooler) -> dict | None:
    """The pooler vLLM resolved, in the worker's fields (lab/engines/vllm_worker.py ``_pooling``,
    loaded from its file: this script imports no ``lab`` package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("vllm_worker", Path(__file__).with_name("vllm_worker.py"))
    assert spec is not None and spec.loader is not None
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    return worker._pooling(pooler)


def load_and_generate(model: str, runner: str, fraction: float) -> str:
    """'' when vLLM starts an engine for ``model`` and generates one token; else its error, one line."""
    try:
        from vllm import LLM, SamplingParams

        llm = LLM(model=model, runner=runner, dtype="float32", max_model_len=64, enforce_eager=True,
                  gpu_memory_utilization=fraction)
        first = min(llm.get_tokenizer().get_vocab().values())
        llm.generate([{"prompt_token_ids": [first]}], SamplingParams(temperature=0.0, max_tokens=1), use_tqdm=False)
    except Exception as exc:  # the engine's refusal, whatever its type: reported, never raised
        text = " ".join(str(exc).split()) or type(exc).__name__
        return f"loading it failed: {type(exc).__name__}: {text[:300]}"
    return ""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
