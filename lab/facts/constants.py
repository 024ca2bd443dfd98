"""Defaults used when a campaign file or a command line leaves a value out: one place each.

Stdlib only, imports nothing (the pass runner may read it inside a container).
"""

from __future__ import annotations

ENGINE_NAMES = ("transformers", "vllm")
"""The engines a variant may declare (``engine``; the first is the default). The one list: the
variant's check (lab.inputs.variants), the kinds' ``engines`` (lab.kinds.kind) and the engine
registry (lab.passes.backends.ENGINES, which adds the user's code, ``entry``) read it."""

DEFAULT_SEED = 0
"""[timing] seed: torch.manual_seed of every pass (recorded in the manifest)."""

CORPUS_SEED = 20260924
"""Sampling seed of `iteralab corpus build` (the demo corpus was drawn with it)."""

DEFAULT_DELIVERABLES = 1
"""[campaign] deliverables: distinct useful corpora the job must produce (seed: count once)."""

DEFAULT_REPETITIONS = 5
"""Passes per variant (SPEC 3.5: default 5, rotated order)."""

DEFAULT_LOTS = 1
"""[cost] lots when the section names a package but not its lot count. There is no default
GPU or package: without [cost] nothing is priced (no price is invented)."""

DEFAULT_MIN_WINDOW_S = 60.0
"""[timing] min_window_s: the shortest measured window (s) of a pass that compare projects to
a production load. A pass of a second or two is dominated by what does not scale with the
load (clock ramp-up, allocator and cache warm-up, timer resolution, one noisy neighbour);
MLPerf's offline scenario asks 600 s for the same reason (MLPerf Inference rules, "minimum
duration"). 60 s is the floor this lab defaults to: long enough that a second of jitter is
under 2 %, short enough for 5 passes of several variants on a rental; set 600 for MLPerf's."""

DEFAULT_MIN_ACCEPTED_PASSES = 3
"""[timing] min_accepted_passes: accepted passes of at least min_window_s a configuration
needs before compare projects it (one pass has no spread; the worst of three is a worst case
worth sizing on). Below the default 5 repetitions on purpose, so one failed pass does not
make a configuration unprojectable."""

SYSTEMATIC_FAILURES = 3
"""The campaign blocks (state ``blocked``, exit 5 headless) when this many consecutive passes, of
at least two variants, end in the same error before any item is done: a fault of the host, the
image or the inputs that every variant meets (a missing library, an unreadable model, a pass
image built from other sources), not a measurement of a variant. Running the remaining slots
would only add identical rows. Those passes become interrupted rows (kept, with their error; the
slots run again on resume, once it is fixed). Out-of-memory, host-memory kills and
not-honoured rows never count: they are what a variant does. Three, so one transient failure
and a second coincidence do not stop a campaign."""

VLLM_MEMORY_FRACTION = {"cpu": 0.1, "gpu": 0.9}
"""vLLM's ``gpu_memory_utilization`` when a vLLM variant leaves ``vllm_memory_fraction`` out, by
where the engine runs: the fraction of device memory vLLM reserves up front for weights and KV
cache. On CPU it is a fraction of host RAM, and vLLM's own default (0.92) is refused on a host
where other processes hold memory; 0.1 starts on a shared 2-core development machine
(../shared/VLLM-HERE.md). On a rented GPU only the pass uses the card: 0.9 leaves room for the
CUDA context. The value used is recorded with the pass (lab.engines.vllm)."""

SERVED_FILE = "served.jsonl"
"""A server pass's per-request records (one lab.engines.serving_figures.ServedRequest per corpus id,
in corpus order), beside its predictions in the pass folder; archive verify re-derives the pass's
serving figures from it (lab.evidence.served)."""

GENERATOR_LAG_SHARE = 0.1
"""A server pass's load generator fell behind its arrival schedule when the 99th percentile of
its release lag (each request's release after its scheduled time) exceeds this share of the mean
gap between arrivals (1 / request_rate): the requests then reached the server at another rate and
pattern than declared, so its latencies are not those of the declared traffic, and the pass is
not used (lab.passes.observed.require_honoured: request_rate not honoured). A tenth of the gap:
the schedule's own spacing is still the traffic's at that rate, not the client's. The client must
not be the bottleneck (MLPerf Inference's LoadGen issues each query at its scheduled time for
the same reason)."""

AGREEMENT = "agreement"
"""The [quality] metric that judges every task kind by its per-id agreement with the reference
variant's first valid pass (no labels needed: the one metric a corpus built with --no-labels
accepts at lock; lab.orchestration.validate.agreement_figures gives the rule per kind). Here, not
in lab.orchestration.config, so that the pass records (lab.passes.records) can name it too."""

AGREEMENT_MAX_DIFFERING_LABELS = 0.05
"""[quality] max_differing when the campaign file leaves it out, for a kind whose results are
labels or outputs (classification, custom, generation: each kind's ``agreement_max_differing``,
lab.kinds): the largest share of the compared ids whose result may differ from the reference
variant's first valid pass's (the agreement rule, lab.orchestration.agreement; checked in every
pass beside the threshold).

Labels and outputs, 0.05. A label flips only where two classes are nearly tied, so an honest
variant flips a few: measured by scripts/agreement_defaults.py (2026-12-03, 250 demo-corpus items,
the demo classifier, against batch 1 in fp32): batch 8 in fp32 and in bf16 flipped none, batch 1 in
bf16 one (0.004); 0.05 leaves more than ten times that margin. A variant that changes what the model
computes flips many: the same checkpoint padded on the left (an encoder with absolute positions)
flipped 44 of 250 (0.176). Greedy generation diverges from the first changed token on, so a share of
whole outputs, after the declared normalisation, is judged the same way."""

AGREEMENT_MAX_DIFFERING_VECTORS = 0.0
"""[quality] max_differing when the campaign file leaves it out, for the embedding kind (vectors).

Embeddings, 0.0: every id's vector must reach AGREEMENT_MIN_COSINE. A vector is the deliverable
itself and its cosine is continuous, so an honest variant has no id near the floor (no near-tie to
forgive), and a share allowed below it would pass a run with that share of its vectors turned
around."""

AGREEMENT_MIN_COSINE = 0.999
"""[quality] min_cosine of an embedding campaign that leaves it out: an id's vector differs from the
reference variant's when their cosine is below it. Measured by scripts/agreement_defaults.py
(2026-12-03, 250 demo-corpus items, mean pooled and normalised, against batch 1 in fp32): batch 8
in fp32, lowest cosine 1.000000; batch 8 in bf16, lowest 0.999953 (median 0.999986). The floor
leaves twenty times the bf16 distance (1 - cosine 4.7e-5 against 1e-3); padded on the left, the
lowest id is at 0.37."""

USER_METRIC_TIMEOUT_S = 300.0
"""The longest one call of a user's [quality] metric function may take (s): the orchestrator runs
it in a process of its own (lab.passes.tasks.custom.score_in_fresh_process), over one pass's
predictions whole and per bucket, and kills it past this bound; the pass's metric is then
empty with the reason. A metric over a million labels in plain Python takes seconds."""

PASS_DRAIN_S = 5.0
"""After a local pass process exits, the launcher reads its event channel this long more (s) for
the lines still in the pipe, then stops reading: a process the pass left behind that holds the
channel open never holds the orchestrator (lab.launchers.local)."""

PASS_ENV = "ITERALAB_PASS_DIR"
"""Environment variable naming the pass folder in every process of a local pass (children
inherit it): how the launcher and `campaign status` find a pass's processes, a daemon that left
the pass's session included."""

LONG_SERVER_PASS_S = 3600.0
"""Seconds of arrivals beyond which a server pass's declared rate is named at lock
(lab.orchestration.preflight.check_server_rates): the corpus's requests at that rate take that long."""
