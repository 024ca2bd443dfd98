"""The classification kind: a sequence-classification checkpoint's label per text
(pass job lab.passes.tasks.classification.ClassificationJob)."""

from lab.facts.constants import AGREEMENT_MAX_DIFFERING_LABELS
from lab.kinds.kind import LABEL, SEQUENCE_CLASSIFICATION, TRANSFORMERS, VLLM, Metric, TaskKind

ACCURACY = Metric("accuracy", "share of ids whose label is the corpus label", "lab.orchestration.validate:accuracy")
MACRO_F1 = Metric("macro_f1", "F1 per corpus label, unweighted mean over the labels",
                  "lab.orchestration.validate:macro_f1")
LABEL_METRICS = (ACCURACY, MACRO_F1)
"""The metrics of label outputs (classification's, and a custom entry's)."""

CLASSIFICATION = TaskKind(
    name="classification", job="lab.passes.tasks.classification:ClassificationJob", keys=(), defaults=(),
    metrics=LABEL_METRICS, user_metric=True, engines=(TRANSFORMERS, VLLM), vllm_runner="pooling", record=LABEL,
    architecture=SEQUENCE_CLASSIFICATION, agreement_max_differing=AGREEMENT_MAX_DIFFERING_LABELS,
    agreement_noun="labels", model_labels=True, lab_tokenizes=True, keys_private=False, labels_role=None,
    served_endpoint="/classify")
