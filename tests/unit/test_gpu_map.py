"""Issue 11 part 5: the device-level counter reads torch's GPU, matched by UUID or PCI bus id.

Stand-ins for NVML and amdsmi (this host has no GPU): a host with two GPUs where the pass sees
only physical GPU 1 as cuda:0 (CUDA_VISIBLE_DEVICES=1). By index, the reading would be GPU 0's.
"""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace as NS

import pytest

from lab.memory import peaks
from lab.memory.gpu_map import GpuIdentity, identity_from_props

GPUS = [  # physical order, as NVML / amdsmi enumerate them
    {"uuid": "GPU-aaaaaaaa-0000-0000-0000-000000000000", "bus": "00000000:17:00.0", "used": 30 * 2**30},
    {"uuid": "GPU-bbbbbbbb-1111-1111-1111-111111111111", "bus": "00000000:65:00.0", "used": 2 * 2**30},
]


def fake_nvml() -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.nvmlInit = lambda: None
    m.nvmlDeviceGetCount = lambda: len(GPUS)
    m.nvmlDeviceGetHandleByIndex = lambda i: GPUS[i]
    m.nvmlDeviceGetUUID = lambda h: h["uuid"]
    m.nvmlDeviceGetPciInfo = lambda h: NS(busId=h["bus"].encode())
    m.nvmlDeviceGetMemoryInfo = lambda h: NS(used=h["used"])
    return m


def fake_amdsmi() -> types.ModuleType:
    m = types.ModuleType("amdsmi")
    m.amdsmi_init = m.amdsmi_shut_down = lambda: None
    m.amdsmi_get_processor_handles = lambda: list(GPUS)
    m.amdsmi_get_gpu_device_bdf = lambda h: h["bus"][4:]  # amdsmi writes 0000:65:00.0
    m.amdsmi_get_gpu_device_uuid = lambda h: "ffffffff-0000-0000-0000-" + h["uuid"][-12:]
    m.AmdSmiMemoryType = NS(VRAM="VRAM")
    m.amdsmi_get_gpu_memory_usage = lambda h, kind: h["used"]
    return m


def props_of(gpu: dict, uuid: bool = True) -> NS:
    dom, bus, dev = (int(x, 16) for x in gpu["bus"].split(".")[0].split(":"))
    p = NS(pci_domain_id=dom, pci_bus_id=bus, pci_device_id=dev)
    if uuid:
        p.uuid = gpu["uuid"][4:]  # torch prints it without the GPU- prefix
    return p


@pytest.fixture()
def visible_gpu_1(monkeypatch):
    """torch sees one GPU, cuda:0, which is physical GPU 1."""
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: [props_of(GPUS[1])][i])
    return monkeypatch


def test_identity_from_torch_properties():
    assert identity_from_props(props_of(GPUS[1])) == GpuIdentity("bbbbbbbb-1111-1111-1111-111111111111", "0000:65:00")
    assert identity_from_props(NS()) == GpuIdentity(None, None)


def test_nvml_reading_is_torch_gpu_not_nvml_index_0(visible_gpu_1):
    visible_gpu_1.setitem(sys.modules, "pynvml", fake_nvml())
    assert peaks.nvml_used_bytes("cuda:0") == (2 * 2**30, "")  # GPU 1's, not GPU 0's 30 GiB


def test_nvml_matches_by_pci_bus_id_when_torch_has_no_uuid(visible_gpu_1):
    import torch

    visible_gpu_1.setattr(torch.cuda, "get_device_properties", lambda i: props_of(GPUS[1], uuid=False))
    visible_gpu_1.setitem(sys.modules, "pynvml", fake_nvml())
    assert peaks.nvml_used_bytes("cuda:0") == (2 * 2**30, "")


def test_amdsmi_reading_is_torch_gpu(visible_gpu_1):
    visible_gpu_1.setitem(sys.modules, "amdsmi", fake_amdsmi())
    assert peaks.amdsmi_used_bytes("cuda:0") == (2 * 2**30, "")


def test_unmatched_gpu_is_an_empty_cell_with_the_reason(visible_gpu_1):
    import torch

    visible_gpu_1.setattr(torch.cuda, "get_device_properties",
                          lambda i: NS(uuid="cccccccc", pci_domain_id=0, pci_bus_id=0x99, pci_device_id=0))
    visible_gpu_1.setitem(sys.modules, "pynvml", fake_nvml())
    used, reason = peaks.nvml_used_bytes("cuda:0")
    assert used is None and "no NVML device has torch's UUID cccccccc or PCI address 0000:99:00" in reason
