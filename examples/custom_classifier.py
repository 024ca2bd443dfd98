"""A custom entry for IteraGPU Lab: your own inference code under the lab's protocol.

This one runs the demo classifier (a Hugging Face sequence classifier) itself, so its
predictions equal the built-in classification task's. Copy it and replace the model calls with
your own code; keep the three methods. In the campaign file:

    [task]
    kind = "custom"
    entry = "@repo/examples/custom_classifier.py:DemoClassifier"

The lab builds the class once per pass, then calls ``predict`` once per batch it forms (the
variant's batch size, bucketing by token count when declared), during the warm-up and the
measured window; it reads the corpus, keeps ids, times, counts memory and validates.
"""

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class DemoClassifier:
    def __init__(self, settings: dict, device: str):
        """``settings``: the variant's declared fields (precision, max_length, padding, ...) and
        ``model_path``; ``device``: where the lab wants the work done ("cpu", "cuda:0")."""
        self.max_length = settings["max_length"]
        self.padding = "max_length" if settings["padding"] == "max_length" else "longest"
        self.tokenizer = AutoTokenizer.from_pretrained(settings["model_path"])
        self.model = AutoModelForSequenceClassification.from_pretrained(
            settings["model_path"], dtype=DTYPES[settings["precision"]]).eval().to(device)
        self.device = device

    def predict(self, texts: list[str]) -> list[str]:
        """One label per text, in order."""
        enc = self.tokenizer(texts, truncation=True, max_length=self.max_length, padding=self.padding,
                             return_tensors="pt").to(self.device)
        with torch.inference_mode():
            logits = self.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
        return [self.model.config.id2label[i] for i in logits.argmax(dim=-1).tolist()]

    def settings_used(self) -> dict:
        """What this code actually applied; the lab records and checks these, and records the
        declared settings not reported here as "declared, not observable"."""
        weights = next(self.model.parameters())
        precision = {v: k for k, v in DTYPES.items()}[weights.dtype]
        return {"precision": precision, "device": str(weights.device), "max_length": self.max_length,
                "padding": self.padding}
