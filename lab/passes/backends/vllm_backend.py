"""The vLLM engine (``engine = "vllm"``): vLLM's offline engine in a child process of its pinned
venv (lab.engines.vllm.VllmClient), as a lab.passes.backends.Engine.

``load`` loads only the lab's tokenizer (``model_load``) and, on the meta device (no weights), the
model's shape for the probe phase's model FLOPs (the kind's checkpoint architecture); for
generation, the eos ids the lab's stop rule cuts at, from the checkpoint's generation_config.json
as transformers reads it. ``start`` starts vLLM (the sequence's ``engine_start`` phase: worker
spawn, vLLM import, engine core start, weights loaded, KV cache reserved; set-up, never inside
the measured window) with the variant's settings and, for generation, the rule's
``max_new_tokens`` and stop strings.

Each operation sends the batch's token ids (the lab's tokenization, the transformers engine's
rule) in one call; the declared batch size is items per call, and vLLM schedules them
continuously up to its ``max_num_seqs`` / ``max_num_batched_tokens``: what it scheduled is
observed (``max_running``). Answers are materialized on the host: classify, the argmax of the
class probabilities and its probability; embed, the pooled vector (vLLM returns it normalised:
no norm); generate, the generated ids cut by the lab's one stop rule
(generation_core.finish_generated), vLLM's own finish reasons counted in the engine record
(``finish_reasons``, beside the lab's ``stopped_by``). A call that fails raises VllmFailure with
the items done before it.

vLLM packs sequences without padding: each answer is a packed call (no pad token enters; the
observed padding is lab.passes.observed.PACKED, which honours a declared ``padding = "longest"``;
``padding = "max_length"`` is refused at lock, lab.inputs.variants). For embedding, the declared
pooling rule must be what vLLM applies to the model (checked at start).

The engine closes on every path: ``close()`` (the sequence calls it when the pass's phases end,
failure included), SIGTERM (raised here as PassStopped: the pass records ``interrupted`` and
closes the engine), and a killed pass (the worker kills its own process group when its parent
dies: lab.engines.vllm_worker.watch_parent).
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path
from typing import Any

from lab.kinds.kind import CAUSAL_LM, EMBED, GENERATE, SEQUENCE_CLASSIFICATION
from lab.passes.backends import Answer, Batch, Needs

PACKED_PROMPTS = "none: vLLM packs the prompts' token ids (no pad token enters)"
"""A vLLM generation pass's ``generation.padding``."""
ATTENTION = "vLLM's own backend (see vllm.log)"
"""The observed attention of a vLLM pass: ``attention`` declares transformers' implementation,
which vLLM does not read (lab.passes.observed.require_honoured does not compare it)."""
LOG_FILE = "vllm.log"  # the engine's own output, in the pass folder


class VllmEngine:
    """vLLM's offline engine (module docstring)."""

    applies_task_rules = True  # it pools by the declared rule (checked at start) and stops at max_new_tokens
    name = "vllm"

    def __init__(self, spec, needs: Needs):
        self.spec = spec
        self.needs = needs
        self.eos: list[int] = []  # generation: the ids that end an output (generation_core.eos_token_ids)
        self.finish: Counter = Counter()  # generation: vLLM's finish reasons over the window
        self.tokenizer: Any = None
        self.shape_model: Any = None
        self.client: Any = None
        self.fields: dict = {}
        self._sigterm: Any = None  # SIGTERM's handler before load()
        self._stopping = False  # SIGTERM received

    # -- set-up ------------------------------------------------------------------------------

    def load(self, device: str) -> tuple:
        """The lab's tokenizer and the model's shape (meta device: no weights); the weights are
        vLLM's, loaded in :meth:`start`. Installs the SIGTERM handler (the engine closes)."""
        import torch
        from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForSequenceClassification

        from lab.passes.inference import load_tokenizer

        self._sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)
        s = self.spec
        rev = s.extra.get("revision")
        self.tokenizer = load_tokenizer(s.model_ref, rev, s.extra.get("pad_token"))
        cfg = AutoConfig.from_pretrained(s.model_ref, revision=rev)
        auto = {SEQUENCE_CLASSIFICATION: AutoModelForSequenceClassification,
                CAUSAL_LM: AutoModelForCausalLM}.get(self.needs.architecture, AutoModel)
        with torch.device("meta"):
            self.shape_model = auto.from_config(cfg)
        if self.needs.operation == GENERATE:
            self._load_eos(s.model_ref, rev)
        return self.tokenizer, self.shape_model

    def _load_eos(self, model_ref: str, revision: str | None) -> None:
        """The eos ids the lab's stop rule cuts at, from the checkpoint's generation_config.json
        as transformers' from_pretrained reads it (else the model config's)."""
        from transformers import GenerationConfig

        from lab.passes.tasks.generation_core import eos_token_ids

        try:
            self.shape_model.generation_config = GenerationConfig.from_pretrained(model_ref,
                                                                                  revision=revision or "main")
        except OSError:
            pass  # no generation_config.json: the one built from the model's config stands
        self.eos = eos_token_ids(self.tokenizer, self.shape_model)

    def settings(self, device: str):
        """The vLLM settings of this pass (lab.engines.vllm.settings_for): the variant's, and for
        generation the rule's max_new_tokens and stop strings."""
        from lab.engines.vllm import settings_for

        s, rule = self.spec, self.needs.rule
        gen = {"max_new_tokens": rule.max_new_tokens, "stop": rule.stop} if self.needs.operation == GENERATE else {}
        return settings_for(s.variant, s.model_ref, device, s.seed, threads=s.threads or 0, **gen)

    def start(self, device: str, pass_dir: Path | None = None) -> dict:
        """Start vLLM (its own phase, ``engine_start``); returns the result fields ``engine``
        (what vLLM resolved: versions, architecture, pooling, scheduler limits, import and
        LLM-build seconds) and ``engine_memory`` (lab.engines.vllm.reservation). Raises
        VllmFailure (kind oom or error) when the engine does not start; VllmEnvError (one line)
        when the venv cannot be had; NotHonoured when vLLM pools otherwise than declared."""
        from lab.engines.vllm import VllmClient, reservation

        log = (pass_dir or Path(self.spec.out_dir)) / LOG_FILE
        self.client = VllmClient(self.settings(device), log_path=log)
        ready = self.client.start()
        self.fields = {"engine": {"name": "vllm", "versions": ready.versions, "architecture": ready.architecture,
                                  "pooling": ready.pooling, "scheduler": ready.scheduler,
                                  "import_s": round(ready.import_s, 6),
                                  "llm_build_s": round(ready.engine_start_s, 6), "log": LOG_FILE,
                                  "caching": ready.caching, "binding": ready.binding,
                                  **({"sampling": ready.sampling} if ready.sampling is not None else {})},
                       "engine_memory": reservation(ready, device)}
        if self.needs.operation == EMBED:
            self.check_pooling(ready.pooling)
        return self.fields

    def pid(self) -> int | None:
        """The engine worker's process id (its descendants are vLLM's engine processes); None
        before :meth:`start` or after :meth:`close`."""
        proc = self.client.proc if self.client is not None else None
        return proc.pid if proc is not None else None

    def check_pooling(self, pooling: dict | None) -> None:
        """The declared pooling rule (mean, normalize) must be what vLLM applies to the model
        (lab.engines.vllm.pooling_mismatch, the lock's comparison too); raises NotHonoured."""
        from lab.engines.vllm import pooling_mismatch
        from lab.passes.observed import NotHonoured

        differs = pooling_mismatch(str(self.needs.pooling), self.needs.normalize, pooling)
        if differs:
            raise NotHonoured(f"declared value not honoured: {differs}")

    def _on_sigterm(self, signum, frame) -> None:  # noqa: ARG002 - a signal handler's signature
        self._stopping = True  # the engine may be mid-call: close() kills it without asking
        from lab.passes.failures import PassStopped

        raise PassStopped("SIGTERM: the pass was stopped")

    @property
    def stopping(self) -> bool:
        """SIGTERM was received (what runs beside the engine stops without asking too)."""
        return self._stopping

    def close(self) -> None:
        """Stop the engine (asked to close, 10 s; at once after SIGTERM: it may be mid-call), its
        process group killed, and give SIGTERM its handler back (the files are written next: a
        stop then ends the process as it ends a transformers pass); idempotent, never raises."""
        if self.client is not None:
            self.client.close(grace_s=0.0 if self._stopping else 10.0)
        if self._sigterm is not None:
            signal.signal(signal.SIGTERM, self._sigterm)
            self._sigterm = None

    # -- the operations --------------------------------------------------------------------------

    def begin_window(self) -> None:
        """vLLM's finish reasons are counted per window (the measured window's are recorded)."""
        self.finish = Counter()

    def _call(self, fn, batch: Batch):
        from lab.engines.vllm import VllmFailure

        try:
            return fn(batch.input_ids)
        except VllmFailure as exc:
            exc.items_done = batch.items_before
            raise

    def _pooled(self, fn, batch: Batch):
        import numpy as np

        out = self._call(fn, batch)
        host = np.asarray(out.rows, dtype=np.float32)
        return out, host, tuple(int(j) for j in np.flatnonzero(~np.isfinite(host).all(axis=1)))

    def classify(self, batch: Batch) -> Answer:
        """The argmax of vLLM's class probabilities and its probability per item."""
        out, host, bad = self._pooled(self.client.classify, batch)
        top = host.argmax(axis=1)
        return Answer(values=[(int(top[j]), float(host[j, top[j]])) for j in range(len(batch.idx))],
                      nonfinite=bad, packed=True, max_running=out.max_running)

    def embed(self, batch: Batch) -> Answer:
        """vLLM's pooled vectors (normalised by vLLM when declared: no norm known)."""
        out, host, bad = self._pooled(self.client.embed, batch)
        return Answer(values=host, norms=None, nonfinite=bad, packed=True, max_running=out.max_running)

    def generate(self, batch: Batch) -> Answer:
        """vLLM's greedy ids cut by the lab's stop rule (generation_core.finish_generated); its
        finish reasons counted."""
        from lab.passes.tasks.generation_core import finish_generated

        out = self._call(self.client.generate, batch)
        items = []
        for seq, row in zip(batch.input_ids, out.rows, strict=True):
            items.append(finish_generated(self.tokenizer, row["token_ids"], len(seq), self.eos, self.needs.rule))
            self.finish[str(row["finish"])] += 1
        return Answer(values=items, packed=True, max_running=out.max_running)

    # -- what it observed ----------------------------------------------------------------------

    def observed(self, threads: int, workers_on_host: int = 1) -> dict:
        """What vLLM resolved (lab.engines.vllm.VllmClient.observed: engine, dtype, compile,
        scheduler limits, memory fraction, prefix caching, the OpenMP threads it bound on CPU)
        and the lab process's TF32 settings. ``threads``: vLLM's bound threads on CPU (None when
        not seen: a declared count is then not honoured), the lab process's torch threads on a GPU."""
        import torch

        from lab.passes.observed import observe_tf32

        obs = self.client.observed()
        where = (self.client.ready.memory.get("device") or "") if self.client.ready else ""
        used = obs["threads"] if where == "cpu" else torch.get_num_threads()
        return {**{k: v for k, v in obs.items() if k not in ("max_running", "threads")},
                **({"device": where if where == "cpu" else f"{where}:0"} if where else {}),
                "threads": used, "threads_declared": threads, "quantization": "none",
                "attention": ATTENTION, **observe_tf32()}

    def observe_window(self, win) -> dict:
        """The window's observed record: padding PACKED, the longest item kept, the order,
        ``batch_size`` (the most items the lab sent in one call) and ``max_running`` (the most
        sequences vLLM ran in one engine step, over the window; None when vLLM did not say)."""
        from lab.passes.observed import PACKED, observe_window

        rec = observe_window(win, self.spec.variant.max_length)
        return {**rec, "padding": PACKED if win.batches else rec["padding"], "max_running": win.max_running}

    def generation_record(self) -> dict:
        """The engine's part of result.json's ``generation``: vLLM packed the prompts."""
        return {"padding": PACKED_PROMPTS}

    def result_fields(self, win) -> dict:
        """For generation, the engine record with vLLM's finish reasons over the measured window
        (its own words, beside the lab's ``stopped_by``); nothing else (the engine record is the
        start's result fields)."""
        if self.needs.operation != GENERATE or not self.fields:  # not started: a server pass's (its own record)
            return {}
        return {"engine": {**self.fields["engine"], "finish_reasons": dict(sorted(self.finish.items()))}}

    def merged_fields(self, cards: list) -> dict:
        return {}
