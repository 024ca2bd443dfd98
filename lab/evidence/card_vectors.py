"""``archive verify`` of a multi-card embedding pass: its merged lines and ``vectors.npy`` against
its cards' lines and vector shards (lab.passes.tasks.embedding.EmbeddingJob.merge_cards made them).

For each card: its record names its shard (``vectors_path``, ``cards/card<r>.vectors.npy``) and
that shard's sha256, which the archived shard must have. Then every merged line k must be a card's
line with ``row`` renumbered to k (every other key equal), each card line merged exactly once, and
row k of the merged vectors must equal, bit for bit, the card's shard row its line named (the
merge copies float16 values, it computes nothing). Each problem is one line naming the pass.
"""

from __future__ import annotations

import json

import numpy as np

from lab.evidence.format import skipped_missing
from lab.evidence.members import RecordFiles
from lab.facts.errors import clip
from lab.passes.tasks.embedding_metrics import load_vectors

MERGE_RULE = "(cards/card<r>.predictions.jsonl and cards/card<r>.vectors.npy)"


def _card_items(pid: str, scan, cards: list[tuple[int, RecordFiles, list[str]]],
                problems: list[str]) -> dict[str, tuple[dict, np.ndarray]] | None:
    """{id: (its card line without ``row``, its vector)} over ``cards`` ((rank, record, lines)
    each); None when a card's shard is missing, malformed or not the one its record names (a
    problem line each)."""
    items: dict[str, tuple[dict, np.ndarray]] = {}
    ok = True
    for rank, rec, lines in cards:
        if not rec.vectors_path:
            if lines:
                problems.append(f"pass {pid}: card {rank} has prediction lines but its record names no vectors")
                ok = False
            continue
        shard_rel = f"passes/{pid}/cards/{rec.vectors_path}"
        if shard_rel not in scan.kept:
            problems.append(skipped_missing(f"pass {pid}", f"card {rank}'s vectors check", shard_rel))
            ok = False
            continue
        if scan.sha.get(shard_rel) != rec.vectors_sha256:
            problems.append(f"pass {pid}: card {rank}'s vectors sha256 differs from the one its record gives")
            ok = False
        try:
            shard = load_vectors(scan.kept[shard_rel])
            for line in lines:
                item = json.loads(line)
                row = item.pop("row")
                if not (isinstance(row, int) and 0 <= row < len(shard)) or item["id"] in items:
                    raise ValueError(f"line of {item.get('id')!r}")
                items[item["id"]] = (item, shard[row])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            problems.append(f"pass {pid}: card {rank}'s lines or vectors are malformed ({clip(str(exc), 120)})")
            ok = False
    return items if ok else None


def check_card_vectors(pid: str, scan, cards: list[tuple[int, RecordFiles, list[str]]], pred_rel: str,
                       pred_lines: list[str], problems: list[str]) -> None:
    """The merged lines ``pred_lines`` and vectors of pass ``pid`` against its ``cards`` ((rank,
    record, lines) of every card; module docstring); ``pred_rel``: the merged predictions'
    member path (``vectors.npy`` beside it). Appends one line per problem to ``problems``."""
    items = _card_items(pid, scan, cards, problems)
    if items is None:
        return
    vec_rel = pred_rel.rsplit("/", 1)[0] + "/vectors.npy"
    try:
        merged = load_vectors(scan.kept[vec_rel])
        lines = [json.loads(x) for x in pred_lines]
    except (KeyError, ValueError) as exc:
        problems.append(f"pass {pid}: its merged lines or vectors cannot be read ({clip(str(exc), 120)})")
        return
    bad_lines = bad_rows = 0
    for k, line in enumerate(lines):
        if not isinstance(line, dict):
            bad_lines += 1
            continue
        card = items.pop(str(line.get("id")), None)
        if card is None or line.get("row") != k or {x: v for x, v in line.items() if x != "row"} != card[0]:
            bad_lines += 1
        elif k >= len(merged) or not np.array_equal(merged[k], card[1]):
            bad_rows += 1
    if bad_lines or items:
        problems.append(f"pass {pid}: its predictions are not the merge of its cards' predictions "
                        f"{MERGE_RULE}: {bad_lines} line(s) differ, {len(items)} card line(s) not merged")
    if bad_rows or len(merged) != len(lines):
        problems.append(f"pass {pid}: its vectors.npy is not the merge of its cards' vector shards {MERGE_RULE}: "
                        f"{bad_rows} row(s) differ, {len(merged)} rows for {len(lines)} lines")
