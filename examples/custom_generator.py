"""Your own generation code under IteraGPU Lab's protocol (``[task] kind = "generation"`` with ``entry``).

This one runs the demo generator itself with transformers' greedy ``generate``, so its outputs
agree with the built-in generation task's. Copy it and replace the model calls with your own
code (another library, a server client); keep the methods. In the campaign file:

    [task]
    kind = "generation"
    prompt = "{text}\\nNewsgroup:"
    max_new_tokens = 16
    stop = ["\\n"]
    entry = "@repo/examples/custom_generator.py:DemoGenerator"

The lab forms each prompt by the declared rule (the text cut to max_text_tokens, put in the
template) and calls ``generate`` once per batch it forms; it cuts each output before the first
stop string and judges the outputs exactly as the built-in task's: exact match and token F1
against the reference answers, the agreement rule per id, ``archive verify`` and compare.
"""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class DemoGenerator:
    def __init__(self, settings: dict, device: str):
        """``settings``: the variant's declared fields (precision, batch_size, ...), the [task]
        rule (prompt, max_new_tokens, stop, decoding, ...), ``model_path`` and ``pad_token`` when
        declared; ``device``: where the lab wants the work done."""
        self.tokenizer = AutoTokenizer.from_pretrained(settings["model_path"])
        if settings.get("pad_token"):
            self.tokenizer.pad_token = settings["pad_token"]
        self.tokenizer.padding_side = "left"  # a causal model continues the prompt's last token
        self.model = AutoModelForCausalLM.from_pretrained(settings["model_path"],
                                                          dtype=DTYPES[settings["precision"]]).eval().to(device)
        eos = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else self.tokenizer.sep_token_id
        # greedy, the declared limit, and nothing from the checkpoint's generation_config.json
        self.config = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=settings["max_new_tokens"],
                                       pad_token_id=self.tokenizer.pad_token_id, eos_token_id=eos)
        self.device = device

    def generate(self, prompts: list[str]) -> list[str]:
        """One output per prompt, in order: the text generated after it."""
        enc = self.tokenizer(prompts, padding=True, return_tensors="pt").to(self.device)
        with torch.inference_mode():
            out = self.model.generate(**enc, generation_config=self.config)
        new = out[:, enc["input_ids"].shape[1]:]
        return self.tokenizer.batch_decode(new, skip_special_tokens=True)

    def settings_used(self) -> dict:
        """What this code actually applied (the lab records it beside the declared settings)."""
        weights = next(self.model.parameters())
        precision = {v: k for k, v in DTYPES.items()}[weights.dtype]
        return {"precision": precision, "device": str(weights.device), "padding": "longest"}
