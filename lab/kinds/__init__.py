"""Task kinds as plug-ins: the registry :data:`KINDS`, one line per kind.

A kind is declared once, by a :class:`lab.kinds.kind.TaskKind` in its own module here
(``<name>_kind.py``: keys and defaults, metrics, agreement rule, engines, prediction record,
the per-kind decisions), beside its pass job in ``lab/passes/tasks/`` (which the declaration names
by path). Every caller reads the kind object (``task_kind(name)``), never branches on the name;
``scripts/kind_branches.py`` (``make lint``) refuses a comparison of a kind with a kind's name
outside these modules and the kinds' pass jobs. Adding a kind: its module here, its pass job, its
tests, and one line below (docs/architecture.md, "Task kinds").
"""

from __future__ import annotations

from lab.facts.errors import UserError
from lab.kinds.classification_kind import CLASSIFICATION
from lab.kinds.custom_kind import CUSTOM
from lab.kinds.embedding_kind import EMBEDDING
from lab.kinds.generation_kind import GENERATION
from lab.kinds.kind import TaskKind

KINDS: dict[str, TaskKind] = {
    "classification": CLASSIFICATION,
    "embedding": EMBEDDING,
    "custom": CUSTOM,
    "generation": GENERATION,
}
"""Every task kind by its campaign-file name, in the order messages list them."""

DEFAULT_KIND = "classification"
"""The kind of a [task] table (or a pass.json) that names none."""


class UnknownKind(UserError):
    """A kind name this lab does not know (a campaign file's typo, a pass.json of another lab)."""


def task_kind(name: str | None, entry: bool = False) -> TaskKind:
    """The kind named ``name`` (None or "": the default kind); with ``entry`` (a [task] entry is
    declared), the kind as the user's code runs it (TaskKind.run_by_entry) where it can be. Raises
    UnknownKind (one line, naming the known kinds) for another name."""
    kind = KINDS.get(name or DEFAULT_KIND)
    if kind is None:
        raise UnknownKind(f"task kind {name!r} unknown to this lab; known: {', '.join(KINDS)}")
    return kind.run_by_entry() if entry and kind.entry is not None else kind


def kind_of_task(task: dict | None) -> TaskKind:
    """The kind of a pass's ``task`` extra (pass.json's ``extra.task``: ``kind``, and ``entry``
    when the user's code runs it); raises UnknownKind as :func:`task_kind`."""
    task = task or {}
    return task_kind(task.get("kind"), entry=bool(task.get("entry")))
