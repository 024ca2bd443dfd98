"""Cards this host can give one pass, and the refusal of a campaign that asks for more.

A variant's ``cards`` counts GPUs when its device is a GPU (or ``auto`` on a host with
GPUs) and CPU workers otherwise. GPUs are counted from the driver (NVML on NVIDIA,
amdsmi on AMD), else from this host's torch; CPU workers from the logical cores, and on
CPU the workers split the declared ``[timing] threads``, so ``threads`` (when not 0) must
be at least ``cards``. Only multi-card variants are judged here; a one-card GPU variant
on a host without a GPU is stopped by the pass itself (``DeviceUnavailable``).
Called before a campaign runs (``Orchestrator.prepare``) and by the Plan screen.
"""

from __future__ import annotations

import os

from lab.protocol import ProtocolError


class CardsBeyondHost(ProtocolError):
    """A variant asks for more cards than this host has; one line with the count found."""


def gpu_count() -> tuple[int, str]:
    """(GPUs on this host, how they were counted): NVML, amdsmi, then torch; (0, ...) when none."""
    try:
        import pynvml

        pynvml.nvmlInit()
        n = int(pynvml.nvmlDeviceGetCount())
        if n:
            return n, "NVML"
    except Exception:  # noqa: BLE001, S110 - no NVIDIA driver or library: try the next source
        pass
    try:
        import amdsmi

        amdsmi.amdsmi_init()
        try:
            n = len(amdsmi.amdsmi_get_processor_handles())
        finally:
            amdsmi.amdsmi_shut_down()
        if n:
            return n, "amdsmi"
    except Exception:  # noqa: BLE001, S110 - no AMD driver or library: try the next source
        pass
    try:
        import torch

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return n, f"torch {torch.__version__}"
    except ImportError:
        return 0, "no driver library and no torch"


def host_card_count(device: str = "auto", gpus: tuple[int, str] | None = None,
                    cpu_cores: int | None = None) -> tuple[int, str]:
    """(cards a pass on ``device`` can use here, what was counted), e.g. (2, "2 GPU(s) (NVML)").

    ``device``: a variant's device ("auto", "cpu", "cuda", "rocm", "cuda:N"). ``gpus``
    ((count, how counted)) and ``cpu_cores`` replace the probes when the caller already
    has those facts (the UI's environment facts).
    """
    gpus, how = gpus if gpus is not None else gpu_count()
    if device == "cpu" or (device in ("auto", "") and gpus == 0):
        n = cpu_cores or os.cpu_count() or 1
        return n, f"{n} logical CPU core(s) (CPU workers, at least one thread each)"
    return gpus, f"{gpus} GPU(s) (counted by {how})"


def check_cards_fit_host(variants, threads: int = 0, counter=host_card_count) -> None:
    """Refuse a campaign whose multi-card variants ask for more cards than this host has.

    ``variants``: lab.variants.Variant values; ``threads``: the campaign's ``[timing] threads``
    (0 = torch default); ``counter(device) -> (count, what)``. Raises CardsBeyondHost with
    one line naming the variant, the cards asked, the count found and the fix.
    """
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
