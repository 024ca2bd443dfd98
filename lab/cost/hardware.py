"""Were the passes measured on the hardware a package prices? The one rule behind every cost shown
from measured times: the decision note, report.html and the Cost screen (lab.report.build.campaign_note)
and ``iteralab compare`` (lab.compare.projection). Standard library only.

The names compared, and where each comes from:

- measured: the name each card of a pass reported (``PassResult.devices``, written in the pass by
  lab.passes.distributed.card_identity). On CUDA ``torch.cuda.get_device_properties(i).name``: the
  driver's ``cudaDeviceProp.name``, the string NVML's ``nvmlDeviceGetName`` and ``nvidia-smi
  --query-gpu=name`` print ("NVIDIA GeForce RTX 4090", "NVIDIA H100 80GB HBM3", "NVIDIA
  A100-SXM4-80GB", "NVIDIA H200"); on ROCm the name HIP gives torch ("AMD Instinct MI300X"). On the
  CPU the card's device is "cpu" and its name the CPU's model (lab.inputs.manifest.cpu_name).
- priced: the catalog row's ``gpu_name`` (the product name: "NVIDIA GeForce RTX 4090") and its
  ``gpu`` id ("rtx-4090"); a user's own catalog may write either shorter ("RTX 4090").

Rule (:func:`same_gpu`): each name is reduced to a :class:`GpuKey`: lower case, every character
other than a letter or a digit a separator; the vendor and family words of :data:`VENDOR_WORDS`
dropped; a memory size ("80GB", "80 GB"), a memory type (HBM3, HBM3e, GDDR6X) and a form factor
(PCIe, SXM4 -> sxm, NVL, OAM) set aside; the rest joined without spaces is the model ("rtx4090",
"h100", "a100", "mi300x", "rtx4090d"). A measured name matches the package when its model equals the
model of the catalog's ``gpu_name`` or of its ``gpu`` id, and no memory size or form factor that both
it and a catalog name state differs (one the device name does not state is not held against it: the
name cannot say). So "NVIDIA GeForce RTX 4090" matches "RTX 4090" and "rtx-4090"; "NVIDIA H100 80GB
HBM3" matches "H100" and "H100 80GB"; "NVIDIA GeForce RTX 4090 D", "NVIDIA H200" and any CPU do not
match "rtx-4090"; "NVIDIA A100-SXM4-40GB" does not match "A100 80GB".

Cards: a pass measures one lot (a lot is one rental; several lots are several rentals each running
the job on its share), so the hardware matches when every pass ran on the lot's ``cards_per_lot``
cards. How the measured cards relate to all the cards paid for (lots x cards per lot) is said beside
(lab.report.decision_note's cards line; compare's cards note).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

CPU = "cpu"
VENDOR_WORDS = frozenset({"nvidia", "geforce", "tesla", "quadro", "amd", "radeon", "instinct", "gpu",
                          "generation"})
"""Words of a product name that name its vendor or family, not the model (dropped before comparing)."""
_MEMORY = re.compile(r"\b(\d+) ?gb\b")
_MEMORY_TYPE = re.compile(r"hbm\d*e?|gddr\d*x?")
_FORM = re.compile(r"pcie|sxm\d*|nvl|oam")


@dataclass(frozen=True)
class GpuKey:
    """A GPU name as the rule compares it: ``model`` ('' when the name holds none), the memory
    sizes it states ("80gb") and its form factors ("pcie", "sxm")."""
    model: str
    memory: frozenset[str]
    form: frozenset[str]


def gpu_key(name: str) -> GpuKey:
    """The :class:`GpuKey` of a device or catalog name (module docstring: the rule)."""
    text = re.sub(r"[^a-z0-9]+", " ", str(name).lower())
    memory = frozenset(f"{m}gb" for m in _MEMORY.findall(text))
    words = _MEMORY.sub(" ", text).split()
    form = frozenset("sxm" if w.startswith("sxm") else w for w in words if _FORM.fullmatch(w))
    model = "".join(w for w in words if w not in VENDOR_WORDS and not _FORM.fullmatch(w)
                    and not _MEMORY_TYPE.fullmatch(w))
    return GpuKey(model, memory, form)


def same_gpu(measured: str, *priced: str) -> bool:
    """Whether a device named ``measured`` is the GPU the catalog names ``priced`` (its ``gpu_name``
    and ``gpu`` id): equal models, no stated memory size or form factor differing (module docstring)."""
    m = gpu_key(measured)
    keys = [gpu_key(p) for p in priced if p]
    if not m.model or m.model not in {k.model for k in keys}:
        return False
    return all(not (k.memory and m.memory and k.memory != m.memory) and not (k.form and m.form and k.form != m.form)
               for k in keys)


@dataclass(frozen=True)
class Measured:
    """What passes ran on, from each pass's cards (device, name): ``gpus``: the distinct GPU names
    ('' for a GPU whose name was not recorded), ``cpus``: the distinct CPU names of cards on the CPU,
    ``cards``: the distinct numbers of cards per pass, ``passes``: passes that recorded their cards."""
    gpus: tuple[str, ...] = ()
    cpus: tuple[str, ...] = ()
    cards: tuple[int, ...] = ()
    passes: int = 0

    @classmethod
    def of(cls, passes: Iterable[Sequence[tuple[str, str | None]]]) -> Measured:
        """From each pass's cards, ``(backend or device, name)`` per card ("cuda", "NVIDIA H200"; "cpu", the CPU's
        model). A pass with no card recorded (it ended before its device was resolved) is left out."""
        gpus: set[str] = set()
        cpus: set[str] = set()
        cards: set[int] = set()
        n = 0
        for cards_of_pass in passes:
            if not cards_of_pass:
                continue
            n += 1
            cards.add(len(cards_of_pass))
            for device, name in cards_of_pass:
                (cpus if str(device).startswith(CPU) else gpus).add(str(name or "").strip())
        return cls(tuple(sorted(gpus)), tuple(sorted(cpus)), tuple(sorted(cards)), n)

    @property
    def on_cpu(self) -> bool:
        """Every pass that recorded its cards ran on the CPU (False when none recorded them)."""
        return bool(self.cpus) and not self.gpus

    @property
    def text(self) -> str:
        """'1 x NVIDIA H200 per pass', '1 or 2 x NVIDIA B200 per pass', 'the CPU', 'no device recorded'.
        The CPU is not named by its model: what matters here is that no GPU ran the passes (its model
        is in the manifest and the raw table's devices_observed), and a line that names no host's CPU
        reads the same on every machine (the offline demo's note and screens)."""
        parts = []
        if self.gpus:
            cards = " or ".join(str(c) for c in self.cards)
            parts.append(f"{cards} x {' + '.join(g or 'GPU of unrecorded name' for g in self.gpus)} per pass")
        if self.cpus:
            parts.append("the CPU")
        return " and ".join(parts) or "no device recorded"

    @property
    def short(self) -> str:
        """How a caveat names it: 'CPU', 'NVIDIA H200', '1 x NVIDIA B200'."""
        if self.on_cpu:
            return "CPU"
        return " + ".join(g or "an unnamed GPU" for g in self.gpus) or "no device recorded"


@dataclass(frozen=True)
class Priced:
    """The GPU a package prices: the catalog row's ``gpu`` id and ``gpu_name``, its ``cards_per_lot``."""
    gpu: str
    gpu_name: str
    cards_per_lot: int

    @property
    def lot(self) -> str:
        """'1 card per lot', '2 cards per lot'."""
        return f"{self.cards_per_lot} card{'s' if self.cards_per_lot != 1 else ''} per lot"

    @property
    def text(self) -> str:
        """'rtx-4090 (NVIDIA GeForce RTX 4090), 1 card per lot'."""
        return f"{self.gpu} ({self.gpu_name}), {self.lot}"


@dataclass(frozen=True)
class HardwareCheck:
    """Measured hardware against the package priced (module docstring: the rule)."""
    measured: Measured
    priced: Priced

    @property
    def other_gpu(self) -> bool:
        """Some pass ran on a GPU the package does not price (another model, or a name not recorded)."""
        return any(not same_gpu(g, self.priced.gpu_name, self.priced.gpu) for g in self.measured.gpus)

    @property
    def cards_differ(self) -> bool:
        """Some GPU pass ran on another number of cards than the package's lot holds."""
        return bool(self.measured.gpus) and any(c != self.priced.cards_per_lot for c in self.measured.cards)

    @property
    def more_cards(self) -> bool:
        """Some GPU pass ran on more cards than a lot holds (its throughput is more than a lot's)."""
        return bool(self.measured.gpus) and any(c > self.priced.cards_per_lot for c in self.measured.cards)

    @property
    def on_cpu(self) -> bool:
        """Passes ran on the CPU, or none recorded its device: priced as a GPU, measured on none."""
        return self.measured.on_cpu or not self.measured.passes

    @property
    def differs(self) -> bool:
        """The times are not the priced package's hardware's: CPU, another GPU or another card count."""
        return self.on_cpu or bool(self.measured.cpus) or self.other_gpu or self.cards_differ

    @property
    def caveat(self) -> str:
        """The short phrase a derived figure carries: 'measured on NVIDIA H200, priced as rtx-4090' or
        'measured on 1 x NVIDIA B200 per pass, priced as b200 (2 cards per lot)'; '' when it matches."""
        if not self.differs:
            return ""
        if self.other_gpu or self.on_cpu or self.measured.cpus:
            return f"measured on {self.measured.short}, priced as {self.priced.gpu}"
        return f"measured on {self.measured.text}, priced as {self.priced.gpu} ({self.priced.lot})"

    def line(self) -> str:
        """'' when the hardware matches; else one sentence: what was measured, what was priced, and that
        the price is the package's while the times are the measured device's."""
        if not self.differs:
            return ""
        measured = ("no pass recorded its device (none got that far)" if not self.measured.passes
                    else self.measured.text)
        whose = ("the CPU's" if self.on_cpu else
                 f"those of {self.measured.text}" if not self.other_gpu else f"the {self.measured.short}'s")
        return (f"Measured: {measured}; priced: {self.priced.text}. The price is that package's, the "
                f"durations are {whose}, so the cost per validated corpus is not that package's until the "
                "campaign is measured on it.")
