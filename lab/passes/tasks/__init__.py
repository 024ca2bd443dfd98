"""Task kinds (SPEC 2: task): the job a pass measures, one class per kind.

:func:`job_for` picks the class from ``PassSpec.extra["task"]["kind"]`` (absent:
classification), or the server pass's (lab.passes.tasks.server_job) for a variant declaring
``request_rate``. A kind's job (lab.passes.tasks.job.KindJob) runs on the pass's engine
(lab.passes.backends: the variant's ``engine``, or the user's code for a kind with an ``entry``).
A new kind is one more module with a class satisfying :class:`lab.passes.tasks.job.Job`, named
by the ``job`` of its kind object (lab.kinds, one line of :data:`lab.kinds.KINDS`).
"""

from __future__ import annotations

from lab.kinds import kind_of_task
from lab.passes.tasks.job import job_class


def job_for(spec):
    """The Job for one pass spec (lab.passes.spec.PassSpec). Raises lab.kinds.UnknownKind (a
    ValueError) for a kind this lab does not know (a pass.json written by another lab)."""
    if spec.variant.request_rate is not None:  # a server pass (lab.inputs.scenario): vLLM's server, loaded
        from lab.passes.tasks.server_job import ServerJob

        return ServerJob(spec)
    return job_class(kind_of_task(spec.extra.get("task")))(spec)
