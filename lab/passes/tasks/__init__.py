"""Task kinds (SPEC 2: task): the job a pass measures, one class per kind.

:func:`job_for` picks the class from ``PassSpec.extra["task"]["kind"]`` (absent:
classification; with an ``entry``, the kind's job that runs the user's code), or vLLM's job
(lab.passes.tasks.vllm_job) for a variant declaring ``engine = "vllm"``, or the server pass's
(lab.passes.tasks.server_job) for a variant declaring ``request_rate``. A new kind is one more
module with a class satisfying :class:`lab.passes.tasks.job.Job`, named by the ``job`` of its
kind object (lab.kinds, one line of :data:`lab.kinds.KINDS`).
"""

from __future__ import annotations

from lab.kinds import kind_of_task
from lab.kinds.kind import VLLM
from lab.passes.tasks.job import job_class


def job_for(spec):
    """The Job for one pass spec (lab.passes.spec.PassSpec). Raises lab.kinds.UnknownKind (a
    ValueError) for a kind this lab does not know (a pass.json written by another lab)."""
    if spec.variant.request_rate is not None:  # a server pass (lab.inputs.scenario): vLLM's server, loaded
        from lab.passes.tasks.server_job import ServerJob

        return ServerJob(spec)
    if spec.variant.engine == VLLM:  # classification, embedding or generation, run by vLLM (its own refusals)
        from lab.passes.tasks.vllm_job import VllmJob

        return VllmJob(spec)
    return job_class(kind_of_task(spec.extra.get("task")))(spec)
