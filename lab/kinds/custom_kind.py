"""The custom kind: the user's own inference code (``[task] entry``), whose outputs are labels
(pass job lab.passes.tasks.custom.CustomJob; transformers' engine only: the code is the user's)."""

from lab.facts.constants import AGREEMENT_MAX_DIFFERING_LABELS
from lab.kinds.classification_kind import LABEL_METRICS
from lab.kinds.kind import ANY, ENTRY_KEYS, LABEL, TRANSFORMERS, EntryRun, TaskKind

PREDICT_RETURNS = "a sequence of str (a list, a tuple, a numpy array of str)"
"""What ``predict`` may return, in the words its refusal uses (lab.passes.tasks.custom.predict_refusal
reads any iterable once; numpy's str_ is a str)."""

CUSTOM = TaskKind(
    name="custom", job="lab.passes.tasks.custom:CustomJob", keys=ENTRY_KEYS, defaults=(),
    metrics=LABEL_METRICS, user_metric=True, engines=(TRANSFORMERS,), vllm_runner=None, record=LABEL,
    architecture=ANY, agreement_max_differing=AGREEMENT_MAX_DIFFERING_LABELS, agreement_noun="labels",
    model_labels=False, lab_tokenizes=False, keys_private=False, by_entry=True,
    labels_role="the reference answers of the metric (an output of the entry outside them counts as a wrong label)",
    entry=EntryRun("predict", f"{PREDICT_RETURNS}, one label per text"))
