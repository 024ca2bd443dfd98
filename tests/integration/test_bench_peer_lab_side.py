"""`make bench-peer`'s lab side on the real demo model (no peer install needed): the corpus it
builds from real demo texts makes every batch exactly batch x length, as the peer's input
shapes are, and the lab's window runs over it."""

from __future__ import annotations

import json
import re
import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import bench_peer  # noqa: E402


@pytest.mark.parametrize("length", [128, 256])
def test_fixed_length_corpus_feeds_batch_by_length_with_no_padding(model_dir, tmp_path, length):
    import torch

    from lab.passes.inference import load_model

    torch.set_num_threads(1)
    tok, model = load_model(str(model_dir), "fp32", "cpu")
    path = tmp_path / "fixed.jsonl"
    rows = bench_peer.fixed_length_corpus(tok, 16, length, path, 8)
    assert len(rows) == 16 and len(path.read_text().splitlines()) == 16
    assert all(json.loads(x)["text"] for x in path.read_text().splitlines())
    got = bench_peer.run_lab({"path": path, "tok": tok, "model": model, "batch": 8, "max_length": length})
    assert got["fixed_shape"] is True and got["batches"] == 2
    assert got["items_per_s"] == pytest.approx(16 / got["seconds"])


def test_too_few_long_items_is_a_usage_error(model_dir, tmp_path):
    from lab.passes.inference import load_model

    tok, _ = load_model(str(model_dir), "fp32", "cpu")
    with pytest.raises(bench_peer.UsageError, match="demo-corpus items have 512 tokens or more") as e:
        bench_peer.fixed_length_corpus(tok, 100_000, 512, tmp_path / "x.jsonl", 5)
    m = re.search(r"only (\d+) demo-corpus items .* lower --items to (\d+) ", str(e.value))
    have, hint = int(m[1]), int(m[2])
    assert hint % 5 == 0 and (hint <= have or have < 5)  # whole batches of --batch, not of 8
