"""A vLLM pass (``engine = "vllm"``): classification, embedding or generation run by vLLM's
offline engine, as a :class:`lab.passes.tasks.job.Job` on the one pass sequence
(lab.passes.sequence).

The engine is lab.engines.vllm.VllmClient: a child process in the vLLM venv, started in
``start_engine`` (the sequence's ``engine_start`` phase: worker spawn, vLLM import, engine
core start, weights loaded, KV cache reserved; set-up, never inside the measured window).
``load`` loads only the lab's tokenizer (``model_load``) and, on the meta device (no weights),
the model's shape for the probe phase's model FLOPs.

The measured window covers what a transformers pass's covers: the corpus rows are tokenized
and truncated by the lab (lab.passes.inference.tokenize, the transformers pass's rule), sent
as token ids in calls of ``batch_size`` items (the declared batch size is items per call;
vLLM schedules them continuously, up to its ``max_num_seqs`` / ``max_num_batched_tokens``, and
what it scheduled is observed: ``max_running``), and the answers are materialized on the
host (argmax and its probability per item; one vector per item). A call that fails leaves
the items of the calls before it done (``VllmFailure.items_done``).

Generation: the prompts are tokenized once by the transformers job's rule
(lab.passes.tasks.generation.open_generation_window), vLLM generates greedily from those ids
(runner "generate", ``SamplingParams(temperature=0, max_tokens=max_new_tokens, stop=...)``,
recorded in the engine record as vLLM holds them) and returns token ids only; the lab decodes
and cuts them by its one stop rule (generation_core.finish_generated, the transformers job's
too), so both engines' texts and ``output_tokens`` (counted up to that cut) come from one rule.
``max_length`` is then the longest prompt; vLLM's max_model_len adds max_new_tokens to it
(lab.engines.vllm.settings_for). vLLM's own finish reasons are counted in the engine record.

vLLM packs sequences without padding: ``padded_tokens`` equals ``real_tokens`` and the
observed padding is lab.passes.observed.PACKED, which honours a declared ``padding = "longest"`` (no pad
token enters a result either way); ``padding = "max_length"`` is refused at lock
(lab.inputs.variants). Predictions are written in the transformers job's format of the same
kind (ClassificationJob / EmbeddingJob / GenerationJob), so the same validation judges both engines: per id
against the reference variant within the protocol's tolerance, never bit equality.

The engine closes on every path: ``close()`` (the sequence calls it when the pass's phases
end, failure included), SIGTERM (raised here as KeyboardInterrupt: the pass records
``interrupted`` and closes the engine), and a killed pass (the worker kills its own process
group when its parent dies: lab.engines.vllm_worker.watch_parent).
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path
from typing import Any

from lab.kinds import KINDS, task_kind
from lab.kinds.kind import CAUSAL_LM, SEQUENCE_CLASSIFICATION, VECTOR, VLLM

PACKED_PROMPTS = "none: vLLM packs the prompts' token ids (no pad token enters)"
"""A vLLM generation pass's ``generation.padding`` (the transformers job's is its left padding)."""
ATTENTION = "vLLM's own backend (see vllm.log)"
"""The observed attention of a vLLM pass: ``attention`` declares transformers' implementation,
which vLLM does not read (lab.passes.observed.require_honoured does not compare it)."""
LOG_FILE = "vllm.log"  # the engine's own output, in the pass folder


class VllmJob:
    """A classification, embedding or generation pass whose inference runs in vLLM (module docstring)."""

    def __init__(self, spec):
        from lab.passes.tasks.job import job_class

        self.spec = spec
        self.kind = (spec.extra.get("task") or {}).get("kind", "classification")
        self.declared = task_kind(self.kind)  # the kind object (lab.kinds): what differs by kind
        if not self.declared.runs_on(VLLM):  # custom entries: transformers only, the user's code
            runs = ", ".join(k.name for k in KINDS.values() if k.runs_on(VLLM))
            raise ValueError(f"engine vllm runs task kinds {runs} here, not {self.kind!r}")
        # the transformers job of the same kind writes the predictions and the self metric: one format
        self.writer: Any = job_class(self.declared)(spec)
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
        vLLM's, loaded in ``start_engine``. Installs the SIGTERM handler (the engine closes)."""
        import torch
        from transformers import (
            AutoConfig,
            AutoModel,
            AutoModelForCausalLM,
            AutoModelForSequenceClassification,
            AutoTokenizer,
        )

        self._sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)
        s = self.spec
        rev = s.extra.get("revision")
        self.tokenizer = AutoTokenizer.from_pretrained(s.model_ref, revision=rev)
        if s.extra.get("pad_token"):
            self.tokenizer.pad_token = s.extra["pad_token"]
        cfg = AutoConfig.from_pretrained(s.model_ref, revision=rev)
        if self.declared.model_labels:
            self.writer.id2label = {int(k): v for k, v in cfg.id2label.items()}
        auto = {SEQUENCE_CLASSIFICATION: AutoModelForSequenceClassification,
                CAUSAL_LM: AutoModelForCausalLM}.get(self.declared.architecture, AutoModel)
        with torch.device("meta"):
            self.shape_model = auto.from_config(cfg)
        if self.declared.generates_text:
            self._load_generation(s.model_ref, rev)
        return self.tokenizer, self.shape_model

    def _load_generation(self, model_ref: str, revision: str | None) -> None:
        """The eos ids the lab's stop rule cuts at, from the checkpoint's generation_config.json
        as transformers' from_pretrained reads it (else the model config's), and the writer's
        tokenizer (it records the pad token)."""
        from transformers import GenerationConfig

        from lab.passes.tasks.generation_core import eos_token_ids

        try:
            self.shape_model.generation_config = GenerationConfig.from_pretrained(model_ref,
                                                                                  revision=revision or "main")
        except OSError:
            pass  # no generation_config.json: the one built from the model's config stands
        self.eos = eos_token_ids(self.tokenizer, self.shape_model)
        self.writer.tokenizer = self.tokenizer

    def start_engine(self, device: str, pass_dir: Path | None = None) -> dict:
        """Start vLLM (its own phase, ``engine_start``); returns the result fields ``engine``
        (what vLLM resolved: versions, architecture, pooling, scheduler limits, import and
        LLM-build seconds) and ``engine_memory`` (lab.engines.vllm.reservation). Raises
        VllmFailure (kind oom or error) when the engine does not start; VllmEnvError (one line)
        when the venv cannot be had."""
        from lab.engines.vllm import VllmClient, reservation, settings_for

        s = self.spec
        log = (pass_dir or Path(s.out_dir)) / LOG_FILE
        gen = ({"max_new_tokens": self.writer.rule.max_new_tokens, "stop": self.writer.rule.stop}
               if self.declared.generates_text else {})
        self.client = VllmClient(settings_for(s.variant, s.model_ref, device, s.seed, threads=s.threads or 0, **gen),
                                 log_path=log)
        ready = self.client.start()
        self.fields = {"engine": {"name": "vllm", "versions": ready.versions, "architecture": ready.architecture,
                                  "pooling": ready.pooling, "scheduler": ready.scheduler,
                                  "import_s": round(ready.import_s, 6),
                                  "llm_build_s": round(ready.engine_start_s, 6), "log": LOG_FILE,
                                  "caching": ready.caching, "binding": ready.binding,
                                  **({"sampling": ready.sampling} if ready.sampling is not None else {})},
                       "engine_memory": reservation(ready, device)}
        if self.declared.record == VECTOR:
            self._check_pooling(ready.pooling)
        return self.fields

    def engine_pid(self) -> int | None:
        """The engine worker's process id (its descendants are vLLM's engine processes); None
        before :meth:`start_engine` or after :meth:`close`."""
        proc = self.client.proc if self.client is not None else None
        return proc.pid if proc is not None else None

    def _check_pooling(self, pooling: dict | None) -> None:
        """The declared pooling rule (mean, normalize) must be what vLLM applies to the model
        (lab.engines.vllm.pooling_mismatch, the lock's comparison too)."""
        from lab.engines.vllm import pooling_mismatch
        from lab.passes.observed import NotHonoured

        differs = pooling_mismatch(self.writer.pooling, self.writer.normalize, pooling)
        if differs:
            raise NotHonoured(f"declared value not honoured: {differs}")

    def _on_sigterm(self, signum, frame) -> None:  # noqa: ARG002 - a signal handler's signature
        self._stopping = True  # the engine may be mid-call: close() kills it without asking
        from lab.passes.failures import PassStopped

        raise PassStopped("SIGTERM: the pass was stopped")

    def close(self) -> None:
        """Stop the engine (asked to close, 10 s; at once after SIGTERM: it may be mid-call), its
        process group killed, and give SIGTERM its handler back (the files are written next: a
        stop then ends the process as it ends a transformers pass); idempotent, never raises."""
        if self.client is not None:
            self.client.close(grace_s=0.0 if self._stopping else 10.0)
        if self._sigterm is not None:
            signal.signal(signal.SIGTERM, self._sigterm)
            self._sigterm = None

    # -- the protocol's steps --------------------------------------------------------------------

    def warm_up(self, rows: list[dict], device: str) -> float:
        from lab.passes.inference import warm_up_window

        return warm_up_window(self.run_window, rows, device, self.spec.warmup_items, self.spec.warmup_passes)

    def run_window(self, rows, device, on_batch=None, sink=None):
        """Tokenize (the lab's rule), send the ids in calls of ``batch_size`` items in the
        processing order (lab.passes.inference.batch_order), materialize the answers on the
        host. Returns a WindowResult (classification: pred_index and prob; embedding: vectors
        and pred_index[i] = i, norms None: vLLM returns its pooled vectors normalised). Raises
        VllmFailure with the items done before the failing call; NonFiniteLogits /
        NonFiniteVectors for a non-finite answer."""
        import numpy as np

        from lab.engines.vllm import VllmFailure
        from lab.passes.inference import NonFiniteLogits, open_window
        from lab.passes.tasks.embedding import NonFiniteVectors

        v = self.spec.variant
        n = len(rows)
        if self.declared.generates_text:
            return self._generate_window(rows, on_batch, sink)
        win, input_ids, order = open_window(rows, self.tokenizer, v)
        lengths = win.tokens_kept
        embed = self.declared.record == VECTOR
        if embed:
            win.norms = [None] * n
        if sink is not None:
            sink["win"] = win
        for start in range(0, n, v.batch_size):
            idx = order[start:start + v.batch_size]
            try:
                out = (self.client.embed if embed else self.client.classify)([input_ids[i] for i in idx])
            except VllmFailure as exc:
                exc.items_done = win.items_done
                raise
            host = np.asarray(out.rows, dtype=np.float32)
            bad = [rows[idx[j]]["id"] for j in range(len(idx)) if not np.isfinite(host[j]).all()]
            if bad:
                raise (NonFiniteVectors if embed else NonFiniteLogits)(bad, win.items_done)
            if embed:
                if win.vectors is None:
                    win.vectors = np.zeros((n, host.shape[1]), np.float32)
                win.vectors[idx] = host
                for i in idx:
                    win.pred_index[i] = i
            else:
                top = host.argmax(axis=1)
                for j, i in enumerate(idx):
                    win.pred_index[i], win.prob[i] = int(top[j]), float(host[j, top[j]])
            win.count_packed_call(idx, lengths, out.max_running)
            if on_batch:
                on_batch(win.items_done)
        return win

    def _generate_window(self, rows, on_batch, sink):
        """Generation's window: prompts tokenized once by the lab, sent in calls of ``batch_size``
        items in the processing order, the generated ids cut by the lab's stop rule
        (generation_core.finish_generated). ``win.generated[i]`` is item i's GeneratedItem;
        vLLM's finish reasons are counted in ``self.finish``. Raises VllmFailure with the items
        done before the failing call; ValueError for a prompt with no room for max_new_tokens."""
        from lab.engines.vllm import VllmFailure
        from lab.passes.tasks.generation import open_generation_window
        from lab.passes.tasks.generation_core import finish_generated

        v, rule = self.spec.variant, self.writer.rule
        win, _, seqs, order = open_generation_window(rows, self.tokenizer, rule, v.bucketing)
        if sink is not None:
            sink["win"] = win
        self.finish = Counter()
        for start in range(0, len(rows), v.batch_size):
            idx = order[start:start + v.batch_size]
            try:
                out = self.client.generate([seqs[i] for i in idx])
            except VllmFailure as exc:
                exc.items_done = win.items_done
                raise
            for i, row in zip(idx, out.rows, strict=True):
                win.generated[i] = finish_generated(self.tokenizer, row["token_ids"], len(seqs[i]), self.eos, rule)
                win.pred_index[i] = i
                self.finish[str(row["finish"])] += 1
            win.count_packed_call(idx, win.tokens_kept, out.max_running)
            if on_batch:
                on_batch(win.items_done)
        return win

    def observe(self, threads: int, workers_on_host: int = 1) -> dict:
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

    def self_metric(self, win) -> float | None:
        return self.writer.self_metric(win)

    def write_predictions(self, path: Path, win) -> dict:
        """The transformers job's predictions and fields; for generation its ``padding`` says
        vLLM packed the prompts, and the engine record counts vLLM's finish reasons over the
        measured window (``finish_reasons``: its own words, beside the lab's ``stopped_by``)."""
        fields = self.writer.write_predictions(path, win)
        if self.declared.generates_text:
            fields["generation"] = {**fields["generation"], "padding": PACKED_PROMPTS}
            fields["engine"] = {**self.fields["engine"], "finish_reasons": dict(sorted(self.finish.items()))}
        return fields
