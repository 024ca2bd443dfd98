"""Which NVML / amdsmi device is torch's ``cuda:N``: matched by UUID or PCI bus id, never by index.

With ``CUDA_VISIBLE_DEVICES=1`` (or a container given one GPU of several, or
``HIP_VISIBLE_DEVICES``), torch's ``cuda:0`` is physical GPU 1 while NVML and amdsmi count
every GPU of the host: index 0 there is another GPU. The identity torch reports
(``torch.cuda.get_device_properties(i).uuid`` and ``pci_domain_id/pci_bus_id/pci_device_id``)
is matched against each management handle's UUID and PCI address.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.facts.errors import LabError


class GpuNotMatched(LabError, LookupError):
    """No management-library device has torch's device UUID or PCI address."""


@dataclass(frozen=True)
class GpuIdentity:
    """``uuid``: lower-case hex with dashes, no "GPU-" prefix (None if unknown);
    ``pci``: "dddd:bb:dd" lower-case hex (None if unknown)."""

    uuid: str | None
    pci: str | None


def _norm_uuid(u) -> str | None:
    if u is None:
        return None
    u = u.decode() if isinstance(u, bytes) else str(u)
    u = u.strip().lower()
    for prefix in ("gpu-", "mig-"):
        if u.startswith(prefix):
            u = u[len(prefix):]
    return u or None


def _norm_pci(text) -> str | None:
    """'00000000:01:00.0' / '0000:01:00.0' -> '0000:01:00' (domain 4 hex digits)."""
    if text is None:
        return None
    t = (text.decode() if isinstance(text, bytes) else str(text)).strip().lower()
    parts = t.split(".")[0].split(":")
    if len(parts) != 3:
        return None
    try:
        dom, bus, dev = (int(p, 16) for p in parts)
    except ValueError:
        return None
    return f"{dom:04x}:{bus:02x}:{dev:02x}"


def identity_from_props(props) -> GpuIdentity:
    """Identity from a torch device-properties object (attributes missing -> None)."""
    pci = None
    if all(hasattr(props, a) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
        pci = f"{int(props.pci_domain_id):04x}:{int(props.pci_bus_id):02x}:{int(props.pci_device_id):02x}"
    return GpuIdentity(_norm_uuid(getattr(props, "uuid", None)), pci)


def torch_identity(device: str) -> GpuIdentity:
    import torch

    index = torch.device(device).index or 0
    return identity_from_props(torch.cuda.get_device_properties(index))


def nvml_handle(pynvml, ident: GpuIdentity):
    """The NVML handle whose UUID (else PCI bus id) equals ``ident``. Raises GpuNotMatched."""
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        if ident.uuid and _norm_uuid(pynvml.nvmlDeviceGetUUID(h)) == ident.uuid:
            return h
        if ident.pci and _norm_pci(pynvml.nvmlDeviceGetPciInfo(h).busId) == ident.pci:
            return h
    raise GpuNotMatched(f"no NVML device has torch's UUID {ident.uuid} or PCI address {ident.pci}")


def amdsmi_handle(amdsmi, ident: GpuIdentity):
    """The amdsmi processor handle whose PCI address (else UUID) equals ``ident``. Raises GpuNotMatched."""
    for h in amdsmi.amdsmi_get_processor_handles():
        if ident.pci and _norm_pci(amdsmi.amdsmi_get_gpu_device_bdf(h)) == ident.pci:
            return h
        if ident.uuid and _norm_uuid(amdsmi.amdsmi_get_gpu_device_uuid(h)) == ident.uuid:
            return h
    raise GpuNotMatched(f"no amdsmi device has torch's PCI address {ident.pci} or UUID {ident.uuid}")
