"""scripts/gpu_check.py's peak-order check, on the rows of its first run on a lent H200
(2026-12-04): allocated <= reserved <= device used holds on the rows whose window ended; an oom row's
device used is read after the failure and is left out, not counted as a failure."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"


def load():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_order_is_checked_on_ended_windows_and_a_broken_one_counts():
    gpu_check = load()
    ok = {"status": "ok", "peak_allocated_bytes": 130351616, "peak_reserved_bytes": 146800640,
          "device_used_bytes": 1511915520}
    oom = {"status": "oom", "peak_allocated_bytes": 104022407168, "peak_reserved_bytes": 139355750400,
           "device_used_bytes": 110427504640}
    assert gpu_check.peak_order([ok, oom]) == (1, 0)
    broken = {**ok, "device_used_bytes": 100}
    assert gpu_check.peak_order([ok, broken, oom]) == (2, 1)
    assert gpu_check.peak_order([{**ok, "device_used_bytes": None}]) == (0, 0)
