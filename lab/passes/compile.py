"""``compile = true`` variants: ``torch.compile`` as a declared factor.

Compilation is its own phase, outside the measured window (seed: compilation belongs to
set-up, "avvio"): the model is wrapped with ``nn.Module.compile`` (default inductor backend,
default dynamic-shape policy) and the compile phase runs one forward pass for every batch
shape the measured window's batching will produce that can be known before it
(``window_batch_sizes``): the full batch and the final short batch (``n_items % batch_size``,
known from the corpus size), and the warm-up's batches (its items cut the same way).
With padding "max_length" that is every shape of the window.
With padding "longest" (bucketing or not) the sequence length depends on each batch's
longest item, so the compile inputs' sequence dimension (and their batch dimension, when
it is 2 or more) are marked dynamic with ``torch._dynamo.maybe_mark_dynamic``: dynamo
traces them symbolically, so any later length reuses the graph. ``maybe_`` rather than
``mark_dynamic``: should the model's code specialize a dimension, dynamo compiles a static
graph instead of failing the pass, and any compilation that still lands in the warm-up or
the window is counted (``DynamoCounters``: ``recompiles_warmup``, ``recompiles_measured``)
and reported beside the durations (lab.report). A size-1 dimension is never marked:
dynamo specializes sizes 0 and 1, which is why a final batch of one item gets its own
compile. A compile failure propagates as an exception: the runner turns it into a failure
row with the reason.
"""

from __future__ import annotations

from lab.inputs.variants import Variant


def window_batch_sizes(n_items: int, batch_size: int) -> list[int]:
    """Batch sizes (items) the measured window will run over ``n_items`` corpus items:
    ``batch_size`` when there is at least one full batch, then ``n_items % batch_size`` when
    the last batch is short. [] for an empty corpus. Rule: lab.passes.inference.run_batches
    cuts the corpus in consecutive batches of the declared size."""
    sizes = [batch_size] if n_items >= batch_size else []
    if n_items % batch_size:
        sizes.append(n_items % batch_size)
    return sizes


def compile_model(model, rows: list[dict], tokenizer, device: str, variant: Variant,
                  n_items: int) -> list[list]:
    """Compile ``model`` in place on every batch shape of a ``n_items`` window and of the
    warm-up over ``rows`` (see the module), so that neither phase compiles what can be known now.

    ``rows``: the warm-up items (at least one; repeated to fill a batch). Returns the shapes
    compiled, [[items, tokens], ...] with tokens "dynamic" where the sequence dimension was
    marked dynamic. Raises ValueError with no rows, and whatever dynamo/inductor raise.
    """
    import torch

    from lab.passes.inference import pad_batch, synchronize, tokenize

    if not rows:
        raise ValueError("compile = true needs warm-up items to compile on; set [timing] warmup_items >= 1")
    dynamic_length = variant.padding != "max_length"
    model.compile()
    shapes: list[list] = []
    sizes = window_batch_sizes(n_items, variant.batch_size) + window_batch_sizes(len(rows), variant.batch_size)
    for size in dict.fromkeys(sizes):
        texts = [rows[i % len(rows)]["text"] for i in range(size)]
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
                    if size > 1:
                        torch._dynamo.maybe_mark_dynamic(t, 0)
            model(input_ids=ids_t, attention_mask=mask_t)
        shapes.append([size, "dynamic" if dynamic_length else int(ids_t.shape[1])])
    synchronize(device)
    return shapes


class DynamoCounters:
    """Frames dynamo compiled and graph breaks between ``start()`` and ``read()`` (torch._dynamo)."""

    def __init__(self) -> None:
        self._start = (0, 0)

    @staticmethod
    def _now() -> tuple[int, int]:
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
