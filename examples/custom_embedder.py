"""Your own embedding code under IteraGPU Lab's protocol (``[task] kind = "embedding"`` with ``entry``).

This one runs the demo encoder (MiniLM) itself with mean pooling over the attention mask, the
rule the built-in embedding task applies, so its vectors agree with the built-in task's. Copy it
and replace the model calls with your own code; keep the methods. In the campaign file:

    [task]
    kind = "embedding"
    entry = "@repo/examples/custom_embedder.py:DemoEmbedder"

The lab builds the class once per pass, then calls ``embed`` once per batch it forms (the
variant's batch size, bucketing by token count when declared), during the warm-up and the
measured window. It stores the rows you return as the pass's vectors and judges them exactly as
the built-in task's: the agreement rule (cosine per id against the reference variant), the
retrieval metric, ``archive verify`` and compare.
"""

import torch
from transformers import AutoModel, AutoTokenizer

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class DemoEmbedder:
    def __init__(self, settings: dict, device: str):
        """``settings``: the variant's declared fields (precision, max_length, padding, ...), the
        [task] keys (pooling, normalize) and ``model_path``; ``device``: where the lab wants the
        work done ("cpu", "cuda:0")."""
        self.max_length = settings["max_length"]
        self.padding = "max_length" if settings["padding"] == "max_length" else "longest"
        self.normalize = settings.get("normalize", True)
        self.tokenizer = AutoTokenizer.from_pretrained(settings["model_path"])
        self.model = AutoModel.from_pretrained(settings["model_path"],
                                               dtype=DTYPES[settings["precision"]]).eval().to(device)
        self.device = device

    def embed(self, texts: list[str]):
        """One vector per text, in order: a (texts, width) tensor."""
        enc = self.tokenizer(texts, truncation=True, max_length=self.max_length, padding=self.padding,
                             return_tensors="pt").to(self.device)
        with torch.inference_mode():
            hidden = self.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).float()
        vectors = (hidden.float() * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
        return torch.nn.functional.normalize(vectors, dim=1) if self.normalize else vectors

    def settings_used(self) -> dict:
        """What this code actually applied; the lab records and checks these, and records the
        declared settings not reported here as "declared, not observable"."""
        weights = next(self.model.parameters())
        precision = {v: k for k, v in DTYPES.items()}[weights.dtype]
        return {"precision": precision, "device": str(weights.device), "max_length": self.max_length,
                "padding": self.padding}
