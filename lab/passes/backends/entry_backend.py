"""The user's own inference code as an engine (``[task] entry = "file.py:Class"``; docs/task-custom.md).

The entry class follows one protocol whatever the kind (lab.passes.tasks.custom: ``Class(settings,
device)``, optional ``settings_used()``), with the method of the kind's operation
(lab.kinds.kind.EntryRun), called once per batch the lab forms:

- classify (``kind = "custom"``): ``predict(texts: list[str])`` -> one label (str) per text;
- embed: ``embed(texts: list[str])`` -> a 2-D array of finite numbers (numpy array, torch tensor
  on any device, list of lists), one row per text, every batch the same width; stored as returned
  with each row's L2 norm;
- generate: ``generate(prompts: list[str])`` -> one str per prompt, the prompts made by the lab
  (the declared rule's); each output cut before the first stop string by the lab's rule
  (``stopped_by`` "stop" where the lab cut, else "entry": the code's own end, which the lab does
  not see), its tokens counted after the window by the kind (``Answer.returned``).

The lab sees no model inside the code: ``load`` returns the [model] tokenizer (for buckets and
token counts) and no model, the observed record is what ``settings_used()`` reports and
NOT_OBSERVABLE for the rest, and the lab compiles nothing (the declared ``compile`` is in the
settings). A call that raises, or returns anything but the operation's ``returns``, is a failure
row (lab.passes.tasks.custom.EntryFailed, EntryOutOfMemory) naming the batch ("warm-up batch N",
"batch N of the measured window") and the code's line, with the items of the batches before it.
"""

from __future__ import annotations

from typing import Any

from lab.facts.errors import PassFailure, clip
from lab.passes.backends import Answer, Batch, Needs
from lab.passes.tasks.custom import (
    EntryFailed,
    EntryOutOfMemory,
    _shown,
    last_traceback_line,
    load_entry,
    predict_refusal,
    raised_by_the_lab,
)

ENTRY_STOP = "entry"
"""``stopped_by`` of an output the lab did not cut: the code ended it (its eos or token limit)."""


def vectors_refusal(out, n: int, width: int | None) -> tuple[str, list]:
    """('', [the rows as a float32 numpy array]) when ``out`` (what embed returned for ``n`` texts)
    is a 2-D array of ``n`` rows of finite numbers, ``width`` wide when given (the first batch's);
    else (what it is, in a few words, [])."""
    import numpy as np

    if hasattr(out, "detach"):  # a torch tensor, wherever it lives
        out = out.detach().float().cpu().numpy()
    if out is None or isinstance(out, (str, bytes, dict)):
        return _shown(out), []
    try:
        arr = np.asarray(out, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        return f"{type(out).__name__} that is no array of numbers ({clip(str(exc), 80)})", []
    if arr.ndim != 2:
        return f"an array of shape {tuple(arr.shape)}, not (texts, width)", []
    if arr.shape[0] != n:
        return f"{arr.shape[0]} row(s) for {n} texts", []
    if width is not None and arr.shape[1] != width:
        return f"rows {arr.shape[1]} wide after {width} wide ones", []
    bad = np.flatnonzero(~np.isfinite(arr).all(axis=1))
    if bad.size:
        return f"a non-finite value in row {int(bad[0])}", []
    return "", [arr]


COMPARED_BY_THE_LAB = ("precision", "device", "attention", "compile", "quantization", "padding", "threads")
"""Settings ``settings_used()`` may report that lab.passes.observed.require_honoured compares itself
(precision as the dtype, padding by its rule, threads per worker); every other variant field it
reports is compared as written (:func:`contradictions`)."""


def contradictions(declared: dict, used: dict) -> list[str]:
    """What the user's ``settings_used()`` (``used``) reports against the declared variant's fields
    (``declared``: Variant.to_json()), for every field but COMPARED_BY_THE_LAB and the variant's
    names: one clause per field it reports with another value ("max_length 128 declared, the entry's
    settings_used() reported 999")."""
    names = ("variant_id", "label", "name", "series")
    return [f"{k} {declared[k]!r} declared, the entry's settings_used() reported {v!r}" for k, v in used.items()
            if k in declared and k not in COMPARED_BY_THE_LAB + names and v != declared[k]]


class EntryEngine:
    """The user's entry class, run on the lab's batches (module docstring)."""

    applies_task_rules = False  # the user's code is asked to; the kind checks its answers (unit norms, output lengths)
    name = "entry"
    compile: Any = None  # the lab cannot compile the user's code (lab.passes.sequence: no lab compile phase)

    def __init__(self, spec, needs: Needs):
        self.spec = spec
        self.needs = needs
        self.task = needs.task or {}
        self.entry = self.task["entry"]
        self.tokenizer: Any = None
        self.code: Any = None
        self.device = "cpu"
        self.width: int | None = None  # embed: the first batch's; every later batch must return as wide

    def settings(self) -> dict:
        """What the entry class is built with: the variant's declared fields, the model's, and the
        [task] keys of the kind (``pooling``, ``normalize``; ``prompt``, ``max_new_tokens``, ``stop``...)."""
        from lab.kinds import kind_of_task

        s = self.spec
        out = {k: v for k, v in s.variant.to_json().items() if k not in ("variant_id", "label")}
        out["model_path"] = s.model_ref
        out.update({k: s.extra[k] for k in ("revision", "pad_token") if s.extra.get(k)})
        out.update({k: self.task[k] for k in kind_of_task(self.task).keys if self.task.get(k) is not None})
        return out

    def load(self, device: str) -> tuple:
        """The [model] tokenizer and the entry class built once (no model the lab can see).
        Raises EntryNotLoadable, EntryFailed (its constructor raised)."""
        from lab.passes.inference import load_tokenizer

        s = self.spec
        self.device = device
        self.tokenizer = load_tokenizer(s.model_ref, s.extra.get("revision"), s.extra.get("pad_token"))
        cls = load_entry(self.entry, self.needs.entry.method, self.needs.entry.returns)
        try:
            self.code = cls(self.settings(), device)
        except BaseException as exc:  # noqa: BLE001 - the user's constructor
            if raised_by_the_lab(exc):
                raise
            raise EntryFailed(f"entry constructor raised: {last_traceback_line(exc)}", items_done=0) from None
        return self.tokenizer, None

    def begin_window(self) -> None:
        """Nothing to reset: the width of embed's rows holds for the whole pass."""

    def settings_used(self, items_done: int, when: str) -> dict:
        """What the entry's optional ``settings_used()`` reports ({} without one; None reads as {}),
        asked ``when`` ("after the warm-up", "after the measured window"). Raises EntryFailed (one
        line naming when, ``items_done`` kept) when it raises or returns something other than a
        dict of setting name (str) -> value; NotHonoured when a setting it reports contradicts the
        declared variant (:func:`contradictions`)."""
        report = getattr(self.code, "settings_used", None)
        if not callable(report):
            return {}
        try:
            used = report()
        except BaseException as exc:  # noqa: BLE001 - the user's code: a failure row
            if raised_by_the_lab(exc):
                raise
            raise EntryFailed(f"settings_used() raised {when}: {last_traceback_line(exc)}",
                              items_done=items_done) from None
        if used is None:
            return {}
        why = (f"returned {_shown(used)}" if not isinstance(used, dict) else
               next((f"returned the key {k!r} ({type(k).__name__})" for k in used if not isinstance(k, str)), ""))
        if why:
            raise EntryFailed(f"settings_used() {why} {when}; it must return a dict of setting name (str) -> "
                              'value, e.g. {"precision": "fp32"}', items_done=items_done)
        bad = contradictions(self.spec.variant.to_json(), used)
        if bad:
            from lab.passes.observed import NotHonoured

            raise NotHonoured("declared value not honoured: " + "; ".join(bad), items_done=items_done)
        return dict(used)

    # -- the operations --------------------------------------------------------------------------

    def _call(self, batch: Batch, accept) -> list:
        """The entry's method on the batch's strings; its return checked by ``accept`` (('', values)
        or what it is). Raises EntryFailed / EntryOutOfMemory (module docstring)."""
        method = self.needs.entry.method
        done = 0 if batch.warm_up else batch.items_before
        try:
            out = getattr(self.code, method)(list(batch.texts))
            why, values = accept(out, len(batch.idx))
        except BaseException as exc:  # noqa: BLE001 - the user's code: a failure row
            from lab.passes.failures import is_oom

            after = f"(after {batch.items_before}{' warm-up' * batch.warm_up} items): {last_traceback_line(exc)}"
            if is_oom(exc) and not isinstance(exc, PassFailure):  # an oom row, with the batch and the line
                raise EntryOutOfMemory(f"{method} ran out of memory on {batch.place} {after}", items_done=done) from exc
            if raised_by_the_lab(exc):
                raise
            raise EntryFailed(f"{method} raised on {batch.place} {after}", items_done=done) from None
        if why:
            raise EntryFailed(f"{method} returned {why} on {batch.place}; it must return {self.needs.entry.returns}",
                              items_done=done)
        return values

    def classify(self, batch: Batch) -> Answer:
        """``predict``: one label per text (no probability)."""
        labels = self._call(batch, predict_refusal)
        return Answer(values=[(label, None) for label in labels])

    def embed(self, batch: Batch) -> Answer:
        """``embed``: the rows as returned, each row's L2 norm."""
        import numpy as np

        def accept(out, n):
            return vectors_refusal(out, n, self.width)

        (arr,) = self._call(batch, accept)
        self.width = arr.shape[1]
        return Answer(values=arr, norms=[float(x) for x in np.linalg.norm(arr.astype(np.float64), axis=1)])

    def generate(self, batch: Batch) -> Answer:
        """``generate``: each output cut before its first stop string (the lab's rule); its tokens
        are counted after the window (the lab's bookkeeping stays out of the code's measured time)."""
        from lab.passes.tasks.generation_core import GeneratedItem, cut_at_stop

        texts = self._call(batch, predict_refusal)
        items = []
        for seq, text in zip(batch.input_ids, texts, strict=True):
            shown, cut = cut_at_stop(text, self.needs.rule.stop)
            items.append(GeneratedItem(text=shown, input_tokens=len(seq), output_tokens=0,
                                       stopped_by="stop" if cut else ENTRY_STOP))
        return Answer(values=items, returned=[str(t) for t in texts])

    # -- what it observed ----------------------------------------------------------------------

    def observed(self, threads: int, workers_on_host: int = 1) -> dict:
        """The observed record: what ``settings_used()`` reports, NOT_OBSERVABLE for the rest."""
        from lab.passes.observed import NOT_OBSERVABLE, observe_cpu, observe_tf32, observe_threads

        used = self.settings_used(0, "after the warm-up")
        v = self.spec.variant
        precision = used.get("precision")
        dtype = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(str(precision), precision)
        return {"engine": self.name, "dtype": NOT_OBSERVABLE if precision is None else dtype,
                "device": str(used.get("device", NOT_OBSERVABLE)),
                "attention": used.get("attention", NOT_OBSERVABLE) if v.attention else "unknown",
                **observe_threads(threads, workers_on_host),
                **observe_cpu(),
                "compile": used.get("compile", NOT_OBSERVABLE),
                "quantization": used.get("quantization", NOT_OBSERVABLE),
                **observe_tf32(), "reported_by_entry": ", ".join(sorted(used))}

    def observe_window(self, win) -> dict:
        """What the lab sees of the window: its batches and order; padding and tokens the code
        applies itself are NOT_OBSERVABLE unless ``settings_used()`` reports them."""
        from lab.passes.observed import NOT_OBSERVABLE

        order = ("sorted by token count" if win.order_sorted_by_length and not win.order_is_corpus
                 else "corpus order" if win.order_is_corpus and not win.order_sorted_by_length
                 else "corpus order (already sorted by token count)")
        used = self.settings_used(win.items_done, "after the measured window")
        return {"padding": used.get("padding", NOT_OBSERVABLE), "max_tokens": NOT_OBSERVABLE,
                "max_length_used": used.get("max_length", NOT_OBSERVABLE), "bucketing": order,
                "batch_size": win.largest_batch, "window_items": win.items_done}

    def generation_record(self) -> dict:
        """The engine's part of result.json's ``generation``: the code pads (or not) itself."""
        return {"padding": "the entry's own (the lab hands over prompt strings, unpadded)"}

    def result_fields(self, win) -> dict:
        """The code that ran: ``entry`` and ``entry_settings``."""
        return {"entry": self.entry, "entry_settings": self.settings()}

    def merged_fields(self, cards: list) -> dict:
        """The entry and its settings, as every card recorded them (the same spec built each)."""
        first = next((c for c in cards if c.entry), None)
        return {"entry": first.entry, "entry_settings": first.entry_settings} if first else {}
