"""``compile = true`` variants: ``torch.compile`` as a declared factor.

Compilation is its own phase, outside the measured window (seed: compilation belongs to
set-up, "avvio"): the model is wrapped with ``nn.Module.compile`` (default inductor backend,
default dynamic-shape policy) and one forward pass on the first warm-up batch triggers the
compile; its seconds are recorded as the ``compile`` phase. Shapes not seen yet (padding
"longest", bucketing, the last short batch) can make torch's dynamo compile again inside
the measured window: ``DynamoCounters`` reads torch._dynamo's counters before and after the
window and reports the frames compiled and graph breaks in between. A compile failure
propagates as an exception: the runner turns it into a failure row with the reason.
"""

from __future__ import annotations

from lab.variants import Variant


def compile_model(model, rows: list[dict], tokenizer, device: str, variant: Variant) -> None:
    """Compile ``model`` in place and run one batch of ``rows`` (at least one item) through it.

    Raises ValueError with no rows, and whatever dynamo/inductor raise on failure.
    """
    from lab.passes.inference import run_batches, synchronize

    if not rows:
        raise ValueError("compile = true needs warm-up items to compile on; set [timing] warmup_items >= 1")
    model.compile()
    run_batches(rows[: variant.batch_size], tokenizer, model, device, variant)
    synchronize(device)


class DynamoCounters:
    """Frames compiled and graph breaks between ``start()`` and ``read()`` (torch._dynamo)."""

    def __init__(self) -> None:
        self._start = (0, 0)

    @staticmethod
    def _now() -> tuple[int, int]:
        from torch._dynamo.utils import counters

        return (sum(counters["frames"].get(k, 0) for k in ("total",)),
                sum(counters["graph_break"].values()))

    def start(self) -> None:
        self._start = self._now()

    def read(self) -> dict:
        """{"recompiles_measured": frames compiled since start, "graph_breaks_measured": ...}."""
        frames, breaks = self._now()
        return {"recompiles_measured": frames - self._start[0],
                "graph_breaks_measured": breaks - self._start[1]}
