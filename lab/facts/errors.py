"""The lab's error hierarchy: one base, user errors, pass failures (no imports of their own).

Every error the lab raises on purpose derives from ``LabError``. Callers (the CLI, the
service layer, the screens) catch by class, never by message:

- ``UserError``: input that cannot be used as written (a campaign file, a flag, a folder, an
  archive). Its message is one line naming what is wrong and how to fix it; the CLI prints it
  and exits with ``EXIT_USER`` (2).
- ``PassFailure``: a pass that started and did not finish. It carries a ``FailureKind`` (what
  the raw table and the orchestrator read, never a substring of the message) and the number of
  items completed before it stopped, when known.

Not user errors, still one line: ``JournalBusy``, ``CampaignBusy``, ``CampaignFolderLost`` (another
process holds or removed what this one needs) and ``GpuNotMatched`` derive from ``LabError``
directly. Anything else that reaches a caller is a defect: ``one_line`` says so, with its class.

``ProtocolError`` (a campaign file) is a ``UserError``; it lives here so that low-level checks
(e.g. ``lab.facts.host_cards``) can raise it without importing ``lab.orchestration.protocol``, which calls them at
lock. ``lab.orchestration.protocol`` re-exports it. Module-specific errors subclass one of these and keep
their old built-in base (``ValueError``/``RuntimeError``) so existing ``except`` clauses hold.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from enum import StrEnum

EXIT_USER = 2


class LabError(Exception):
    """Base of every error the lab raises on purpose."""


class UserError(LabError, ValueError):
    """Input that cannot be used as written; one line naming the field and the fix (exit 2)."""


class ProtocolError(UserError):
    """A campaign file that cannot be used as written; one line naming the field and the fix."""


class FailureKind(StrEnum):
    """Why a pass did not finish; stored as its plain string in the journal and the raw table."""

    OOM = "oom"
    DEVICE_UNAVAILABLE = "device_unavailable"
    DISK_FULL = "disk_full"
    NOT_HONOURED = "not_honoured"
    NON_FINITE = "non_finite"
    WEIGHTS_NOT_LOADED = "weights_not_loaded"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    TASK_ERROR = "task_error"
    ERROR = "error"


class PassFailure(LabError, RuntimeError):
    """A pass that started and stopped early.

    Attributes: ``kind`` (``FailureKind``), ``items_done`` (items completed before the failure,
    ``None`` when unknown). Subclasses set ``kind`` as a class attribute."""

    kind: FailureKind = FailureKind.ERROR

    def __init__(self, message: str = "", *, items_done: int | None = None) -> None:
        super().__init__(message)
        self.items_done = items_done


def one_line(exc: BaseException) -> str:
    """The line a caller shows for ``exc``: the message of a ``LabError`` (already one line with the
    fix); for any other exception, a defect, its class and first line and what to do."""
    if isinstance(exc, LabError):
        return str(exc)
    first = (str(exc).strip().splitlines() or [""])[0]
    return (f"unexpected {type(exc).__name__}: {first} (a defect of the lab, not of your input: please "
            "report it with the campaign folder)")


ELLIPSIS = " …"
"""What ends a text clip() shortened."""


def clip(text: str, limit: int) -> str:
    """``text`` on one line (whitespace runs become one space) of at most ``limit`` characters:
    unchanged when it fits, else cut at the last space before the limit and ended with ELLIPSIS,
    never inside a word or value (a single word longer than the limit is cut at the limit)."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    room = max(limit - len(ELLIPSIS), 1)
    head = flat[:room + 1]
    cut = head.rfind(" ")
    return (flat[:cut] if cut > 0 else flat[:room]).rstrip(" ,;:") + ELLIPSIS


def did_you_mean(word: str, valid: Iterable[str], otherwise: str) -> str:
    """The hint of a one-line refusal of an unknown ``word``: "did you mean 'x'?" for the closest
    of ``valid`` (difflib.get_close_matches, its default cutoff 0.6), else ``otherwise`` (the
    list of what is valid, worded by the caller). The one place that wording is built."""
    close = closest(word, valid)
    return f"did you mean {close!r}?" if close else otherwise


def closest(word: str, valid: Iterable[str]) -> str | None:
    """The closest of ``valid`` to ``word`` (difflib.get_close_matches, cutoff 0.6), or None."""
    close = difflib.get_close_matches(word, list(valid), n=1)
    return close[0] if close else None
