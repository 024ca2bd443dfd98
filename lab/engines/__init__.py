"""Inference engines other than the lab's own transformers loop (issue 21).

- ``vllm_env``: the vLLM venv (``make vllm-env``, built on first need).
- ``vllm``: the lab-side client (:class:`lab.engines.vllm.VllmClient`) and the lock's probe.
- ``vllm_worker``, ``vllm_probe``: scripts run with the vLLM venv's python; they import only
  the standard library and vLLM, never a ``lab`` module.
"""
