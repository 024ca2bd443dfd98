"""A server pass (a variant declaring ``request_rate``; [scenario] kind = "server",
lab.inputs.scenario): the task served by vLLM's OpenAI-compatible server under timed arrivals,
as a :class:`lab.passes.tasks.job.Job` on the one pass sequence (lab.passes.sequence). The kind
names the endpoint (lab.kinds: ``served_endpoint``): completions for generation, vLLM's
``/classify`` for classification, ``/v1/embeddings`` for embedding.

Set-up (``engine_start``, never in the measured window): the server (lab.engines.vllm_server:
the variant's vLLM settings, on the loopback address, health-checked, its process tree watched)
and the load generator (lab.engines.vllm_load.LoadGenerator: ``vllm bench serve`` in the same
pinned venv, vLLM's import paid here). ``load`` is the kind job's on the vLLM engine
(lab.passes.backends.vllm_backend): the lab's tokenizer, the model's shape on the meta device, the eos ids.

The measured window: every corpus row is one request, in corpus order, arriving at the
variant's ``request_rate`` (Poisson at burstiness 1, [timing] seed), at most ``max_concurrency``
in flight, after the scenario's warm-up requests (kept out of every figure). A generation
request's prompt is the generation rule's (the text cut to max_text_tokens, the template;
lab.passes.tasks.generation_core), greedy with the rule's stop strings and ``max_new_tokens``,
streamed back; a classification or embedding request's prompt is the lab's token ids of the
text (cut at the variant's ``max_length``, as an offline pass tokenizes it), its answer (the
class probabilities, or the pooled vector) coming whole. The window ends when the last answer
is in; its figures are the served requests' (lab.engines.serving_figures: latency percentiles,
achieved rate, goodput, the verdict against the locked objective, the generator's lag behind
its schedule and its CPU), written to result.json's ``serving`` and every request's record to
``served.jsonl`` beside the predictions, from which ``archive verify`` re-derives them.

Each answered request is the item's answer in the kind's own window record (a ``GeneratedItem``;
a label index and its probability; a vector), so the predictions are written by the kind's
transformers job and the served answers are judged like any pass of the kind: ids, coverage,
and per id against the reference variant (an offline pass) by the kind's agreement rule. The
server must have read the prompt the lab built: a request whose prompt token count (the
server's) differs from the lab's fails the pass as not honoured. A request that was not answered
(the server refused it, timed out, died or ran out of memory) fails the pass: the requests
answered before the first unanswered one are its items completed, the records kept; a server
that died is named, with the last words of its log when they say it ran out of memory (oom).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from lab.engines.serving_figures import Figures, Verdict, plain
from lab.facts.constants import SERVED_FILE
from lab.facts.errors import FailureKind, PassFailure
from lab.inputs.scenario import scenario_of
from lab.kinds.kind import CLASSIFY, EMBED, GENERATE
from lab.passes.backends import Answer
from lab.passes.backends.vllm_backend import LOG_FILE

SERVER_LOG = "server.log"  # the server's own output, in the pass folder
LOAD_DIR = "load"  # the generator's requests, result and record, in the pass folder
SERVER_STOP = "server"
"""``stopped_by`` of a served output shorter than max_new_tokens: the server ended it (its eos or a
stop string; the load generator's record does not say which)."""


class ServingRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """result.json's ``serving`` of a server pass: the ``figures`` and ``verdict`` of its requests
    (lab.engines.serving_figures), how many were sent (``requests``) and ``answered``, the load
    generator's CPU and wall seconds over its run and how its schedule was known
    (``schedule_note``), the records' file (``served_file``), and the server's process tree usage
    (``server_usage``: CPU seconds, processes, the largest resident set in bytes)."""

    figures: Figures
    verdict: Verdict
    requests: int
    answered: int
    generator_cpu_s: float
    generator_wall_s: float
    schedule_note: str
    served_file: str = SERVED_FILE
    server_usage: dict[str, float] | None = None


def serving_record(serving: dict | None) -> ServingRecord | None:
    """result.json's ``serving`` (a PassResult's, as written) as a ServingRecord; None for an offline
    pass or a record this lab cannot read. The one lenient reader (verify decodes it strictly:
    lab.evidence.served)."""
    if serving is None:
        return None
    try:
        return msgspec.convert(serving, ServingRecord, strict=False)
    except msgspec.ValidationError:
        return None


class RequestsFailed(PassFailure):
    """Requests of a server pass were not answered; ``kind`` error or oom, ``items_done`` the
    requests answered before the first that was not."""


class ServerJob:
    """A task kind served under timed arrivals (module docstring): the vLLM server's window around
    the kind's job (``task``: its window record, answers stored, predictions written, self metric;
    its vLLM engine loads the lab's tokenizer, the model's shape and the eos ids, never started)."""

    compile = None  # the server compiles in its own start

    def __init__(self, spec):
        from lab.kinds import kind_of_task
        from lab.passes.tasks.job import job_class

        self.spec = spec
        self.task: Any = job_class(kind_of_task(spec.extra.get("task")))(spec)
        self.declared = self.task.declared
        self.kind = self.declared.name
        if self.declared.served_endpoint is None:
            raise ValueError(f"a server pass does not serve {self.kind!r} tasks (its kind names no served_endpoint)")
        self.scenario = scenario_of(spec.extra)
        if not self.scenario.server:
            raise ValueError("a server pass needs pass.json extra.scenario with kind = \"server\"")
        self.tokenizer: Any = None
        self.server: Any = None
        self.started: Any = None
        self.generator: Any = None
        self.served: Any = None
        self.fields: dict = {}
        self.record: ServingRecord | None = None
        self.usage: dict[str, float] | None = None

    def load(self, device: str) -> tuple:
        """The kind job's load by its vLLM engine: the lab's tokenizer and the model's shape."""
        out = self.task.load(device)
        self.tokenizer = self.task.tokenizer
        return out

    def objective(self):
        """The locked objective (lab.engines.serving_figures.Objective)."""
        from lab.engines.serving_figures import Bound, Objective

        return Objective(bounds=tuple(Bound(m, p, b) for m, p, b in self.scenario.bounds()),
                         share=float(self.scenario.share))

    # -- set-up ------------------------------------------------------------------------------

    def start_engine(self, device: str, pass_dir: Path | None = None) -> dict:
        """Start the server and the load generator (the ``engine_start`` phase); returns the result
        fields ``engine`` (the server's url, start seconds, the generator's import seconds; an
        embedding server's ``pooling``, which must be the declared rule: NotHonoured otherwise).
        Raises lab.engines.vllm_server.ServerStartError or lab.engines.vllm_load.LoadGenError (one
        line naming the log) when either does not start."""
        from lab.engines.vllm_load import LOG_NAME, LoadGenerator
        from lab.engines.vllm_server import VllmServer, server_config

        out = pass_dir or Path(self.spec.out_dir)
        settings = self.task.engine.settings(device)
        self.server = VllmServer(settings, log_path=out / SERVER_LOG)
        self.started = self.server.start()
        self.generator = LoadGenerator(out / LOAD_DIR / LOG_NAME)
        generator_s = self.generator.start()
        self.fields = {"engine": {"name": "vllm-server", "url": self.started.url, "log": SERVER_LOG,
                                  "server_start_s": round(self.started.setup_s, 6),
                                  "generator_start_s": round(generator_s, 6),
                                  "generator_import_s": round(self.generator.import_s or 0.0, 6),
                                  "generator_log": f"{LOAD_DIR}/{LOG_NAME}",
                                  "settings": {"dtype": settings.dtype, "max_model_len": settings.max_model_len,
                                               "enforce_eager": settings.enforce_eager,
                                               "gpu_memory_utilization": settings.gpu_memory_utilization,
                                               "max_num_seqs": settings.max_num_seqs,
                                               "max_num_batched_tokens": settings.max_num_batched_tokens,
                                               "prefix_caching": settings.prefix_caching,
                                               "threads": settings.threads}}}
        if self.declared.operation == EMBED:  # the declared embedding rule is what the server pools
            pooling = server_config(self.started.url).get("pooling")
            self.fields["engine"]["pooling"] = pooling
            self.task.engine.check_pooling(pooling)
        return self.fields

    def engine_pid(self) -> int | None:
        """The server's process group leader (its tree's CPU time counts in the window's
        conditions); None before start and after close."""
        return self.server.proc.pid if self.server is not None and self.server.proc is not None else None

    def close(self) -> None:
        """Stop the generator and the server (idempotent, never raises); the server's CPU and
        memory usage go into the serving record."""
        if self.generator is not None:
            self.generator.stop(grace_s=0.0 if self.task.engine.stopping else 5.0)
        if self.server is not None:
            usage = self.server.stop()
            if usage is not None:
                self.usage = {"cpu_s": round(usage.cpu_s, 3), "processes": usage.processes,
                              "peak_rss_bytes_largest": max(usage.peak_rss_bytes.values(), default=0)}
        self.task.close()

    # -- the protocol's steps --------------------------------------------------------------------

    def warm_up(self, rows: list[dict], device: str) -> float:
        """Nothing here: the scenario's warm-up requests are sent by the generator at the start of
        the window's load and kept out of its figures (``vllm bench serve --num-warmups``)."""
        return 0.0

    def run_window(self, rows, device, on_batch=None, sink=None):
        """Offer every row as a request at the variant's rate and read each answer back (module
        docstring). While the requests are answered, ``on_batch(done, served=...)`` reports the
        answers so far about once a second (lab.engines.serving_figures.LiveFigures: achieved rate
        and TTFT percentiles so far, for the Runs screen), then once with every request done.
        Returns the kind's WindowResult (generation: ``generated[i]``, row i's answer;
        classification: ``pred_index`` and ``prob``; embedding: ``vectors``).
        Raises RequestsFailed for unanswered requests, NotHonoured for a prompt the server read
        otherwise, NonFiniteLogits / NonFiniteVectors for a non-finite pooled answer,
        lab.engines.vllm_load.LoadGenError when the generator fails."""
        from lab.engines.serving_figures import figures, live_figures, verdict
        from lab.engines.vllm_load import LiveOutcomes, LoadRun, LoadSettings, Prompt
        from lab.passes.observed import NotHonoured

        v, sc = self.spec.variant, self.scenario
        win, _, seqs, texts = self.task.open(rows)  # the kind's window: its prompts and token ids
        lab_tokens = [len(ids) for ids in seqs]
        rule: Any = getattr(self.task, "rule", None)
        if self.declared.operation == GENERATE:  # the rule's prompt text, streamed back
            prompts = tuple(Prompt(id=str(r["id"]), prompt=t, max_tokens=rule.max_new_tokens)
                            for r, t in zip(rows, texts, strict=True))
        else:  # the lab's token ids (cut at max_length, special tokens included), the answer whole
            prompts = tuple(Prompt(id=str(r["id"]), prompt=tuple(ids)) for r, ids in zip(rows, seqs, strict=True))
        stop = tuple(rule.stop) if rule is not None else ()
        if sink is not None:
            sink["win"] = win
        objective = self.objective()
        assert v.request_rate is not None  # job_for gives a server pass only a variant with a rate
        assert self.declared.served_endpoint is not None  # __init__ refuses a kind that names none
        run = LoadRun(prompts=prompts,
                      settings=LoadSettings(rate=v.request_rate, seed=self.spec.seed, burstiness=sc.burstiness,
                                            max_concurrency=sc.max_concurrency, warmups=sc.warmup_requests,
                                            stop=stop, objective=objective, endpoint=self.declared.served_endpoint),
                      out_dir=Path(self.spec.out_dir) / LOAD_DIR)
        live = LiveOutcomes(run)

        def progress() -> None:  # the answers so far, as the pass's progress (never a figure of the pass)
            outcomes = live.read()
            if on_batch and outcomes:
                on_batch(len(outcomes), served=plain(live_figures(outcomes)))

        self.served = load = self.generator.run(self.started, self.spec.model_ref, [run], on_wait=progress)[0]
        recs = load.records
        self.record = ServingRecord(figures=figures(recs, load.duration_s, v.request_rate, objective),
                                    verdict=verdict(recs, objective), requests=len(recs),
                                    answered=sum(r.answered for r in recs),
                                    generator_cpu_s=round(load.generator_cpu_s, 6),
                                    generator_wall_s=round(load.generator_wall_s, 6),
                                    schedule_note=load.schedule_note)
        first_bad = next((k for k, r in enumerate(recs) if not r.answered), None)
        answered = recs[:first_bad]
        for k, r in enumerate(answered):
            if r.input_tokens < 0:  # lab.engines.vllm_load_worker.UNREPORTED
                raise NotHonoured(f"declared value not checked: the server did not report the prompt tokens it read "
                                  f"for id {r.id} (usage.prompt_tokens), so the lab cannot check that it tokenizes "
                                  "as the lab does; serve with vLLM's OpenAI-compatible server, which reports it",
                                  items_done=k)
            if r.input_tokens != lab_tokens[k]:
                raise NotHonoured(f"declared value not honoured: the server read {r.input_tokens} prompt tokens "
                                  f"for id {r.id}, the lab's tokenizer {lab_tokens[k]} for the same prompt; "
                                  "the served model does not tokenize as the lab does (check the tokenizer "
                                  "files and its special tokens)", items_done=k)
        answer = served_answer(self.declared.operation, answered, rule)
        if answer.nonfinite:  # the answers before the first non-finite one are kept
            k = answer.nonfinite[0]
            self.task.store(win, list(range(k)), answer._replace(values=answer.values[:k]))
            raise self.task.nonfinite([answered[k].id], k)
        self.task.store(win, list(range(len(answered))), answer)
        done = len(answered)
        # the answered requests' prompt tokens, counted as one packed call: the server tokenized and
        # batched them itself, no pad token entered (its own batches are not the lab's to count)
        win.count_packed_call(list(range(done)), win.tokens_kept, None)
        if on_batch:
            outcomes = live.read()
            on_batch(win.items_done, served=plain(live_figures(outcomes)) if outcomes else None)
        if first_bad is not None:
            self._fail(recs, first_bad)
        return win

    def _fail(self, recs, first_bad: int) -> None:
        """Raise RequestsFailed for the unanswered requests (oom when the server died and its log
        ends on an allocation failure)."""
        from lab.facts.errors import clip
        from lab.facts.files import tail_text
        from lab.passes.failures import OOM_MARKERS

        bad = [r for r in recs if not r.answered]
        died = self.server is not None and not self.server.alive()
        why = f"{len(bad)} of {len(recs)} requests not answered (first: id {bad[0].id}: {bad[0].error[:160]})"
        kind = FailureKind.ERROR
        if died:
            hits = [line.strip() for line in tail_text(self.server.log_path).splitlines()
                    if any(m in line.lower() for m in OOM_MARKERS)]
            last = clip(hits[-1], 200) if hits else ""
            kind = FailureKind.OOM if last else FailureKind.ERROR
            why += f"; the server exited during the load ({last or 'see ' + SERVER_LOG})"
        exc = RequestsFailed(why, items_done=first_bad)
        exc.kind = kind
        raise exc

    def observe(self, threads: int, workers_on_host: int = 1) -> dict:
        """What the running server says of itself (lab.engines.vllm_server.server_config: its
        ``/server_info`` config, ``/metrics`` and ``/v1/models``): engine vllm, dtype, compile (not
        enforce_eager), max_num_seqs, max_num_batched_tokens, its memory fraction, prefix caching
        and max_model_len, in the keys of lab.passes.observed.require_honoured; what it does not
        say (a value it did not give, the OpenMP threads it bound, the device) is NOT_OBSERVABLE,
        recorded as declared, never claimed."""
        from lab.engines.vllm_server import server_config
        from lab.passes.observed import NOT_OBSERVABLE

        seen = server_config(self.started.url)
        eager = seen.get("enforce_eager")
        return {"engine": "vllm", "vllm_memory_fraction": seen.get("gpu_memory_utilization", NOT_OBSERVABLE),
                "prefix_caching": seen.get("enable_prefix_caching", NOT_OBSERVABLE),
                "max_model_len": seen.get("max_model_len", NOT_OBSERVABLE),
                "max_num_seqs": seen.get("max_num_seqs", NOT_OBSERVABLE),
                "max_num_batched_tokens": seen.get("max_num_batched_tokens", NOT_OBSERVABLE),
                "dtype": seen.get("dtype", NOT_OBSERVABLE),
                "compile": NOT_OBSERVABLE if eager is None else not eager, "device": NOT_OBSERVABLE,
                "threads": NOT_OBSERVABLE, "threads_declared": threads, "quantization": NOT_OBSERVABLE,
                "attention": "vLLM's own backend (see server.log)"}

    def observe_window(self, win) -> dict:
        """The vLLM pass's window record (padding PACKED; the prompts' longest) without its batch
        figures (the lab sends one request per item, the server batches them itself), and the load
        generator's releases: ``request_rate`` (released per second), ``generator_lag_p99_s``
        and ``request_schedule`` (lab.passes.observed.require_honoured judges the lag)."""
        from lab.passes.observed import NOT_OBSERVABLE

        rec = self.task.engine.observe_window(win)
        f = self.record.figures if self.record is not None else None
        lag = f.lag_s if f is not None else None
        return {**rec, "batch_size": NOT_OBSERVABLE, "max_running": None,
                "request_rate": f.dispatch_rate if f is not None else None,
                "generator_lag_p99_s": None if lag is None else lag["p99"],
                "request_schedule": "unknown" if lag is None else "replayed"}

    def write_predictions(self, path: Path, win) -> dict:
        """The kind job's predictions and fields, ``served.jsonl`` (every request's record, corpus
        order) beside them, and ``serving`` (module docstring)."""
        from lab.facts.diskfull import atomic_write_text

        fields = self.task.write_predictions(path, win)
        if self.declared.generates_text:
            fields["generation"] = {**fields["generation"], "padding": "none: the server tokenizes each prompt"}
        if self.served is not None:
            atomic_write_text(path.with_name(SERVED_FILE),
                              "".join(json.dumps(plain(r)) + "\n" for r in self.served.records))
        fields["engine"] = dict(self.fields.get("engine", {}))
        if self.record is not None:
            fields["serving"] = plain(msgspec.structs.replace(self.record, server_usage=self.usage))
        return fields


    def self_metric(self, win) -> float | None:
        return self.task.self_metric(win)


def served_answer(operation: str, answered: list, rule) -> Answer:
    """The answered requests' records (lab.engines.vllm_load: corpus order) as the kind's
    operation's Answer: generate, a GeneratedItem per request (the server's token counts; stopped
    by max_new_tokens when it wrote that many, else by the server: SERVER_STOP); classify, the
    argmax of the class probabilities and its probability, as an offline vLLM pass reads them;
    embed, the pooled vectors (normalised by the server: no norm). An empty or non-finite pooled
    answer is named in ``nonfinite``. Packed: the server batched them itself."""
    import numpy as np

    from lab.passes.tasks.generation_core import GeneratedItem

    if operation == GENERATE:
        return Answer(values=[GeneratedItem(text=r.output_text, input_tokens=r.input_tokens,
                                            output_tokens=r.output_tokens,
                                            stopped_by="max_new_tokens" if r.output_tokens >= rule.max_new_tokens
                                            else SERVER_STOP) for r in answered], packed=True)
    rows = [np.asarray(r.answer if r.answer is not None else (), dtype=np.float32) for r in answered]
    bad = tuple(k for k, row in enumerate(rows) if row.size == 0 or not np.isfinite(row).all())
    if operation == CLASSIFY:
        tops = [int(row.argmax()) if row.size else None for row in rows]
        return Answer(values=[(top, None if top is None else float(row[top]))
                              for top, row in zip(tops, rows, strict=True)], nonfinite=bad, packed=True)
    width = next((row.shape[0] for row in rows if row.size), 0)
    vectors = np.zeros((len(rows), width), np.float32)
    for k, (r, row) in enumerate(zip(answered, rows, strict=True)):
        if row.size and row.shape != (width,):
            raise ValueError(f"the server's vector for id {r.id} has shape {row.shape} after {width} wide ones")
        if row.size:
            vectors[k] = row
    return Answer(values=vectors, norms=None, nonfinite=bad, packed=True)


__all__ = ["LOG_FILE", "RequestsFailed", "ServerJob", "ServingRecord", "served_answer"]
