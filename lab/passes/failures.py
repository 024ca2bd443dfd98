"""Why a pass or a card stopped: the one classification of its exception, for the one-card
runner and every card of a multi-card pass (both run lab.passes.sequence).

- :func:`failure_kind`: exception -> ``lab.facts.errors.FailureKind``;
- :func:`failure_status`: kind -> (status word, exit code), of a pass or of a card;
- :func:`failure_text`: the record's ``error`` field;
- :func:`report_failure`: the ``oom`` / ``error`` event a failure emits (none when stopped).

Stopped from outside (kind ``interrupted``: SIGINT reaching a one-card pass as
:class:`PassStopped`, a ``KeyboardInterrupt`` (:func:`stop_on_sigint`), or a worker's
``WorkerStopped`` on SIGTERM/SIGINT, sent when torchrun stops the cards after one failed, or
when the pass is stopped): nothing went wrong in the
pass itself, so no ``error`` event is emitted. A one-card pass then has the pass status
``interrupted`` (the orchestrator runs its slot again); a card has the card status
:data:`CARD_STOPPED` (``stopped``), which is no pass status: the merge
(lab.passes.multicard.merge_cards) decides the pass's status from all its cards (interrupted
only when every failure is a stopped card, else the failing card's). Both exit
``EXIT_ERROR``. A ``KeyboardInterrupt`` the user's code raises itself is no stop: it is that
code's failure (lab.passes.tasks.custom), a failure row of the variant.
"""

from __future__ import annotations

import resource
import signal
from pathlib import Path

from lab.facts.diskfull import is_disk_full
from lab.facts.errors import FailureKind, PassFailure, clip
from lab.passes.events import EXIT_ERROR, EXIT_OOM, EventKind, EventWriter, PassStatus

OOM_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory", "std::bad_alloc",
               "memory allocation of")
"""Words of an allocation failure (lower case): CUDA/HIP and torch's allocators, errno ENOMEM, C++'s
bad_alloc, Rust's ``memory allocation of N bytes failed`` (then an abort: the tokenizers library)."""
ONEDNN_PRIMITIVE = "could not create a primitive"
"""oneDNN's words (torch's CPU matmuls and convolutions) when it cannot build a primitive. Under an
address-space limit (RLIMIT_AS) that is its scratchpad or JIT code buffer not being mapped: the
pass ran out of the memory it was given (a CI run met it for an embedding batch of 8 long items,
recorded as an error). Without a limit it may be an unsupported shape or type: an error then."""
NATIVE_CRASH_SIGNALS = frozenset({signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS})
"""Signals a process dies of when native code fails to allocate and aborts (or dereferences the
null it got): with an allocation failure as the log's last words, the pass ran out of memory."""
CARD_STOPPED = "stopped"
"""A card's own status when torchrun or the user stopped it (not a pass status: the merge decides)."""

FAILURE_STATUS = {FailureKind.INTERRUPTED: (PassStatus.INTERRUPTED, EXIT_ERROR),
                  FailureKind.OOM: (PassStatus.OOM, EXIT_OOM)}
"""(pass status, exit code) of a failure kind; any other kind: (error, EXIT_ERROR)."""


class PassStopped(KeyboardInterrupt):
    """A signal stopped the pass process from outside (SIGINT, or SIGTERM where a job turns it
    into this: lab.passes.backends.vllm_backend); never raised by the user's code."""


def stop_on_sigint() -> None:
    """SIGINT raises :class:`PassStopped` in this process from now on (the pass runner)."""

    def stopped(signum, frame) -> None:
        raise PassStopped(f"{signal.Signals(signum).name}: the pass was stopped")

    signal.signal(signal.SIGINT, stopped)


def address_space_limit() -> int | None:
    """This process's address-space limit in bytes (RLIMIT_AS's soft limit: the local launcher's
    memory limit), None when there is none."""
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def vm_peak_bytes() -> int | None:
    """VmPeak (bytes): the largest address space this process had; what RLIMIT_AS limits. None
    where /proc does not say."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmPeak:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def is_oom(exc: BaseException) -> bool:
    """True for CUDA/HIP OOM, Python MemoryError and torch's host allocator failures (OOM_MARKERS),
    and for oneDNN failing to create a primitive (ONEDNN_PRIMITIVE) in a process under an
    address-space limit (``address_space_limit``)."""
    if isinstance(exc, MemoryError):
        return True
    name, text = type(exc).__name__, str(exc).lower()
    if name == "OutOfMemoryError" or any(m in text for m in OOM_MARKERS):
        return True
    return ONEDNN_PRIMITIVE in text and address_space_limit() is not None


def native_oom_line(exit_code: int | None, log_tail: str) -> str:
    """The allocation failure that killed a pass process in native code, where Python never saw an
    exception: '' unless ``exit_code`` is minus a NATIVE_CRASH_SIGNALS signal and a line of
    ``log_tail`` (the end of its log) holds an OOM_MARKERS word; else that last such line, clipped
    to 200 characters (lab.facts.errors.clip)."""
    if exit_code is None or exit_code >= 0 or -exit_code not in NATIVE_CRASH_SIGNALS:
        return ""
    hits = [line.strip() for line in log_tail.splitlines() if any(m in line.lower() for m in OOM_MARKERS)]
    return clip(hits[-1], 200) if hits else ""


def failure_kind(exc: BaseException) -> FailureKind:
    """Why a pass stopped, from the exception it raised: a ``PassFailure``'s own kind (device
    unavailable, not honoured, non-finite, weights not loaded, disk full, a stopped card), else
    interrupted (KeyboardInterrupt), oom (``is_oom``), disk full (``is_disk_full``), timeout
    (TimeoutError), error. The one classification for the runner and the multi-card worker."""
    if isinstance(exc, PassFailure):
        return exc.kind
    if isinstance(exc, KeyboardInterrupt):
        return FailureKind.INTERRUPTED
    if is_oom(exc):
        return FailureKind.OOM
    if is_disk_full(exc):
        return FailureKind.DISK_FULL
    if isinstance(exc, TimeoutError):
        return FailureKind.TIMEOUT
    return FailureKind.ERROR


def failure_status(kind: FailureKind, card: bool = False) -> tuple[str, int]:
    """(status, exit code) of a pass (``card`` False: a ``PassStatus``, ``FAILURE_STATUS``) or of
    one card of a multi-card pass (``card`` True: the same, except interrupted -> ``CARD_STOPPED``)
    that failed with ``kind``."""
    if card and kind == FailureKind.INTERRUPTED:
        return CARD_STOPPED, EXIT_ERROR
    return FAILURE_STATUS.get(kind, (PassStatus.ERROR, EXIT_ERROR))


def failure_text(exc: BaseException) -> str:
    """The ``error`` field of a failed pass or card: the class name and the first line (at most
    500 characters, cut between words: lab.facts.errors.clip)."""
    return clip(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", 500)


def report_failure(ev: EventWriter, exc: BaseException, kind: FailureKind, counted: int, items_done: int) -> None:
    """Emit the failure's event: ``oom`` (``items_done`` = ``counted``, the window's own count,
    and the message's first line), ``error`` (``items_done``: the exception's own count when it
    has one, and "Class: message"), none for a pass or card stopped from outside. Messages are
    cut between words at 300 characters (lab.facts.errors.clip); a bare ``MemoryError()`` has an empty message."""
    if kind == FailureKind.OOM:
        ev.emit(EventKind.OOM, items_done=counted, kind=kind, message=clip((str(exc).splitlines() or [""])[0], 300))
    elif kind != FailureKind.INTERRUPTED:
        ev.emit(EventKind.ERROR, items_done=items_done, kind=kind, message=clip(f"{type(exc).__name__}: {exc}", 300))
