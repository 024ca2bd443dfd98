"""The generation kind: a causal language model's text per prompt
(pass job lab.passes.tasks.generation.GenerationJob; the user's own
``generate``: the entry engine, lab.passes.backends.entry_backend)."""

from lab.facts.constants import AGREEMENT_MAX_DIFFERING_LABELS
from lab.kinds.kind import CAUSAL_LM, TEXT, TRANSFORMERS, VLLM, EntryRun, Metric, TaskKind

# exact match after the declared normalisation, SQuAD token F1 (lab.passes.tasks.text_metrics); the
# one [quality] names is judged, the other is reported beside it
EXACT_MATCH = Metric("exact_match", "share of ids whose normalised output equals the reference answer",
                     "lab.passes.tasks.text_metrics:exact_match")
TOKEN_F1 = Metric("token_f1", "SQuAD token F1 per id, mean over the ids", "lab.passes.tasks.text_metrics:token_f1")
GENERATION_KEYS = ("prompt", "max_new_tokens", "stop", "max_text_tokens", "decoding", "normalisation")

GENERATION = TaskKind(
    name="generation", job="lab.passes.tasks.generation:GenerationJob", keys=GENERATION_KEYS,
    defaults=(("stop", ()), ("max_text_tokens", 0), ("decoding", "greedy")), metrics=(EXACT_MATCH, TOKEN_F1),
    user_metric=False, engines=(TRANSFORMERS, VLLM), vllm_runner="generate", record=TEXT, architecture=CAUSAL_LM,
    agreement_max_differing=AGREEMENT_MAX_DIFFERING_LABELS, agreement_noun="outputs", model_labels=False,
    lab_tokenizes=True, keys_private=True, labels_role="the reference answers of the metric",
    fixed_padding="longest",  # the job pads each batch on the left to its longest prompt
    entry=EntryRun("generate",
                   "a sequence of str, one output per prompt"),
    served_endpoint="/v1/completions", streams=True)
