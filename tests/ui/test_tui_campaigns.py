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

from lab.orchestration.doctor import Check
from lab.service.environment_facts import EnvironmentFacts, GpuFacts
from tui.widgets.telemetry import GpuReading, HostSample

REPO = Path(__file__).resolve().parents[2]
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
    f.write_text(TOML.format(name=name, model=MODEL, corpus=folder / "corpus.jsonl", repetitions=repetitions,
                             values=list(values)),
                 encoding="utf-8")
    return f


def calibrated_limit(folder: Path) -> int:
    """An address-space limit (bytes) between batch 1's and batch 8's needs on this machine
    (``conftest.as_limit_above`` of one unlimited batch-1 pass's VmPeak; needs the
    ``one_malloc_arena`` fixture). ITERALAB_TEST_AS_LIMIT overrides."""
    if os.environ.get("ITERALAB_TEST_AS_LIMIT"):
        return int(os.environ["ITERALAB_TEST_AS_LIMIT"])
    from conftest import as_limit_above

    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock

    f = tiny_campaign(folder, name="calibrate", values=(1,))
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, folder / "runs", LocalLauncher())
    assert orch.run() == "finished"
    a = orch.journal.attempts()[0]
    assert a.status == "ok", a.notes
    return as_limit_above(a.result.process_peak_vm_bytes)


# ---- deterministic UI fixtures --------------------------------------------------------

SAMPLE = HostSample(cpu_percent=37.5, ram_used_bytes=3 * 2**30, ram_total_bytes=16 * 2**30,
                    gpus=(GpuReading(index=0, name="NVIDIA H100 80GB HBM3", util_percent=87,
                                     mem_used_bytes=12 * 2**30, mem_total_bytes=80 * 2**30),), gpu_note="")
FACTS = EnvironmentFacts(
    backend="cpu", gpu=GpuFacts(driver_note="NVML not available (no NVIDIA driver, or an AMD GPU)"),
    ram_total_bytes=16 * 2**30, ram_available_bytes=12 * 2**30, disk_free_bytes=40 * 2**30,
    disk_path="/srv/runs", cpu_cores=2,
    checks=(Check("docker engine", False, "no engine reachable (FileNotFoundError)",
                  "start dockerd, or run passes with the local launcher", blocking=True),
            Check("gpu", True, "none expected: CPU campaign", "")))
T0 = "2026-09-24T09:00:00+00:00"
CLOCK = 1790240490.0  # 2026-09-24T09:01:30Z


def demo_copy(folder: Path) -> Path:
    """The embedded demo campaign copied into ``folder`` (its @repo/ paths still resolve)."""
    from lab.orchestration.protocol import DEMO_CAMPAIGN

    folder.mkdir(parents=True, exist_ok=True)
    f = folder / "demo.toml"
    f.write_text(DEMO_CAMPAIGN.read_text(encoding="utf-8"), encoding="utf-8")
    return f


def synthetic_running_journal(campaign_file: Path, runs_root: Path) -> Path:
    """Lock ``campaign_file`` and write a journal as an orchestrator would mid-campaign.

    Pass 1 ok (1000/1000 items, 40 it/s, 25 s), pass 2 ok (1000, 80 it/s, 13 s), pass 3
    running and already reported out of memory at 600 items (oom event, row not finished).
    Passes 1 and 2 are validated as the orchestrator validates a finished pass
    (``Orchestrator.validate_attempt`` on predictions written here): pass 1, the reference
    variant, right on 81 % of the items (accepted), pass 2 on 35 % (rejected on accuracy and
    on its gap to the reference). The orchestrator pid is 1 (always alive): the state reads
    "running". Returns the folder.
    """
    from lab.orchestration.journal import Journal
    from lab.orchestration.orchestrator import Orchestrator, campaign_dir_for
    from lab.orchestration.protocol import load_protocol, lock
    from lab.orchestration.schedule import rotated_schedule
    from lab.passes.records import PassResult, Phases

    proto = load_protocol(campaign_file)
    version = lock(proto)
    d = campaign_dir_for(proto, version, runs_root)
    (d / "passes").mkdir(parents=True, exist_ok=True)
    j = Journal(d / "journal.sqlite")
    plan = rotated_schedule(list(proto.variants), proto.timing["repetitions"])
    j.set_plan(plan)
    ends = ["2026-09-24T09:00:25+00:00", "2026-09-24T09:00:40+00:00"]
    starts = [T0, "2026-09-24T09:00:27+00:00", "2026-09-24T09:00:42+00:00"]
    for i, (p, rate) in enumerate(zip(plan[:3], (40.0, 80.0, 95.0), strict=False)):
        pid = p.pass_id
        (d / "passes" / pid).mkdir()
        j.start_attempt(pid, p.seq, 1, p.repetition, p.position, p.variant, starts[i], "local", 1000)
        if i < 2:
            j.update_progress(pid, 1000, rate)
            result = PassResult(pass_id=pid, campaign=proto.name, variant=p.variant.to_json(), start_time=starts[i],
                                end_time=ends[i], status="ok", error="", phases_s=Phases(), items_total=1000,
                                items_completed=1000, predictions_path="predictions.jsonl", exit_code=0)
            _write_predictions(d / "passes" / pid / "predictions.jsonl", proto.corpus_path, (81, 35)[i])
            j.finish_attempt(pid, "ok", ends[i], 0, 1000, result.to_json(), "")
        else:
            j.update_progress(pid, 600, rate)
            j.add_event(pid, "oom", {"items_done": 600, "message": "DefaultCPUAllocator: can't allocate memory"})
            (d / "passes" / pid / "log.txt").write_text(
                "phase model_load end 2.41 s\nphase warmup end 0.88 s\nprogress 600/1000\n"
                "RuntimeError: DefaultCPUAllocator: can't allocate memory\n")
    orch = Orchestrator(d, proto, None, version)
    for p in plan[:2]:
        orch.validate_attempt(p.pass_id)
    orch.journal.close()
    j.set_control("state", "running")
    import psutil  # a live orchestrator: pid 1 with its own start time (liveness is pid + start time)

    j.set_control("orchestrator", {"pid": 1, "process_create_time": psutil.Process(1).create_time(),
                                   "started": T0, "launcher": "local"})
    j.close()
    return d


def _write_predictions(path: Path, corpus: Path, right_percent: int) -> None:
    """A predictions file over every item of ``corpus``: item k's label when k % 100 <
    ``right_percent``, else the next label in sorted order (always wrong)."""
    items = [json.loads(line) for line in corpus.read_text().splitlines() if line.strip()]
    labels = sorted({it["label"] for it in items})
    wrong = {a: b for a, b in zip(labels, labels[1:] + labels[:1], strict=True)}
    path.write_text("".join(json.dumps({"id": it["id"], "pred": it["label"] if k % 100 < right_percent
                                        else wrong[it["label"]], "prob": 0.9}) + "\n"
                            for k, it in enumerate(items)))


def finished_campaign(folder: Path) -> Path:
    """A real finished campaign (batch 1 and 8, one repetition, 16 items, no limit); reported."""
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock

    f = tiny_campaign(folder, name="tui-finished")
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, folder / "runs", LocalLauncher())
    assert orch.run() == "finished"
    return f
