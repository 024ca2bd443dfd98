"""Parts of a pass's result.json that the raw table reads, as typed records: each is decoded once
per attempt by lab.report.raw_table from the untyped field of lab.passes.records.PassResult that
holds it, and read by attribute. Units: bytes, shares 0-1.
"""

from __future__ import annotations

from typing import Any

import msgspec

from lab.report.pass_row import Number


class CardIdentity(msgspec.Struct, frozen=True, kw_only=True):
    """One card a pass ran on (result.json ``devices``, lab.passes.distributed.card_identity): its
    rank, torch device, model name and UUID (None when not known; a CPU has no UUID) and host."""

    rank: int | str
    device: str | None
    name: str | None = None
    uuid: str | None = None
    hostname: str | None = ""


class CardPeaks(msgspec.Struct, frozen=True, kw_only=True):
    """One card's entry of result.json ``per_card`` (lab.passes.multicard): its rank, torch device
    and its own memory peaks ({lab.report.raw_table.PEAKS name: bytes}; never added across cards)."""

    card: int | str
    device: str | None = None
    peaks: dict[str, Any] | None = None


class EngineMemory(msgspec.Struct, frozen=True, kw_only=True):
    """A vLLM pass's up-front reservation (result.json ``engine_memory``,
    lab.engines.vllm.reservation): ``reserved_bytes`` (None with a reason when not known), the
    ``fraction`` of ``of`` ("host RAM" or "device memory") vLLM was given, its KV cache blocks,
    each engine process's resident bytes at ready ({pid: bytes}) and {figure: why it is empty}."""

    reserved_bytes: Number | None = None
    fraction: Number | None = None
    of: str | None = None
    num_kv_blocks: Number | None = None
    engine_rss_bytes: dict[str, Number | None] | None = None
    reasons: dict[str, str] = {}


class Scheduler(msgspec.Struct, frozen=True):
    """vLLM's scheduler settings as the engine recorded them: ``enforce_eager`` (None: not recorded)."""

    enforce_eager: bool | None = None


class EngineRecord(msgspec.Struct, frozen=True):
    """result.json ``engine`` of a vLLM pass (lab.passes.backends.vllm_backend), the part the raw table reads."""

    scheduler: Scheduler | None = None


class BucketCut(msgspec.Struct, frozen=True):
    """One length bucket of result.json ``truncated_by_bucket``: the share (0-1) of its items cut at
    ``max_length`` (None: not counted)."""

    fraction: Number | None = None
