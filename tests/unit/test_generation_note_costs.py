"""A generation campaign's decision note prices output tokens at the load its package processes at
the measured throughput, the division compare uses at the user's load (lab.report.decision_note.
generation_costs), never the package over one corpus's output tokens (issue 35 item 4: 785714.29 USD
per million output tokens for every variant, whatever its throughput)."""

from __future__ import annotations

import re
from decimal import Decimal

from lab.cost.sizing import capacity_items
from lab.report.decision_note import decision_note, generation_costs
from lab.report.summary import VariantSummary

CAMPAIGN = {"name": "gen", "question": "q", "deadline": None, "deliverables": 1}
PRICING = {"catalog_path": None, "gpu": "rtx-4090", "days": 7, "lots": 1, "window_start": None,
           "window_end": None, "tz": None}
COSTS = re.compile(r"- Cost per item: (\S+) USD; per million output tokens: (\S+) USD \(at the package's load: "
                   r"(\d+) items, (\d+) output tokens")


def generator(vid: str, seconds: float) -> VariantSummary:
    return VariantSummary(variant_id=vid, label=vid, series=1, durations_s=[seconds], median_s=seconds,
                          min_s=seconds, max_s=seconds, successes=1, failures=0, accepted_passes=1,
                          quality_verdict="accepted", feasible=True, infeasible_reason="",
                          does_not_distinguish=False, items_total=20, output_tokens=140,
                          output_tokens_per_s_median=140 / seconds)


def test_per_million_output_tokens_follows_the_throughput():
    note = decision_note([generator("fast", 2.0), generator("slow", 20.0)], CAMPAIGN, PRICING)
    found = COSTS.findall(note)
    assert len(found) == 2, note
    (fast_item, fast_million, fast_load, fast_tokens), (_, slow_million, _, _) = found
    fast, slow = (float(x.replace(",", "")) for x in (fast_million, slow_million))
    assert abs(slow - 10 * fast) < 0.1  # 10x slower: 10x the cost per million output tokens (rounded to cents)
    assert "785714.29" not in note and "785,714.29" not in note  # 110 USD over the corpus's 140 tokens
    assert int(fast_load) == capacity_items(168, 1, 20 / 2.0) == 168 * 3600 * 10
    assert int(fast_tokens) == round(140 * int(fast_load) / 20)
    per_item, per_million = generation_costs(Decimal("110.00"), int(fast_load), int(fast_tokens))
    assert fast_item == str(per_item) and fast_million.replace(",", "") == f"{per_million:.2f}"
