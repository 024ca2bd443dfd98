"""The embedding kind: an encoder's pooled last hidden state per text, one row of vectors.npy
(pass job lab.passes.tasks.embedding.EmbeddingJob; the user's own ``embed``: the entry engine,
lab.passes.backends.entry_backend)."""

from lab.facts.constants import AGREEMENT_MAX_DIFFERING_VECTORS
from lab.kinds.kind import ENCODER, TRANSFORMERS, VECTOR, VLLM, EntryRun, Metric, TaskKind

POOLINGS = ("mean",)  # lab.passes.tasks.embedding.mean_pool: mean over the attention mask
NN_ACCURACY = Metric("nn_accuracy", "share of ids whose nearest other vector (cosine) has the same corpus label",
                     "lab.passes.tasks.embedding_metrics:nn_accuracy")

EMBEDDING = TaskKind(
    name="embedding", job="lab.passes.tasks.embedding:EmbeddingJob", keys=("pooling", "normalize"),
    defaults=(("pooling", POOLINGS[0]), ("normalize", True)), metrics=(NN_ACCURACY,), user_metric=False,
    engines=(TRANSFORMERS, VLLM), vllm_runner="pooling", record=VECTOR, architecture=ENCODER,
    agreement_max_differing=AGREEMENT_MAX_DIFFERING_VECTORS, agreement_noun="vectors", model_labels=False,
    lab_tokenizes=True, keys_private=False, labels_role="used by the retrieval metric only",
    entry=EntryRun("embed",
                   "a 2-D array of finite numbers, one row per text, every batch the same width"),
    served_endpoint="/v1/embeddings")
