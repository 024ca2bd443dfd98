"""Task kinds (SPEC 2: task): the job a pass measures, one class per kind.

:func:`job_for` picks the class from ``PassSpec.extra["task"]["kind"]`` (absent:
classification), or vLLM's job (lab.passes.tasks.vllm_job) for a variant declaring
``engine = "vllm"``. A new kind is one more module with a class satisfying
:class:`lab.passes.tasks.base.Job`, and one more entry of :data:`KINDS`.
"""

from __future__ import annotations

KINDS = {"classification": "lab.passes.tasks.classification:ClassificationJob",
         "embedding": "lab.passes.tasks.embedding:EmbeddingJob",
         "custom": "lab.passes.tasks.custom:CustomJob",
         "generation": "lab.passes.tasks.generation:GenerationJob"}


def job_for(spec):
    """The Job for one pass spec (lab.passes.spec.PassSpec). Raises ValueError for a kind this
    lab does not know (a pass.json written by another lab)."""
    import importlib

    if spec.variant.engine == "vllm":  # classification, embedding or generation, run by vLLM (its own refusals)
        from lab.passes.tasks.vllm_job import VllmJob

        return VllmJob(spec)
    kind = (spec.extra.get("task") or {}).get("kind", "classification")
    if kind not in KINDS:
        raise ValueError(f"task kind {kind!r} unknown to this lab; known: {', '.join(KINDS)}")
    module, cls = KINDS[kind].split(":")
    return getattr(importlib.import_module(module), cls)(spec)
