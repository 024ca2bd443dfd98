"""Small real campaigns for the UI tests (helpers shared by test_tui_*.py; no tests here).

``tiny_campaign``: 8 short items then the 8 longest items of the demo corpus, variants
batch 1 and batch 8 at max_length 512, padding "longest", threads=1. Under an
address-space limit (RLIMIT_AS, LocalLauncher) that batch 1 fits and batch 8 on the long
items does not, the batch-8 pass is a real host-memory OOM row with 8 items completed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / ".cache" / "models" / "demo-minilm-20ng"
CORPUS = REPO / "demo" / "corpus" / "comparison.jsonl"

TOML = """
[campaign]
name = "{name}"
question = "Which batch size processes every item within the memory limit at the lowest committed budget?"
deliverables = 1

[corpus]
path = "{corpus}"  # absolute: the campaign folder keeps a copy of this file elsewhere

[model]
path = "{model}"

[quality]
metric = "accuracy"
threshold = 0.1
reference_variant = "batch/batch_size=1"
tolerance = 0.5

[timing]
warmup_items = 2
warmup_passes = 1
repetitions = {repetitions}
seed = 0
threads = 1

[defaults]
max_length = 512
padding = "longest"
device = "cpu"

[[series]]
name = "batch"
factor = "batch_size"
values = {values}

[cost]
gpu = "rtx-4090"
days = 7
lots = 1
"""


def tiny_campaign(folder: Path, name: str = "tui-e2e", values=(1, 8), repetitions: int = 1) -> Path:
    """Write corpus.jsonl (8 short, then the 8 longest items) and <name>.toml in ``folder``."""
    rows = [json.loads(x) for x in CORPUS.read_text(encoding="utf-8").splitlines()]
    pick = ([r for r in rows if r["bucket"] == "short"][:8]
            + sorted((r for r in rows if r["bucket"] == "long"), key=lambda r: -r["n_tokens"])[:8])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in pick),
                                         encoding="utf-8")
    f = folder / f"{name}.toml"
    f.write_text(TOML.format(name=name, model=MODEL, corpus=folder / "corpus.jsonl", repetitions=repetitions, values=list(values)),
                 encoding="utf-8")
    return f


def calibrated_limit(folder: Path) -> int:
    """An address-space limit (bytes) between batch 1's and batch 8's needs on this machine.

    ITERALAB_TEST_AS_LIMIT overrides. Otherwise one unlimited batch-1 pass reports its
    VmPeak (result.json ``process_peak_vm_bytes``); the limit is that plus 48 MiB (batch
    8 x 512 tokens needs ~150 MB more address space). Without that field: 1.22e9 bytes.
    """
    if os.environ.get("ITERALAB_TEST_AS_LIMIT"):
        return int(os.environ["ITERALAB_TEST_AS_LIMIT"])
    from lab.launchers.local import LocalLauncher
    from lab.orchestrator import Orchestrator
    from lab.protocol import load_protocol, lock

    f = tiny_campaign(folder, name="calibrate", values=(1,))
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, folder / "runs", LocalLauncher())
    assert orch.run() == "finished"
    a = orch.journal.attempts()[0]
    assert a["status"] == "ok", a["notes"]
    peak = (a["result"] or {}).get("process_peak_vm_bytes")
    return int(peak + 48 * 2**20) if peak else int(1.22e9)
