"""Multi-card passes: the shard rule, the torchrun command line, thread split, card identity.

A pass over N cards (``Variant.cards = N``) runs as N worker processes started by torch's
own launcher, ``python -m torch.distributed.run`` (torchrun), one worker per card:
backend ``nccl`` on CUDA (RCCL on ROCm builds), ``gloo`` on CPU. The worker is
``lab.passes.worker``; ``lab.passes.multicard`` starts torchrun and merges the cards'
outputs into one pass. Every launcher (local process, container) runs the same command,
built here by :func:`torchrun_command`.

Shard rule (deterministic, depends only on the corpus, the tokenizer, ``max_length``,
``bucketing`` and N):

- without bucketing: contiguous blocks in corpus order, sizes differing by at most one
  item: worker ``r`` of ``N`` takes positions ``[r*n//N, (r+1)*n//N)``;
- with bucketing: balanced by token count (truncated at ``max_length``): items taken
  longest first (ties by corpus position) and each given to the worker holding the fewest
  tokens so far (ties: lowest rank), the classic longest-processing-time rule. Each shard
  keeps corpus order; the worker then sorts its own shard by length as a one-card pass does.

Source of the rule: seed/SPEC section 5, "each on a shard, timed from a common barrier to
the last shard's predictions"; issue 14 (shards balanced by token count with bucketing).
"""

from __future__ import annotations

import heapq
import os
import sys
from pathlib import Path

from lab.passes.events import EventKind

BACKENDS = {"cpu": "gloo", "cuda": "nccl", "rocm": "nccl"}


def shard_positions(lengths: list[int], world_size: int, bucketing: bool) -> list[list[int]]:
    """Corpus positions of each worker's shard, each list ascending (corpus order).

    ``lengths``: token count of each corpus item (only used with ``bucketing``).
    Returns ``world_size`` lists that partition ``range(len(lengths))`` (a shard may be
    empty when there are fewer items than workers). Raises ValueError for world_size < 1.
    """
    if world_size < 1:
        raise ValueError(f"world_size {world_size} must be >= 1")
    n = len(lengths)
    if not bucketing:
        return [list(range(r * n // world_size, (r + 1) * n // world_size)) for r in range(world_size)]
    heap = [(0, r) for r in range(world_size)]  # (tokens so far, rank)
    shards: list[list[int]] = [[] for _ in range(world_size)]
    for i in sorted(range(n), key=lambda i: (-lengths[i], i)):
        tokens, r = heapq.heappop(heap)
        shards[r].append(i)
        heapq.heappush(heap, (tokens + lengths[i], r))
    return [sorted(s) for s in shards]


def threads_per_worker(declared_threads: int, workers_on_host: int) -> int:
    """CPU threads of one worker: the declared threads split evenly (``threads // workers``).

    The campaign's declared ``threads`` is for the whole pass, not per worker: a pass over N
    cards on one host gives each worker ``threads // N`` (over several hosts, threads //
    the workers on that host). Each worker sets this count, and the declared-value check
    (lab.passes.observed.require_honoured) compares the worker's torch thread count with it;
    the raw table's ``observed_threads`` is one worker's count, the split stated in its notes.
    ``declared_threads`` 0 means torch's default, taken here as the host's logical cores.
    At least 1. The remainder, if any, stays unused (the result records each worker's count).
    """
    total = declared_threads or (os.cpu_count() or 1)
    return max(1, total // max(1, workers_on_host))


def torchrun_command(spec_path: str | Path, nproc_per_node: int, nnodes: int = 1, node_rank: int = 0,
                     rdzv_endpoint: str = "", rdzv_id: str = "", local_addr: str = "",
                     python: str = sys.executable) -> list[str]:
    """argv that starts the workers of one pass under torchrun.

    One host (``nnodes`` 1): ``--standalone`` (a private c10d rendezvous on a free local
    port). Several hosts: ``--nnodes N --node_rank K --rdzv_backend c10d --rdzv_endpoint
    HOST:PORT --rdzv_id ID`` on every host, the same endpoint everywhere (a port on the
    node-0 host; ``is_host`` is set on node 0 so it serves the rendezvous store).
    ``local_addr``: the address this node is reached at (torchrun ``--local_addr``); on one
    host 127.0.0.1, so workers never depend on resolving the host name.
    ``--max_restarts 0``: a failed worker ends the pass (never a silent retry, SPEC 3.6).
    Raises ValueError when several hosts are asked without an endpoint.
    """
    cmd = [python, "-u", "-m", "torch.distributed.run", "--nproc_per_node", str(nproc_per_node),
           "--max_restarts", "0", "--monitor_interval", "0.2"]
    if nnodes == 1 and not rdzv_endpoint:
        cmd += ["--standalone", "--nnodes", "1"]
        local_addr = local_addr or "127.0.0.1"  # a container without network may not resolve its own name
    else:
        if not rdzv_endpoint:
            raise ValueError("a pass over several hosts needs --rdzv-endpoint HOST:PORT (a port on node 0)")
        cmd += ["--nnodes", str(nnodes), "--node_rank", str(node_rank), "--rdzv_backend", "c10d",
                "--rdzv_endpoint", rdzv_endpoint, "--rdzv_id", rdzv_id or "iteralab",
                "--rdzv_conf", f"is_host={'true' if node_rank == 0 else 'false'}"]
    if local_addr:
        cmd += ["--local_addr", local_addr]
    return cmd + ["-m", "lab.passes.worker", str(spec_path)]


def card_identity(device: str, rank: int) -> dict:
    """What one worker observed about its card: rank, device, name, UUID, host, pid.

    CUDA/ROCm: name and UUID from ``torch.cuda.get_device_properties``; CPU: the CPU model
    name, no UUID (``uuid_reason`` says why). Used in the raw table's ``devices_observed``.
    """
    import socket

    from lab.inputs.manifest import cpu_name

    out = {"rank": rank, "device": device, "hostname": socket.gethostname(), "pid": os.getpid(),
           "name": None, "uuid": None}
    if device.startswith("cuda"):
        import torch

        props = torch.cuda.get_device_properties(device)
        out["name"] = props.name
        uuid = getattr(props, "uuid", None)
        out["uuid"] = str(uuid) if uuid is not None else None
        if uuid is None:
            out["uuid_reason"] = "torch device properties carry no uuid in this build"
    else:
        out["name"] = cpu_name()
        out["uuid_reason"] = "CPU worker: no device UUID"
    return out


class ProgressTally:
    """Items done across the cards of one pass, from events carrying ``rank``.

    ``update(event)`` returns the items done over all cards (each card's latest count,
    summed: items are counted once each, unlike memory), or None for an event that
    says nothing about progress. Events without ``rank`` (one-card passes) pass through.
    """

    def __init__(self) -> None:
        self.by_rank: dict[int, int] = {}

    def update(self, ev: dict) -> int | None:
        kind = ev.get("event")
        key = ("done" if kind == EventKind.PROGRESS
               else "items_done" if kind in (EventKind.OOM, EventKind.ERROR) else None)
        if key is None or key not in ev:
            return None
        if "rank" not in ev:
            return int(ev[key])
        self.by_rank[int(ev["rank"])] = int(ev[key])
        return sum(self.by_rank.values())
