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
already normalised (a vLLM pass, lab.passes.tasks.vllm_job).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from lab.facts.diskfull import atomic_write_text
from lab.facts.errors import FailureKind, PassFailure
from lab.facts.files import sha256_bytes, sha256_lines
from lab.passes.tasks.base import ModelSteps

VECTORS_FILE = "vectors.npy"
VECTORS_DTYPE = "float16"  # 2 bytes per value: 1000 items x 384 values = 768 KB per pass


class NonFiniteVectors(PassFailure, RuntimeError):
    """A batch produced NaN or inf hidden states; carries the items completed before it."""

    kind = FailureKind.NON_FINITE

    def __init__(self, ids: list[str], items_done: int):
        super().__init__(f"non-finite embedding for {len(ids)} item(s), first {ids[0]!r}", items_done=items_done)
        self.ids = ids


def load_encoder(model_ref: str, precision: str, device: str, pad_token: str | None = None,
                 attention: str | None = None, revision: str | None = None):
    """(tokenizer, encoder) in eval mode at ``precision`` on ``device`` (transformers AutoModel).

    Raises lab.passes.inference.WeightsNotLoaded when the checkpoint lacks encoder weights."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from lab.passes.inference import DTYPES, check_weights_loaded

    tok = AutoTokenizer.from_pretrained(model_ref, revision=revision)
    if pad_token:
        tok.pad_token = pad_token
    extra = {"attn_implementation": attention} if attention else {}
    model, info = AutoModel.from_pretrained(model_ref, revision=revision, dtype=getattr(torch, DTYPES[precision]),
                                            output_loading_info=True, **extra)
    check_weights_loaded(info)
    model.eval().to(device)
    return tok, model


def mean_pool(hidden, mask, normalize: bool):
    """Mean of ``hidden`` [items, tokens, width] over the tokens where ``mask`` [items, tokens]
    is 1, in fp32; L2-normalised when ``normalize``. Returns [items, width] float32."""
    import torch

    m = mask.unsqueeze(-1).to(torch.float32)
    summed = (hidden.float() * m).sum(dim=1)
    vec = summed / m.sum(dim=1).clamp(min=1.0)
    return torch.nn.functional.normalize(vec, p=2.0, dim=1) if normalize else vec


class EmbeddingJob(ModelSteps):
    """``[task] kind = "embedding"``: vectors pooled by the declared rule."""

    kind = "embedding"
    loader = load_encoder

    def __init__(self, spec):
        self.spec = spec
        task = spec.extra.get("task") or {}
        self.pooling = task.get("pooling", "mean")
        self.normalize = bool(task.get("normalize", True))
        self.tokenizer: Any = None
        self.model: Any = None

    def run_window(self, rows, device, on_batch=None, sink=None):
        """Tokenize, batch (the lab's rule), encode, pool and bring the vectors to the host.

        Returns a WindowResult whose ``vectors`` is a float32 numpy array (items, width) in
        corpus order (rows of items not completed are zero) and whose ``pred_index[i]`` is i
        once item i is done. Raises NonFiniteVectors; lets OOM errors propagate."""
        import numpy as np
        import torch

        from lab.passes.inference import open_window, pad_batch

        v = self.spec.variant
        n = len(rows)
        win, input_ids, order = open_window(rows, self.tokenizer, v)
        lengths = win.tokens_kept
        width = int(self.model.config.hidden_size)
        win.vectors = np.zeros((n, width), np.float32)
        win.norms = [None] * n
        if sink is not None:
            sink["win"] = win
        with torch.inference_mode():
            for start in range(0, n, v.batch_size):
                idx = order[start:start + v.batch_size]
                feats = pad_batch(self.tokenizer, [input_ids[i] for i in idx], v)
                ids_t = feats["input_ids"].to(device, non_blocking=True)
                mask_t = feats["attention_mask"].to(device, non_blocking=True)
                hidden = self.model(input_ids=ids_t, attention_mask=mask_t).last_hidden_state
                raw = mean_pool(hidden, mask_t, normalize=False)
                vec = torch.nn.functional.normalize(raw, p=2.0, dim=1) if self.normalize else raw
                host = vec.cpu().numpy()
                norms = raw.norm(dim=1).cpu().tolist()
                bad = [rows[idx[j]]["id"] for j in range(len(idx)) if not np.isfinite(host[j]).all()]
                if bad:
                    raise NonFiniteVectors(bad, win.items_done)
                win.vectors[idx] = host
                for j, i in enumerate(idx):
                    win.pred_index[i] = i
                    win.norms[i] = norms[j]
                win.count_batch(idx, lengths, (int(ids_t.shape[0]), int(ids_t.shape[1])), v.max_length)
                if on_batch:
                    on_batch(win.items_done)
        return win

    def self_metric(self, win) -> float | None:
        return None  # the label-based retrieval metric needs every vector: lab.orchestration.validate computes it

    def write_predictions(self, path: Path, win) -> dict:
        """predictions.jsonl and vectors.npy (float16) of the completed items; returns the
        result fields (lines, both sha256, the pooling rule, the vectors' shape and dtype)."""
        import numpy as np

        done = [i for i, p in enumerate(win.pred_index) if p is not None]
        lines = []
        for row, i in enumerate(done):
            kept, total = win.tokens_kept[i], win.tokens_total[i]
            norm = None if win.norms[i] is None else round(win.norms[i], 6)
            lines.append(json.dumps({"id": win.ids[i], "row": row, "norm": norm,
                                     "truncated": None if total is None else total > kept,
                                     "tokens_kept": kept, "tokens_total": total}, ensure_ascii=False) + "\n")
        buf = io.BytesIO()
        np.save(buf, win.vectors[done].astype(VECTORS_DTYPE), allow_pickle=False)
        data = buf.getvalue()
        vec_path = path.parent / VECTORS_FILE
        tmp = vec_path.with_suffix(".npy.tmp")
        tmp.write_bytes(data)
        tmp.replace(vec_path)
        atomic_write_text(path, "".join(lines))
        return {"predictions_lines": len(lines), "predictions_sha256": sha256_lines(lines),
                "vectors_path": VECTORS_FILE, "vectors_sha256": sha256_bytes(data),
                "vectors_shape": [len(done), int(win.vectors.shape[1])], "vectors_dtype": VECTORS_DTYPE,
                "pooling": {"rule": self.pooling, "mask": "attention_mask", "normalize": self.normalize,
                            "dtype": "float32 before storage"}}
