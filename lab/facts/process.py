"""How a process of the lab ends once its work is written (see :func:`leave_process`)."""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def leave_process(code: int) -> NoReturn:
    """End a process of the lab that returned ``code`` (its records written and closed) without the
    interpreter's module teardown, which frees torch's and transformers' objects one by one:
    about 1 s per pass process with the demo classifier loaded, on the 2-core CPU host
    (``scripts/bench_pass_exit.py`` prints it side by side). What a normal exit does that
    anything relies on is done first, in its order: threading's exit hooks run and non-daemon
    threads joined (``threading._shutdown``, as the interpreter does), ``atexit``
    handlers run (vLLM's engine shutdown, multiprocessing's children), logging shut down, the
    standard streams flushed (the event channel is line-buffered and flushed per event).
    Never returns; only for a ``__main__`` whose ``main()`` returned (an exception keeps
    Python's own exit and its traceback). Used by the pass runner, the host-facts snapshot
    and the user-code check and metric processes (lab.passes.tasks.custom)."""
    import atexit
    import logging
    import threading

    # What the interpreter's own exit does first (Py_Finalize): the hooks threading registered
    # (concurrent.futures tells its worker threads to stop: torch.compile's pool waits for that),
    # then every non-daemon thread joined. Joining first, as this did, waited forever on those
    # workers (a compiled pass hung after writing its records).
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a full disk: nothing more to keep
            pass
    os._exit(code)
