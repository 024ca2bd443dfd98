"""Cards this host can give one pass, and the refusal of a campaign that asks for more.

A variant's ``cards`` counts GPUs when its device is a GPU (or ``auto`` on a host with
GPUs) and CPU workers otherwise. GPUs are counted as the lock's device check counts them
(``lab.facts.host.gpu_count``); CPU workers from the logical cores, and on
CPU the workers split the declared ``[timing] threads``, so ``threads`` (when not 0) must
be at least ``cards``. Only multi-card variants are judged here; a GPU variant on a host
without that GPU is the device check's matter (``lab.orchestration.preflight.check_devices``).
Called at lock (``lab.orchestration.preflight`` check "cards", also listed by the Plan screen) and again
before a campaign runs (``Orchestrator.prepare``: the run may be on another host).
"""

from __future__ import annotations

import os

from lab.facts.errors import ProtocolError
from lab.facts.host import gpu_count


class CardsBeyondHost(ProtocolError):
    """A variant asks for more cards than this host has; one line with the count found."""


def host_card_count(device: str = "auto") -> tuple[int, str]:
    """(cards a pass on ``device`` can use here, what was counted), e.g. (2, "2 GPU(s) (NVML ...)").

    ``device``: a variant's device ("auto", "cpu", "cuda", "rocm", "cuda:N"). GPUs are
    counted by ``lab.facts.host.gpu_count`` (torch, else NVML), CPU workers by logical cores.
    """
    gpus, how = gpu_count()
    if device == "cpu" or (device in ("auto", "") and gpus == 0):
        n = os.cpu_count() or 1
        return n, f"{n} logical CPU core(s) (CPU workers, at least one thread each)"
    return gpus, f"{gpus} GPU(s) (counted by {how})"


def check_cards_fit_host(variants, threads: int = 0, counter=None) -> None:
    """Refuse a campaign whose multi-card variants ask for more cards than this host has.

    ``variants``: lab.inputs.variants.Variant values; ``threads``: the campaign's ``[timing] threads``
    (0 = torch default); ``counter(device) -> (count, what)``, default host_card_count. Raises CardsBeyondHost with
    one line naming the variant, the cards asked, the count found and the fix.
    """
    counter = counter or host_card_count
    for v in variants:
        if v.cards <= 1:
            continue
        n, what = counter(v.device)
        name = v.name or v.variant_id
        if v.cards > n:
            raise CardsBeyondHost(f"variant {name} asks for {v.cards} cards but this host has {what}; "
                                  f"lower cards to {n} or fewer, or run the campaign on a host with "
                                  f"{v.cards} cards")
        if "CPU" in what and threads and v.cards > threads:
            raise CardsBeyondHost(f"variant {name}: {v.cards} CPU workers split [timing] threads = {threads}; "
                                  f"declare threads >= {v.cards} (each worker gets threads // cards)")
