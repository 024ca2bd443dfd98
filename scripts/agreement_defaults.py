"""Measure what the agreement rule's defaults rest on (lab.facts.constants.AGREEMENT_MAX_DIFFERING_LABELS and _VECTORS,
AGREEMENT_MIN_COSINE): how far honest variants of the demo checkpoint differ from batch 1 in fp32,
id by id, and how far a checkpoint padded on the left differs.

    python scripts/agreement_defaults.py [--items 250] [--model .cache/models/demo-minilm-20ng]

Runs the demo classifier on the first N items of the demo comparison corpus, batch 1 and batch 8,
fp32 and bf16, each batch padded on the right (as the lab pads an encoder), and the same batch 8
padded on the left; prints per variant the labels that differ from batch 1 fp32 and, for mean
pooled normalised embeddings (the lab's embedding kind), the lowest and median per-id cosine. CPU
only; about a minute on 2 cores for 250 items. Prints measurements, asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

REPO = Path(__file__).resolve().parents[1]


def run(model, tok, texts: list[str], batch: int, dtype: torch.dtype, side: str, max_length: int):
    """(labels (n,), normalised mean-pooled vectors (n, hidden)) for ``texts``."""
    tok.padding_side = side
    labels, vectors = [], []
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
        for k in range(0, len(texts), batch):
            enc = tok(texts[k:k + batch], padding="longest", truncation=True, max_length=max_length,
                      return_tensors="pt")
            out = model(**enc, output_hidden_states=True)
            labels += out.logits.float().argmax(-1).tolist()
            mask = enc["attention_mask"].unsqueeze(-1).float()
            mean = (out.hidden_states[-1].float() * mask).sum(1) / mask.sum(1)
            vectors.append(torch.nn.functional.normalize(mean, dim=-1).numpy())
    return np.array(labels), np.concatenate(vectors)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=250)
    ap.add_argument("--model", default=str(REPO / ".cache/models/demo-minilm-20ng"))
    ap.add_argument("--corpus", default=str(REPO / "demo/corpus/comparison.jsonl"))
    ap.add_argument("--max-length", type=int, default=128)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rows = [json.loads(line) for line in Path(args.corpus).read_text().splitlines() if line.strip()][:args.items]
    texts = [r["text"] for r in rows]
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForSequenceClassification.from_pretrained(args.model).eval()
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], check=False, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    print(f"# agreement against batch 1 fp32, right padding; {len(texts)} items of {args.corpus}; "
          f"model {args.model}; torch {torch.__version__}; commit {commit}")
    ref_labels, ref_vec = run(model, tok, texts, 1, torch.float32, "right", args.max_length)
    print(f"{'variant':<28} {'labels differing':>17} {'share':>7} {'lowest cosine':>14} {'median cosine':>14}")
    for name, batch, dtype, side in (("batch 8 fp32", 8, torch.float32, "right"),
                                     ("batch 8 bf16", 8, torch.bfloat16, "right"),
                                     ("batch 1 bf16", 1, torch.bfloat16, "right"),
                                     ("batch 8 fp32, left padding", 8, torch.float32, "left")):
        labels, vec = run(model, tok, texts, batch, dtype, side, args.max_length)
        cos = (vec * ref_vec).sum(1)
        differ = int((labels != ref_labels).sum())
        print(f"{name:<28} {differ:>11} of {len(texts):<3} {differ / len(texts):>7.4f} {cos.min():>14.6f} "
              f"{np.median(cos):>14.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
