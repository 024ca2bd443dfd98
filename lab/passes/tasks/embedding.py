"""Embedding: one vector per item (``[task] kind = "embedding"``).

The encoder is loaded with transformers' ``AutoModel`` (a sequence-classification checkpoint
gives its encoder; its head is not used). Pooling rule, declared in ``[task]`` and recorded in
result.json: ``pooling = "mean"``, the mean of the last hidden state over the tokens whose
attention mask is 1 (padding never enters a vector), computed in fp32; ``normalize = true``
divides each vector by its L2 norm. The lab's own loop forms the batches
(lab.passes.inference.batch_order and pad_batch: corpus order, or ascending token count with
bucketing); sentence-transformers' ``encode``, which sorts by length on its own, is never used.

On disk (the pass folder): ``predictions.jsonl``, one line per completed item in corpus order,
``{"id", "row", "norm", "truncated", "tokens_kept", "tokens_total"}`` where ``row`` is the
item's row in ``vectors.npy``, a float16 numpy array of shape (lines, hidden) (numpy's own
``.npy`` format, readable with ``numpy.load(allow_pickle=False)``); its sha256 is in
result.json (``vectors_sha256``) and the predictions file's lines (``row``) point into it.
``norm``: the vector's L2 norm before normalisation; null when the engine returns its vectors
already normalised (a vLLM pass, lab.passes.backends.vllm_backend).

A card of a multi-card pass writes the same beside its own predictions: ``cards/card<r>.vectors.npy``
(its shard, rows as its lines say; :func:`vectors_name`). The merge
(:meth:`EmbeddingJob.merge_cards`) copies each merged line's row out of its card's shard into the
pass's one ``vectors.npy`` in corpus order (float16 to float16: the values are the cards', bit for
bit) and renumbers ``row``; ``archive verify`` checks the merge against the shards
(lab.evidence.card_vectors).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from lab.facts.diskfull import atomic_write_text
from lab.facts.errors import FailureKind, PassFailure
from lab.facts.files import sha256_bytes, sha256_lines
from lab.passes.tasks.job import CardsNotMerged, KindJob

VECTORS_FILE = "vectors.npy"
VECTORS_DTYPE = "float16"  # 2 bytes per value: 1000 items x 384 values = 768 KB per pass
ENTRY_POOLING = "the entry's own (the declared pooling and normalize are in its settings)"
"""``pooling.rule`` of an embedding pass whose vectors the user's code made."""
NORM_TOLERANCE = 0.01
"""With ``normalize = true`` every vector the user's code returns must have an L2 norm within 1 +/- this
(float16 arithmetic in the user's code leaves about 1e-3; a forgotten normalisation leaves norms
of several units: the reported case read 6.2 to 7.1)."""


class NonFiniteVectors(PassFailure, RuntimeError):
    """A batch produced NaN or inf hidden states; carries the items completed before it."""

    kind = FailureKind.NON_FINITE

    def __init__(self, ids: list[str], items_done: int):
        super().__init__(f"non-finite embedding for {len(ids)} item(s), first {ids[0]!r}", items_done=items_done)
        self.ids = ids


def vectors_name(pred_path: Path) -> str:
    """The vectors file's name beside the predictions file ``pred_path``: ``vectors.npy`` beside a
    pass's ``predictions.jsonl``, ``card<r>.vectors.npy`` beside a card's ``card<r>.predictions.jsonl``."""
    return pred_path.name.removesuffix("predictions.jsonl") + VECTORS_FILE


def write_vectors(pred_path: Path, lines: list[str], vectors) -> dict:
    """Write ``vectors`` ((lines, width), stored as float16) beside ``pred_path`` (:func:`vectors_name`),
    then ``lines`` to ``pred_path``, each whole or absent; returns the result fields (lines, both
    sha256, the vectors' name, shape and dtype)."""
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, np.asarray(vectors).astype(VECTORS_DTYPE), allow_pickle=False)
    data = buf.getvalue()
    name = vectors_name(pred_path)
    tmp = pred_path.parent / (name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(pred_path.parent / name)
    atomic_write_text(pred_path, "".join(lines))
    return {"predictions_lines": len(lines), "predictions_sha256": sha256_lines(lines),
            "vectors_path": name, "vectors_sha256": sha256_bytes(data),
            "vectors_shape": [len(lines), int(np.asarray(vectors).shape[1])], "vectors_dtype": VECTORS_DTYPE}


def load_encoder(model_ref: str, precision: str, device: str, pad_token: str | None = None,
                 attention: str | None = None, revision: str | None = None):
    """(tokenizer, encoder) in eval mode at ``precision`` on ``device`` (transformers AutoModel;
    lab.passes.inference.load_tokenizer, load_checkpoint). Raises
    lab.passes.inference.WeightsNotLoaded when the checkpoint lacks encoder weights."""
    from transformers import AutoModel

    from lab.passes.inference import load_checkpoint, load_tokenizer

    return (load_tokenizer(model_ref, revision, pad_token),
            load_checkpoint(AutoModel, model_ref, precision, device, attention, revision))


def mean_pool(hidden, mask, normalize: bool):
    """Mean of ``hidden`` [items, tokens, width] over the tokens where ``mask`` [items, tokens]
    is 1, in fp32; L2-normalised when ``normalize``. Returns [items, width] float32."""
    import torch

    m = mask.unsqueeze(-1).to(torch.float32)
    summed = (hidden.float() * m).sum(dim=1)
    vec = summed / m.sum(dim=1).clamp(min=1.0)
    return torch.nn.functional.normalize(vec, p=2.0, dim=1) if normalize else vec


class EmbeddingJob(KindJob):
    """``[task] kind = "embedding"``: one vector per item from the engine's ``embed`` (module
    docstring); with ``entry``, the user's ``embed`` (its vectors as returned: ENTRY_POOLING)."""

    kind = "embedding"
    loader = load_encoder

    def __init__(self, spec):
        task = spec.extra.get("task") or {}
        self.pooling = task.get("pooling", "mean")
        self.normalize = bool(task.get("normalize", True))
        super().__init__(spec)
        if not self.engine.applies_task_rules:
            self.pooling = ENTRY_POOLING

    def kind_needs(self) -> dict:
        return {"pooling": self.pooling, "normalize": self.normalize}

    def open(self, rows):
        win, order, input_ids, texts = super().open(rows)
        win.norms = [None] * len(rows)  # vectors: allocated at the first answer, at its width
        return win, order, input_ids, texts

    def nonfinite(self, ids: list[str], items_done: int) -> Exception:
        return NonFiniteVectors(ids, items_done)

    def store(self, win, idx: list[int], answer) -> None:
        """The answer's vectors into rows ``idx`` of ``win.vectors`` (float32, zero for items not
        done), their norms (None: the engine returned them normalised)."""
        import numpy as np

        arr = answer.values
        if win.vectors is None:
            win.vectors = np.zeros((len(win.ids), arr.shape[1]), np.float32)
        win.vectors[idx] = arr
        for j, i in enumerate(idx):
            win.pred_index[i] = i
            win.norms[i] = None if answer.norms is None else answer.norms[j]

    def observe_window(self, win) -> dict:
        """The engine's record; for the user's code, raises NotHonoured when ``normalize = true``
        is declared and a vector it returned is not of unit norm (within NORM_TOLERANCE): a task
        setting the code did not apply, as a variant's would be."""
        from lab.passes.observed import NotHonoured

        rec = super().observe_window(win)
        norms = [n for n in win.norms if n is not None]
        off = [n for n in norms if abs(n - 1.0) > NORM_TOLERANCE]
        if not self.engine.applies_task_rules and self.normalize and off:
            raise NotHonoured(f"declared value not honoured: normalize = true, but {len(off)} of {len(norms)} "
                              f"vectors the entry returned have an L2 norm outside 1 +/- {NORM_TOLERANCE:g} "
                              f"({min(off):.4g} to {max(off):.4g}); normalize them in embed(), or declare "
                              "normalize = false")
        return rec

    def self_metric(self, win) -> float | None:
        return None  # the label-based retrieval metric needs every vector: lab.orchestration.validate computes it

    def write_predictions(self, path: Path, win) -> dict:
        """predictions.jsonl and vectors.npy (float16) of the completed items; returns the
        result fields (lines, both sha256, the pooling rule, the vectors' shape and dtype, and
        the engine's own)."""
        import numpy as np

        if win.vectors is None:  # no batch done: no width known; nothing to store
            win.vectors = np.zeros((len(win.ids), 0), np.float32)
        done = [i for i, p in enumerate(win.pred_index) if p is not None]
        lines = []
        for row, i in enumerate(done):
            kept, total = win.tokens_kept[i], win.tokens_total[i]
            norm = None if win.norms[i] is None else round(win.norms[i], 6)
            lines.append(json.dumps({"id": win.ids[i], "row": row, "norm": norm,
                                     "truncated": None if total is None else total > kept,
                                     "tokens_kept": kept, "tokens_total": total}, ensure_ascii=False) + "\n")
        return {**write_vectors(path, lines, win.vectors[done]), "pooling": self.pooling_record(),
                **self.engine.result_fields(win)}

    def pooling_record(self) -> dict:
        """result.json's ``pooling``: the declared rule as the lab applied it, or as the user's code
        was asked to (its vectors stored as returned)."""
        if not self.engine.applies_task_rules:
            return {"rule": ENTRY_POOLING, "normalize": f"the entry's own (declared {json.dumps(self.normalize)})",
                    "dtype": "as returned, float16 in storage"}
        return {"rule": self.pooling, "mask": "attention_mask", "normalize": self.normalize,
                "dtype": "float32 before storage"}

    def merge_cards(self, cards_dir: Path, pred_path: Path, merged: list[tuple[int, str]], cards: list,
                    labels: list) -> tuple[list[str], dict]:
        """The pass's lines and ``vectors.npy`` from its cards' (module docstring): merged line k
        gets ``row`` k and the vector its card's shard holds for it. ``self_accuracy`` as a one-card
        pass has it (:meth:`self_metric`: None; validation computes the retrieval metric from the
        merged vectors). Raises CardsNotMerged when a card with lines has no readable shard."""
        import numpy as np

        from lab.passes.tasks.embedding_metrics import load_vectors

        shards = {}
        for c in cards:
            if not c.vectors_path:
                continue
            try:
                shards[c.rank] = load_vectors((cards_dir / c.vectors_path).read_bytes())
            except (OSError, ValueError) as exc:
                raise CardsNotMerged(f"card {c.rank}: its vectors {c.vectors_path} cannot be read ({exc})") from None
        lines: list[str] = []
        rows: list = []
        for rank, line in merged:
            rec = json.loads(line)
            shard = shards.get(rank)
            if shard is None or not isinstance(rec.get("row"), int) or not 0 <= rec["row"] < len(shard):
                raise CardsNotMerged(f"card {rank}: item {rec.get('id')!r} has no row in its card's vectors")
            rows.append(shard[rec["row"]])
            lines.append(json.dumps({**rec, "row": len(lines)}, ensure_ascii=False) + "\n")
        if not shards:
            return lines, {"self_accuracy": None, **self.engine.merged_fields(cards)}
        width = next(iter(shards.values())).shape[1]
        vectors = np.stack(rows) if rows else np.zeros((0, width), np.float16)
        pooling = next((c.pooling for c in cards if c.pooling), None)
        written = write_vectors(pred_path, lines, vectors)  # the predictions' own fields are the merge's
        return lines, {**{k: v for k, v in written.items() if not k.startswith("predictions_")},
                       "pooling": pooling, "self_accuracy": self.self_metric(None), **self.engine.merged_fields(cards)}
