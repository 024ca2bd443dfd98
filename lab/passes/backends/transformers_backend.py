"""The transformers engine: the checkpoint loaded in the pass's own process and run by the lab's
loop (lab.passes.backends.Engine).

Load: the kind's checkpoint reader (``Needs.loader``: a sequence classifier, an encoder, a causal
LM) at the declared precision, attention and revision. Each operation runs one batch under
``torch.inference_mode``, padded by the lab (lab.passes.inference.pad_batch, on the encoders'
side; generation left-padded by generation_core.pad_left), and brings the answer to the host:

- classify: the softmax in fp32, the top class and its probability per item (computed on the
  device; only those cross to the host), the items whose logits are not finite named;
- embed: the declared pooling (lab.passes.tasks.embedding.mean_pool, fp32, over the attention
  mask), L2-normalised when declared; each vector's norm before normalisation;
- generate: greedy decoding under the declared rule (generation_core.generate_tokens), cut by the
  lab's one stop rule. The decoding settings ``generate`` resolves and the checkpoint's
  generation_config.json fields the lab's own configuration sets aside are read at load and
  recorded (``generation.settings``, ``checkpoint_settings_not_applied``).

The compile phase (``compile = true``) is this engine's only: lab.passes.compile.
"""

from __future__ import annotations

from typing import Any

from lab.passes.backends import Answer, Batch, Needs

PADDING_RULE = "left: the lab pads every batch itself (generation_core.pad_left)"
"""``generation.padding`` of a generation pass this engine ran."""


class TransformersEngine:
    """The lab's own loop over a transformers model (module docstring)."""

    applies_task_rules = True  # it pools and generates by the declared rule itself
    name = "transformers"

    def __init__(self, spec, needs: Needs):
        self.spec = spec
        self.needs = needs
        self.tokenizer: Any = None
        self.model: Any = None
        self.settings: dict | None = None
        self.overrides: dict | None = None
        self.device = "cpu"

    def load(self, device: str) -> tuple:
        """(tokenizer, model) by the kind's reader; for generation, the settings ``generate`` will
        resolve for the rule and the checkpoint's overridden generation fields."""
        s = self.spec
        assert self.needs.loader is not None, "a transformers engine needs the kind's checkpoint reader"
        self.device = device
        self.tokenizer, self.model = self.needs.loader(s.model_ref, s.variant.precision, device,
                                                       pad_token=s.extra.get("pad_token"),
                                                       attention=s.variant.attention,
                                                       revision=s.extra.get("revision"))
        if self.needs.rule is not None:
            from lab.passes.tasks.generation_core import (
                checkpoint_overrides,
                effective_settings,
                eos_token_ids,
                lab_generation_config,
                pad_token_id,
            )

            tok, model, rule = self.tokenizer, self.model, self.needs.rule
            self.settings = effective_settings(tok, model, rule)
            lab_cfg = lab_generation_config(rule, pad_token_id(tok, model), eos_token_ids(tok, model))
            self.overrides = checkpoint_overrides(getattr(model, "generation_config", None), lab_cfg)
        return self.tokenizer, self.model

    def use_loaded(self, tokenizer, model, device: str) -> None:
        """The state :meth:`load` leaves, from a tokenizer and model already loaded on ``device``."""
        self.tokenizer, self.model, self.device = tokenizer, model, device

    def begin_window(self) -> None:
        """Nothing to reset: every figure of this engine's window is counted by the kind's window."""

    # -- the operations --------------------------------------------------------------------------

    def _inputs(self, batch: Batch):
        """(input ids, mask) on the device and the mask on the host, padded as the variant declares."""
        from lab.passes.inference import pad_batch

        feats = pad_batch(self.tokenizer, batch.input_ids, self.spec.variant)
        return (feats["input_ids"].to(self.device, non_blocking=True),
                feats["attention_mask"].to(self.device, non_blocking=True), feats["attention_mask"])

    def classify(self, batch: Batch) -> Answer:
        """The top class and its probability (fp32 softmax) per item; non-finite logits named."""
        import torch

        with torch.inference_mode():
            ids_t, mask_t, mask = self._inputs(batch)
            logits = self.model(input_ids=ids_t, attention_mask=mask_t).logits
            p = logits.float().softmax(dim=-1)
            conf, top = p.max(dim=-1)
            finite = torch.isfinite(logits).all(dim=-1)
            out = torch.stack([top.float(), conf, finite.float()], dim=1).cpu().tolist()
        return Answer(values=[(int(t), float(c)) for t, c, _ in out],
                      nonfinite=tuple(j for j, o in enumerate(out) if o[2] < 1.0),
                      shape=(int(ids_t.shape[0]), int(ids_t.shape[1])), masks=(mask,))

    def embed(self, batch: Batch) -> Answer:
        """The declared pooling of the last hidden state per item (fp32), L2-normalised when
        declared; each vector's norm before normalisation; non-finite vectors named."""
        import numpy as np
        import torch

        from lab.passes.tasks.embedding import mean_pool

        with torch.inference_mode():
            ids_t, mask_t, mask = self._inputs(batch)
            hidden = self.model(input_ids=ids_t, attention_mask=mask_t).last_hidden_state
            raw = mean_pool(hidden, mask_t, normalize=False)
            vec = torch.nn.functional.normalize(raw, p=2.0, dim=1) if self.needs.normalize else raw
            host = vec.cpu().numpy()
            norms = raw.norm(dim=1).cpu().tolist()
        return Answer(values=host, norms=norms, nonfinite=tuple(np.flatnonzero(~np.isfinite(host).all(axis=1))),
                      shape=(int(ids_t.shape[0]), int(ids_t.shape[1])), masks=(mask,))

    def generate(self, batch: Batch) -> Answer:
        """Greedy generation of the prompts' ids under the declared rule, left-padded by the lab."""
        from lab.passes.tasks.generation_core import generate_tokens

        masks: list = []
        items = generate_tokens(self.tokenizer, self.model, self.device, batch.input_ids, self.needs.rule,
                                on_mask=masks.append)
        return Answer(values=items, shape=(len(batch.input_ids), max(len(s) for s in batch.input_ids)),
                      masks=tuple(masks))

    # -- the lab's compile phase ---------------------------------------------------------------

    def compile(self, rows: list[dict], device: str, n_items: int) -> list:
        """The compile phase (lab.passes.compile). Classify and embed: the model's forward at the
        window's batch shapes (compile_model). Generate: the forward ``generate`` calls for the
        prompt and at every decoding step, compiled with dynamic shapes (the step's tensors are
        made inside ``generate``, where no dimension can be marked, and the cache grows a position
        per step), then whole greedy generations per window batch size as the window runs them:
        for 2 items or more, one batch of prompts of one length and one left-padded batch (its
        first prompt holds only its text's first word), since transformers takes another path when
        the mask has padding. Returns the shapes compiled ([[items, "dynamic"], ...] for generate)."""
        from lab.passes.compile import compile_batches, compile_model

        if self.needs.rule is None:
            return compile_model(self.model, rows, self.tokenizer, device, self.spec.variant, n_items)
        from lab.passes.tasks.generation_core import generate_batch

        rule = self.needs.rule

        def generate(texts: list[str]) -> list:
            same = [texts[0]] * len(texts)
            generate_batch(self.tokenizer, self.model, device, same, rule)
            if len(texts) > 1 and texts[0].split():
                generate_batch(self.tokenizer, self.model, device, [texts[0].split()[0], *same[1:]], rule)
            return [len(texts), "dynamic"]

        return compile_batches(self.model, rows, device, self.spec.variant, n_items, generate, dynamic=True)

    # -- what it observed ----------------------------------------------------------------------

    def observed(self, threads: int, workers_on_host: int = 1) -> dict:
        """The loaded model's observed record (lab.passes.observed.observe_model)."""
        from lab.passes.observed import observe_model

        return observe_model(self.model, threads, workers_on_host)

    def observe_window(self, win) -> dict:
        """The measured window's observed record (lab.passes.observed.observe_window)."""
        from lab.passes.observed import observe_window

        return observe_window(win, self.spec.variant.max_length)

    def generation_record(self) -> dict:
        """The engine's part of result.json's ``generation``: its padding, and the decoding
        settings and overridden checkpoint fields read at load."""
        from lab.passes.tasks.generation_core import CHECKPOINT_GENERATION_FILE

        return {"padding": PADDING_RULE, "settings": self.settings,
                "checkpoint_settings_not_applied": {"file": CHECKPOINT_GENERATION_FILE, "fields": self.overrides}
                if self.overrides else {}}

    def result_fields(self, win) -> dict:
        return {}

    def merged_fields(self, cards: list) -> dict:
        return {}

