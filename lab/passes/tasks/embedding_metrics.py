"""Quality of an embedding pass, from its vectors alone (pure numpy; lab.orchestration.validate and
``archive verify`` both call these, so the journal's figure and the re-derived one are one rule).

- :func:`nn_accuracy`: leave-one-out nearest-neighbour label accuracy over the comparison
  corpus: for each item, the label of the most cosine-similar *other* item is its prediction
  (ties: the lowest corpus position); the fraction whose neighbour's label equals their own.
- :func:`cosine_agreement`: per-id cosine between a pass's vectors and the reference pass's.
"""

from __future__ import annotations

import io

import numpy as np

BLOCK = 1024  # query rows per similarity block: memory BLOCK x n float32


def unit_rows(vectors: np.ndarray, dtype=np.float32) -> np.ndarray:
    """``dtype`` copy of ``vectors`` (n, d) with each row scaled to L2 norm 1 (a zero row stays 0)."""
    v = np.asarray(vectors, dtype=dtype)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return v / np.where(norms > 0, norms, 1.0)


def nearest_neighbours(vectors: np.ndarray) -> np.ndarray:
    """For each row of ``vectors`` (n, d), n >= 2, the position of its most cosine-similar other
    row (shape (n,), int64), computed in blocks of BLOCK rows."""
    u = unit_rows(vectors)
    n = len(u)
    out = np.empty(n, np.int64)
    for s in range(0, n, BLOCK):
        sim = u[s:s + BLOCK] @ u.T
        sim[np.arange(len(sim)), np.arange(s, s + len(sim))] = -np.inf  # never itself
        out[s:s + BLOCK] = sim.argmax(axis=1)
    return out


def nn_accuracy(vectors: np.ndarray, labels: list, subset: np.ndarray | None = None) -> float | None:
    """Leave-one-out nearest-neighbour label accuracy (fraction in [0, 1]) of ``vectors`` (n, d)
    whose row i has gold ``labels[i]``; over the rows in ``subset`` (bool (n,)) when given, their
    neighbours taken from the whole corpus. None for fewer than 2 rows or an empty subset."""
    if len(vectors) < 2:
        return None
    nn = nearest_neighbours(vectors)
    gold = np.array(labels, dtype=object)
    hit = gold[nn] == gold
    if subset is not None:
        hit = hit[subset]
    return float(np.count_nonzero(hit)) / len(hit) if len(hit) else None


def cosine_agreement(vectors: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Cosine of row i of ``vectors`` with row i of ``reference`` (both (n, d)); shape (n,) float64,
    computed in float64 (in float32 two vectors 1.5e-5 apart read 1.0000001 and a worst id is
    only the first of a tie)."""
    return np.einsum("ij,ij->i", unit_rows(vectors, np.float64), unit_rows(reference, np.float64))


def load_vectors(data: bytes) -> np.ndarray:
    """A ``vectors.npy`` file's bytes as an array; ValueError when they are not a 2-D float16
    numpy array (pickled objects are never loaded)."""
    arr = np.load(io.BytesIO(data), allow_pickle=False)
    if arr.ndim != 2 or arr.dtype != np.float16:
        raise ValueError(f"vectors are {arr.dtype} of shape {arr.shape}, not a 2-D float16 array")
    return arr
