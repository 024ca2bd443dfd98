"""Dynamo's frame counts (lab.passes.compile.DynamoCounters) and their merge over cards
(lab.passes.multicard.compile_counts): read without importing torch._dynamo (0 then: torch.compile
imports it before it compiles a frame), counted for any torch.compile in the process, summed over
cards only when every card recorded them."""
from __future__ import annotations

import subprocess
import sys

from conftest import REPO

from lab.passes.multicard import compile_counts
from lab.passes.records import CardRecord, Phases

PROBE = """
import sys
import torch
from lab.passes.compile import DynamoCounters
c = DynamoCounters()
c.start()
before = c.read(), "torch._dynamo" in sys.modules
f = torch.compile(lambda x: x * 2, backend="eager")
f(torch.ones(2)); f(torch.ones(2)); f(torch.ones(2, dtype=torch.float64))
print(before, c.read())
"""


def test_counters_read_without_importing_dynamo_then_count_every_compiled_frame():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=REPO, timeout=300,
                         check=True).stdout.strip()
    assert out == "((0, 0), False) (2, 0)", out  # one frame, then one recompiled for float64


def _card(rank: int, **counts) -> CardRecord:
    return CardRecord(rank=rank, local_rank=rank, world_size=2, node_rank=0, status="ok", error="",
                      phases_s=Phases(), items_total=1, items_completed=1, positions=[rank], **counts)


def test_card_counts_are_summed_only_when_every_card_recorded_them():
    a = _card(0, compile_phase="why", compile_frames=1, recompiles_warmup=0, recompiles_measured=2,
              graph_breaks_measured=0)
    b = _card(1, compile_phase="why", compile_frames=1, recompiles_warmup=1, recompiles_measured=0,
              graph_breaks_measured=0)
    assert compile_counts([a, b]) == {"compile_phase": "why", "compile_frames": 2, "recompiles_warmup": 1,
                                      "recompiles_measured": 2, "graph_breaks_measured": 0}
    partial = compile_counts([a, _card(1, compile_phase="why")])
    assert partial["compile_frames"] is None and partial["recompiles_measured"] is None
    assert compile_counts([_card(0), _card(1)]) == {"compile_phase": None, "compile_frames": None,
                                                    "recompiles_warmup": None, "recompiles_measured": None,
                                                    "graph_breaks_measured": None}
