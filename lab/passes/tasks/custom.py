"""Custom: the user's own inference code (``[task] kind = "custom"``, ``entry = "file.py:Class"``).

The protocol an entry class follows (docs/task-custom.md, "Your own inference code"):

- ``Class(settings: dict, device: str)``: built once per pass, in the model-load phase.
  ``settings`` holds the variant's declared fields (``precision``, ``batch_size``,
  ``max_length``, ``padding``, ``bucketing``, ``attention``, ``quantization``, ``device``...,
  as in ``Variant.to_json``) and ``model_path`` ([model] path or id), ``revision`` and
  ``pad_token`` when declared; ``device`` is the device the lab resolved ("cpu", "cuda:0").
- ``predict(texts: list[str]) -> list[str]``: one label per text, in order; called once per
  batch the lab forms (its size is the variant's batch size, the last one shorter; with
  bucketing the lab sorts by token count), during the warm-up and the measured window.
- optional ``settings_used() -> dict``: the settings the code actually applied (the same keys,
  e.g. ``{"precision": "fp32", "max_length": 256}``). A declared setting it does not report is
  recorded as ``"declared, not observable"`` (lab.passes.observed.NOT_OBSERVABLE), never claimed;
  a reported one that contradicts the declaration fails the pass (not honoured).

The lab owns the rest: corpus reading, ids, batching and bucketing (token counts from the
[model] tokenizer), warm-up, the measured window and device synchronisation, memory counters,
events, failure rows, predictions on disk (the classification format, ``prob`` null) and
validation. An exception in ``predict`` is a failure row (:class:`EntryFailed`) with the items
of the batches completed before it and the traceback's last line; a return that is not a list of
str, one per text (or a ``settings_used()`` that is not a dict of str keys), is one too, named as
what it is; the batch is named "warm-up batch N" or "batch N of the measured window".
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path

from lab.facts.constants import USER_METRIC_TIMEOUT_S
from lab.facts.errors import FailureKind, PassFailure
from lab.passes.tasks.classification import ClassificationJob
from lab.passes.tasks.job import KindJob

IMPORTS_FINE = "entry imports and has the protocol"  # the check process's last line when it does


class EntryFailed(PassFailure):
    """The user's entry raised, or returned what the protocol does not take, in ``predict`` or
    ``settings_used``; ``items_done`` counts the measured window's items of the batches it
    completed before (0 in the warm-up)."""

    kind = FailureKind.TASK_ERROR


class EntryOutOfMemory(PassFailure):
    """The user's code ran out of memory (a device's or the host's, lab.passes.failures.is_oom)
    inside a call of its method: an oom row like the built-in jobs', its message naming the
    batch and the code's line as :class:`EntryFailed` does."""

    kind = FailureKind.OOM


class EntryNotLoadable(PassFailure):
    """The entry file cannot be imported, or has no class of that name with the protocol."""

    kind = FailureKind.TASK_ERROR


def raised_by_the_lab(exc: BaseException) -> bool:
    """Whether ``exc``, caught around a call of the user's code, is no failure of that code: the pass
    stopped from outside (lab.passes.failures.PassStopped, a card's WorkerStopped: a PassFailure) or
    out of memory (MemoryError, torch's OutOfMemoryError: an oom row). Anything else it raises,
    KeyboardInterrupt and SystemExit included, is the code's own failure (:class:`EntryFailed`)."""
    from lab.passes.failures import PassStopped

    return (isinstance(exc, (PassStopped, PassFailure, MemoryError))
            or type(exc).__name__ == "OutOfMemoryError")


def last_traceback_line(exc: BaseException) -> str:
    """'x.py, line N, in f: Error: message' for the innermost frame of ``exc`` in a real file (Python's
    own "<frozen importlib...>" frames skipped); a SyntaxError names its own file and line, the
    user's, where Python reports it (SyntaxError.filename, .lineno), not the importer's frame."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{Path(exc.filename).name}, line {exc.lineno}: {type(exc).__name__}: {exc.msg}"[:300]
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<")]
    where = f'{Path(frames[-1].filename).name}, line {frames[-1].lineno}, in {frames[-1].name}: ' if frames else ""
    text = traceback.format_exception_only(type(exc), exc)[-1].strip()
    return (where + text)[:300]


def _import_file(path: Path, mod_name: str, where: str, register: bool):
    """The module of the user's file ``path`` (``where``: the campaign-file key it came from, for
    the one-line errors); ``register`` also puts it in sys.modules under ``mod_name``. Raises
    EntryNotLoadable when the file is missing, is not Python, or raises on import."""
    if path.is_dir():
        raise EntryNotLoadable(f"{where} {path} is a folder; give the Python file in it, \"path/to/file.py:Name\"")
    if not path.is_file():
        raise EntryNotLoadable(f"{where} file {path} not found; fix {where}")
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise EntryNotLoadable(f"{where} {path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - the user's import error, as one line
        raise EntryNotLoadable(f"{where} {path.name} cannot be imported: {last_traceback_line(exc)}") from None
    return module


def signature_refusal(fn, args: tuple, shown: str) -> str:
    """'' when ``fn`` can be called with the positional ``args`` (inspect.signature bind; nothing
    is called), else why not, in a few words: "``shown`` cannot take 2 positional argument(s): it
    is (predictions)". A callable whose signature Python cannot read (some built-ins) passes."""
    import inspect

    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return ""
    try:
        sig.bind(*args)
    except TypeError:
        return f"{shown} cannot take {len(args)} positional argument(s): it is {sig}"
    return ""


def load_entry(entry: str, method: str = "predict", returns: str = "list[str]"):
    """The class named by ``entry`` ("/abs/path/file.py:ClassName"), imported from its file.
    ``method``: the protocol's method the pass calls once per batch (the kind's
    lab.kinds.kind.EntryRun.method: ``predict``, ``embed``, ``generate``); ``returns``: what it
    returns, in the refusals' words.

    Raises EntryNotLoadable (one line) when the file cannot be imported (its error's last line
    named), defines no such class (a function of that name is named as one), the class lacks
    ``method``, or its signatures cannot take the protocol's calls: ``ClassName(settings,
    device)`` and ``method(texts)`` (read with inspect.signature; nothing is built or called)."""
    import inspect

    file, _, name = entry.rpartition(":")
    path = Path(file)
    module = _import_file(path, f"iteralab_entry_{path.stem}", "[task] entry", register=True)
    cls = getattr(module, name, None)
    protocol = f"{method}(texts: list[str]) -> {returns}"
    if not isinstance(cls, type):
        if callable(cls):
            raise EntryNotLoadable(f"[task] entry {path.name}:{name} is a {type(cls).__name__}, not a class; entry "
                                   f"names a class with {protocol}; give it after ':'")
        raise EntryNotLoadable(f"[task] entry {path.name} defines no class {name!r}; fix the name after ':'")
    if not callable(getattr(cls, method, None)):
        raise EntryNotLoadable(f"[task] entry {path.name}:{name} has no {method} method; the protocol "
                               f"needs {protocol}")
    call = getattr(cls, method)
    bound = isinstance(inspect.getattr_static(cls, method, None), (staticmethod, classmethod))  # no self
    why = (signature_refusal(cls, (None, None), f"{name}(settings, device)")
           or signature_refusal(call, (None,) if bound else (None, None), f"{name}.{method}(texts)"))
    if why:
        raise EntryNotLoadable(f"[task] entry {path.name}:{name}: {why}; the protocol builds {name}(settings: dict, "
                               f"device: str) and calls {protocol}")
    return cls


def load_function(ref: str, where: str = "[quality] metric"):
    """The function named by ``ref`` ("/abs/path/file.py:name"), imported from its file.
    Raises EntryNotLoadable (one line) as :func:`load_entry` does, and when ``name`` is a class
    or cannot be called with two positional arguments (inspect.signature; nothing is called)."""
    file, _, name = ref.rpartition(":")
    path = Path(file)
    module = _import_file(path, f"iteralab_user_{path.stem}", where, register=False)
    fn = getattr(module, name, None)
    protocol = f"the protocol needs {name}(predictions: list[str], references: list[str]) -> float"
    if isinstance(fn, type):
        raise EntryNotLoadable(f"{where} {path.name}:{name} is a class; metric names a function, {protocol}")
    if not callable(fn):
        raise EntryNotLoadable(f"{where} {path.name} defines no function {name!r}; {protocol}")
    why = signature_refusal(fn, (None, None), f"{name}(predictions, references)")
    if why:
        raise EntryNotLoadable(f"{where} {path.name}:{name}: {why}; {protocol}")
    return fn


def user_metric_value(fn, predictions: list[str], references: list[str]) -> float:
    """``fn(predictions, references)`` (label lists, corpus order) as a float. Raises ValueError
    (one line) when it raises, whatever it raises (SystemExit and KeyboardInterrupt included), or
    returns something that is not a finite number (bool included)."""
    import math

    try:
        value = fn(predictions, references)
    except BaseException as exc:  # noqa: BLE001 - the user's code: its error is the reason
        raise ValueError(f"metric function raised {type(exc).__name__}: {str(exc)[:200]}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"metric function returned {value!r}, not a finite number")
    return float(value)


def _score_main(ref: str) -> int:
    """The child of :func:`score_in_fresh_process`: stdin a JSON list of [predictions,
    references] pairs; one line on its private channel (the stdout it was started with,
    lab.passes.events.open_event_channel: what the function prints goes to stderr)
    {"values": [...]} (exit 0) or {"error": one line} (1)."""
    import json

    from lab.passes.events import open_event_channel

    out = open_event_channel()
    pairs = json.loads(sys.stdin.read())
    try:
        fn = load_function(ref)
        values = [user_metric_value(fn, p, r) for p, r in pairs]
    except (EntryNotLoadable, ValueError) as exc:
        out.write(json.dumps({"error": str(exc)}) + "\n")
        return 1
    out.write(json.dumps({"values": values}) + "\n")
    return 0


def score_in_fresh_process(ref: str, pairs: list[tuple[list[str], list[str]]],
                           timeout_s: float = USER_METRIC_TIMEOUT_S, should_stop=None) -> list[float]:
    """The user's metric function ``ref`` ("/abs/path/file.py:name") over each (predictions,
    references) pair, run in a new Python process in a session of its own (this process never
    imports the user's code). Returns one float per pair. Raises ValueError (one line) when it
    cannot be imported, raises (whatever it raises), returns a non-number, ends its process
    (sys.exit, os._exit), runs past ``timeout_s`` (its session is then killed) or when
    ``should_stop()`` (polled every 0.2 s; None: never) turns True while it runs (killed too)."""
    import json
    import os
    import signal
    import subprocess
    import time

    from lab.facts.files import REPO_ROOT

    name = Path(ref.rpartition(":")[0]).name
    cmd = [sys.executable, "-m", "lab.passes.tasks.custom", "--score", ref]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    data: str | None = json.dumps(pairs)
    why = ""
    while True:
        try:
            stdout, stderr = proc.communicate(data, timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            data = None  # written once; communicate keeps it
            if time.monotonic() > deadline:
                why = f"{name}: the metric ran past {timeout_s:g} s; killed"
            elif should_stop is not None and should_stop():
                why = f"{name}: the metric was killed, the campaign being stopped; it runs again on resume"
            if why:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # the function and whatever it started
                except ProcessLookupError:
                    pass
                proc.communicate()
                raise ValueError(why) from None
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # nothing it started outlives it
    except ProcessLookupError:
        pass
    last = (stdout.strip().splitlines() or [""])[-1]
    try:
        out = json.loads(last)
        values = out["values"] if proc.returncode == 0 else None
    except (json.JSONDecodeError, KeyError, TypeError):
        out, values = {}, None
    if values is None or len(values) != len(pairs):
        if isinstance(out, dict) and out.get("error"):
            raise ValueError(out["error"])
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        raise ValueError(f"{name}: the metric's process ended (exit code {proc.returncode}) without returning its "
                         f"values (the function ends the process itself? sys.exit, os._exit): {tail[:160]}")
    return [float(v) for v in values]


class IsolatedMetric:
    """The user's metric function ``ref`` ("/abs/path/file.py:name") as validation calls it, each call
    run by :func:`score_in_fresh_process` (``timeout_s``, ``should_stop``): :meth:`scores` of a list
    of (predictions, references) pairs in one process; a call with pairs already scored (or already
    failed, other than stopped) answers from memory (a campaign's passes are validated again)."""

    def __init__(self, ref: str, timeout_s: float = USER_METRIC_TIMEOUT_S, should_stop=None):
        self.ref, self.timeout_s, self.should_stop = ref, timeout_s, should_stop
        self._known: dict[str, list[float] | str] = {}

    def scores(self, pairs: list[tuple[list[str], list[str]]]) -> list[float]:
        """One float per pair; ValueError (one line) as :func:`score_in_fresh_process` raises."""
        import json

        from lab.facts.files import sha256_bytes

        key = sha256_bytes(json.dumps(pairs).encode())
        known = self._known.get(key)
        if known is None:
            try:
                known = score_in_fresh_process(self.ref, pairs, self.timeout_s, self.should_stop)
            except ValueError as exc:
                known = str(exc)
                if self.should_stop is not None and self.should_stop():
                    raise
            self._known[key] = known
        if isinstance(known, str):
            raise ValueError(known)
        return known


def check_main(argv: list[str]) -> int:
    """``python -m lab.passes.tasks.custom [--metric | --method NAME RETURNS] REF``: import the
    entry class with the method NAME (``predict`` when not given) or, with ``--metric``, the metric
    function, in this fresh process: the lock check (:func:`check_in_fresh_process`). Prints
    IMPORTS_FINE or the one-line reason; exit 0 or 1. ``--score REF``: :func:`_score_main`
    (``archive verify --metric-file``)."""
    if argv[0] == "--score":
        return _score_main(argv[1])
    try:
        if argv[0] == "--metric":
            load_function(argv[1])
        elif argv[0] == "--method":
            load_entry(argv[3], argv[1], argv[2])
        else:
            load_entry(argv[0])
    except EntryNotLoadable as exc:
        print(str(exc))
        return 1
    print(IMPORTS_FINE)
    return 0


def check_in_fresh_process(ref: str, metric: bool = False, timeout_s: float = 300.0, entry_run=None) -> str:
    """'' when a new Python process imports ``ref`` (an entry class with the method of
    ``entry_run``, a lab.kinds.kind.EntryRun, ``predict`` when None; or a metric function with
    ``metric``) and finds the protocol's methods, else the one-line reason (lab.orchestration.preflight)."""
    import os
    import subprocess

    from lab.facts.files import REPO_ROOT

    how = ["--metric"] if metric else [] if entry_run is None else ["--method", entry_run.method, entry_run.returns]
    cmd = [sys.executable, "-m", "lab.passes.tasks.custom", *how, ref]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False, cwd=REPO_ROOT,
                           env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    except subprocess.TimeoutExpired:
        return f"{ref}: importing it took more than {timeout_s:g} s; an import should not run the job"
    lines = (r.stdout.strip() or r.stderr.strip() or "no output").splitlines()
    return "" if r.returncode == 0 and lines[-1] == IMPORTS_FINE else lines[-1][:300]


def _shown(value) -> str:
    """``value`` for a one-line message: "None", else its type and repr cut to 60 characters
    ("int 3", "str 'sci.space'")."""
    if value is None:
        return "None"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"




def predict_refusal(out, n: int) -> tuple[str, list]:
    """('', labels) when ``out`` (what predict returned for ``n`` texts) is a sequence of ``n``
    str; else (what it is, in a few words: "None", "int 3 at position 0", "5 value(s) for 4
    texts", []). A str, bytes or dict is named as such, never iterated; another iterable (a
    tuple, a generator, an array of str) is read once here, so an error it raises is the user's."""
    if out is None or isinstance(out, (str, bytes, dict)) or not hasattr(out, "__iter__"):
        return _shown(out), []
    labels = list(out)
    if len(labels) != n:
        return f"{len(labels)} value(s) for {n} texts", []
    bad = next((j for j, o in enumerate(labels) if not isinstance(o, str)), None)
    if bad is not None:
        return f"{_shown(labels[bad])} at position {bad}", []
    return "", labels


class CustomJob(ClassificationJob):
    """``[task] kind = "custom"``: the lab's batches handed to the user's ``predict`` (the entry
    engine's classify, lab.passes.backends.entry_backend), one label per text; the classification
    format with ``prob`` null and no checkpoint labels."""

    kind = "custom"
    loader = None

    def load(self, device: str) -> tuple:
        KindJob.load(self, device)
        self.id2label = None
        return self.tokenizer, self.model


if __name__ == "__main__":
    from lab.facts.process import leave_process

    leave_process(check_main(sys.argv[1:]))
