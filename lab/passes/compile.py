"""``compile = true`` variants: ``torch.compile`` as a declared factor.

Compilation is its own phase, outside the measured window (seed: compilation belongs to
set-up, "avvio"): the model is wrapped with ``nn.Module.compile`` (default inductor backend)
and the compile phase runs the job's own batch step once for every batch size the measured
window's batching will produce that can be known before it (``window_batch_sizes``): the
full batch and the final short batch (``n_items % batch_size``, known from the corpus size),
and the warm-up's batches (its items cut the same way). :func:`compile_batches` is that
phase, written once; each task kind gives its step (lab.passes.tasks.job.Job.compile):

- a forward over token ids (classification, embedding: :func:`compile_model`): with padding
  "max_length" every shape of the window is compiled. With padding "longest" (bucketing or
  not) the sequence length depends on each batch's longest item, so the compile inputs'
  sequence dimension (and their batch dimension, when it is 2 or more) are marked dynamic
  with ``torch._dynamo.maybe_mark_dynamic``: dynamo traces them symbolically, so any later
  length reuses the graph. ``maybe_`` rather than ``mark_dynamic``: should the model's code
  specialize a dimension, dynamo compiles a static graph instead of failing the pass.
- generation (lab.passes.tasks.generation): the model's forward that ``generate`` calls at
  every decoding step is compiled, and the step is one whole greedy generation of the batch
  (the prompt, then one token per step, the cache growing by one position each step). Those
  tensors are made inside ``generate``, where no dimension can be marked, so the module is
  compiled with ``dynamic=True`` (every size symbolic from the first trace).

Any compilation that still lands in the warm-up or the window is counted
(``DynamoCounters``: ``recompiles_warmup``, ``recompiles_measured``) and reported beside the
durations (lab.report), however many there are. A size-1 dimension is never symbolic: dynamo
specializes sizes 0 and 1, which is why a final batch of one item (and a decoding step's one
new token) gets its own compile. A compile failure propagates as an exception: the runner
turns it into a failure row with the reason.
"""

from __future__ import annotations

from typing import Callable

from lab.inputs.variants import Variant


def window_batch_sizes(n_items: int, batch_size: int) -> list[int]:
    """Batch sizes (items) the measured window will run over ``n_items`` corpus items:
    ``batch_size`` when there is at least one full batch, then ``n_items % batch_size`` when
    the last batch is short. [] for an empty corpus. Rule: lab.passes.tasks.classification.run_batches
    cuts the corpus in consecutive batches of the declared size."""
    sizes = [batch_size] if n_items >= batch_size else []
    if n_items % batch_size:
        sizes.append(n_items % batch_size)
    return sizes


def compile_batches(model, rows: list[dict], device: str, variant: Variant, n_items: int,
                    step: Callable[[list[str]], list], dynamic: bool | None = None) -> list[list]:
    """The compile phase (see the module): compile ``model`` in place
    (``nn.Module.compile``; ``dynamic``: torch.compile's, None for its default policy), then
    run ``step(texts)`` once per batch size a ``n_items`` window and the warm-up over ``rows``
    will run, device synchronized at the end.

    ``rows``: the warm-up items (at least one; repeated to fill a batch); ``step`` runs one
    batch of those texts as the window will and returns the shape it ran, [items, tokens]
    (tokens "dynamic" when symbolic). Returns the shapes in order. Raises ValueError with no
    rows, and whatever dynamo/inductor or the step raise.
    """
    from lab.passes.inference import synchronize

    if not rows:
        raise ValueError("compile = true needs warm-up items to compile on; set [timing] warmup_items >= 1")
    model.compile(**({} if dynamic is None else {"dynamic": dynamic}))
    sizes = window_batch_sizes(n_items, variant.batch_size) + window_batch_sizes(len(rows), variant.batch_size)
    shapes = [step([rows[i % len(rows)]["text"] for i in range(size)]) for size in dict.fromkeys(sizes)]
    synchronize(device)
    return shapes


def compile_model(model, rows: list[dict], tokenizer, device: str, variant: Variant,
                  n_items: int) -> list[list]:
    """The compile phase of a job whose window calls ``model(input_ids=, attention_mask=)``
    on batches tokenized and padded by lab.passes.inference (classification, embedding): that
    forward over every batch shape of a ``n_items`` window and of the warm-up over ``rows``
    (:func:`compile_batches`; padding "longest": the token and batch dimensions marked
    dynamic). Returns [[items, tokens], ...], tokens "dynamic" where the sequence dimension
    was marked. Raises as :func:`compile_batches`.
    """
    import torch

    from lab.passes.inference import pad_batch, tokenize

    dynamic_length = variant.padding != "max_length"

    def forward(texts: list[str]) -> list:
        ids, _ = tokenize(texts, tokenizer, variant.max_length)
        # tensors made under inference_mode, as run_batches makes them: dynamo guards on the
        # dispatch keys, so a normal tensor here would compile a graph the window never reuses
        with torch.inference_mode():
            feats = pad_batch(tokenizer, ids, variant)
            ids_t = feats["input_ids"].to(device)
            mask_t = feats["attention_mask"].to(device)
            if dynamic_length:
                for t in (ids_t, mask_t):
                    torch._dynamo.maybe_mark_dynamic(t, 1)
                    if len(texts) > 1:
                        torch._dynamo.maybe_mark_dynamic(t, 0)
            model(input_ids=ids_t, attention_mask=mask_t)
        return [len(texts), "dynamic" if dynamic_length else int(ids_t.shape[1])]

    return compile_batches(model, rows, device, variant, n_items, forward)


NO_LAB_COMPILE = ("no lab compile phase: the lab compiles nothing of a custom entry's code; the declared compile "
                  "reached the entry in its settings, so any compile time falls where the entry compiles "
                  "(model_load, warmup or the window); counted there: frames torch._dynamo compiled in the pass "
                  "process, whoever called torch.compile (compile_frames: while the entry was built; "
                  "recompiles_warmup; recompiles_measured), not compilation in another process or by another "
                  "compiler; observed_compile is what the entry reports, else declared, not observable")
"""result.json's ``compile_phase`` for a pass whose job has no ``compile`` step and runs in the
pass process (lab.passes.tasks.job: a custom entry), compile declared or not; shown in the raw
table's notes (lab.report.raw_table)."""


class DynamoCounters:
    """Frames dynamo compiled and graph breaks between ``start()`` and ``read()``, in this
    process (``torch._dynamo.utils.counters``: ``frames["total"]``, every frame it compiled,
    recompilations included; the sum of ``graph_break``).

    The counters are process-wide: they count every ``torch.compile``'d frame, whoever compiled
    it (the lab's compile step, or a custom entry's own code). While ``torch._dynamo`` is not
    imported both counts are 0, observed, not assumed: ``torch.compile`` imports it before it
    compiles a frame, so a process without it compiled none, and reading the counters never
    imports it (no import cost, nothing changed in the user's process). Not counted: code
    compiled in another process, or by another compiler (TorchScript, TensorRT, ...)."""

    def __init__(self) -> None:
        self._start = (0, 0)

    @staticmethod
    def _now() -> tuple[int, int]:
        import sys

        if "torch._dynamo" not in sys.modules:
            return 0, 0
        from torch._dynamo.utils import counters

        return (sum(counters["frames"].get(k, 0) for k in ("total",)),
                sum(counters["graph_break"].values()))

    def start(self) -> None:
        self._start = self._now()

    def read(self) -> tuple[int, int]:
        """(frames compiled since start, graph breaks since start)."""
        frames, breaks = self._now()
        return frames - self._start[0], breaks - self._start[1]


# ---- can torch.compile build kernels where the passes run? -------------------------------
COMPILER_PROBE = """
import os, shutil, sys
if sys.argv[1] == "cpu":
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler
        print("found " + get_cpp_compiler())
    except Exception as exc:
        print("missing " + type(exc).__name__ + ": " + " ".join(str(exc).split())[:200])
else:
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")
    print("found " + cc if cc else "missing no C compiler (CC, gcc or clang) for Triton's kernel launcher")
"""
"""Run as ``python -c COMPILER_PROBE cpu|gpu`` in the pass environment (the local Python or the
pass image), it prints one line: ``found <compiler>`` or ``missing <why>``. Rule:
torch.compile's default backend (inductor) builds C++ kernels with the compiler torch's own
search finds (``torch._inductor.cpp_builder.get_cpp_compiler``: ``CXX`` or g++) for a CPU
device, and Triton kernels for a GPU, whose launcher Triton builds with ``CC``, gcc or clang.
No lab import, so an image built from an older lab answers too."""


def compile_kinds(variants, gpu_host: bool) -> dict[str, str]:
    """{"cpu" | "gpu": name of the first ``compile = true`` variant that needs that backend}.
    ``gpu_host``: whether passes of device "auto" find a GPU (they run on it then)."""
    out: dict[str, str] = {}
    for v in variants:
        if v.compile:
            kind = "cpu" if v.device == "cpu" or (v.device in ("auto", "") and not gpu_host) else "gpu"
            out.setdefault(kind, v.name or v.variant_id)
    return out


def parse_compiler_probe(output: str) -> str:
    """'' when the probe's last line says ``found``; otherwise why not (one line)."""
    lines = [x.strip() for x in output.splitlines() if x.strip()]
    last = lines[-1] if lines else ""
    if last.startswith("found "):
        return ""
    return last.removeprefix("missing ") or "the compiler probe printed nothing"
