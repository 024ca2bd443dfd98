"""Issue 19 part 6, the rules: the cgroup CPU quota (v1 and v2, fake trees), the one starvation
rule, GPU clocks and throttle reasons through the stand-in NVML, TF32 declared vs observed, the
environment allow-list, and how starved passes reach the summary's pairs and the decision note.
The real passes are in tests/integration/test_pass_conditions.py."""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from lab.passes import conditions as cond
from lab.passes.conditions import WindowConditions, cpu_quota, gpu_state, starvation


def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def test_cgroup_v2_quota_is_the_smallest_cpu_max_up_to_the_root(tmp_path):
    proc = tmp_path / "proc_cgroup"
    proc.write_text("0::/system.slice/pass.scope\n")
    root = tmp_path / "cg"
    _tree(root, {"system.slice/pass.scope/cpu.max": "max 100000\n", "system.slice/cpu.max": "15000 100000\n"})
    q, where = cpu_quota(root, proc)
    assert q == 0.15 and where == f"cgroup v2 cpu.max at {root / 'system.slice'}"
    (root / "system.slice/cpu.max").write_text("max 100000\n")
    q, why = cpu_quota(root, proc)
    assert q is None and why.startswith("not in a CPU quota (cgroup v2 cpu.max: none set from")


def test_cgroup_v2_inside_a_container_reads_its_own_root(tmp_path):
    proc = tmp_path / "proc_cgroup"
    proc.write_text("0::/\n")  # cgroup namespace: the container's cgroup is the mount's root
    _tree(tmp_path / "cg", {"cpu.max": "200000 100000\n"})
    assert cpu_quota(tmp_path / "cg", proc)[0] == 2.0


def test_cgroup_v1_quota_and_no_quota(tmp_path):
    proc = tmp_path / "proc_cgroup"
    proc.write_text("4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n0::/\n")
    root = tmp_path / "cg"
    # a container: its path under the host's hierarchy is not in its mount, whose root is its cgroup
    _tree(root, {"cpu,cpuacct/cpu.cfs_quota_us": "50000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"})
    q, where = cpu_quota(root, proc)
    assert q == 0.5 and "cgroup v1 cpu.cfs_quota_us" in where
    (root / "cpu,cpuacct/cpu.cfs_quota_us").write_text("-1\n")
    q, why = cpu_quota(root, proc)
    assert q is None and "not in a CPU quota" in why
    assert cpu_quota(root, tmp_path / "absent")[1].startswith("no CPU quota read:")


def test_the_starvation_rule():
    base = {"device": "cpu", "cpus_needed": 2, "cpus_available": 2, "cpu_share": 0.9, "cpu_time_s": 1.8,
            "wall_s": 1.0, "steal_share": 0.0}
    assert starvation(base) == ""
    assert "2 CPU(s) needed" in starvation({**base, "cpus_available": 1})  # threads 2 on 1 CPU
    assert "0.15 available" in starvation({**base, "cpus_needed": 1, "cpus_available": 0.15})  # quota
    assert "CPU share 0.30 < 0.5" in starvation({**base, "cpu_share": 0.3})  # competing load
    assert "CPU share 0.496 < 0.5" in starvation({**base, "cpu_share": 0.496})  # never "0.50 < 0.5"
    assert starvation({**base, "cpu_share": 0.3, "device": "cuda:0"}) == ""  # a GPU's host waits by design
    assert "stole 20%" in starvation({**base, "steal_share": 0.2})
    none = {k: None for k in base}
    assert starvation(none) == ""  # not measured proves nothing
    assert cond.cpu_share(0.5, 1.0, 2, 1.0) == 0.5 and cond.cpu_share(None, 1.0, 1, 1) is None


NVML_GPUS = [{"uuid": "GPU-aaaaaaaa-0000-0000-0000-000000000000", "bus": "00000000:17:00.0"},
             {"uuid": "GPU-bbbbbbbb-1111-1111-1111-111111111111", "bus": "00000000:65:00.0"}]


def fake_nvml(state: dict) -> types.ModuleType:
    """The stand-in NVML of tests/unit/test_gpu_map.py, with clocks and clock event reasons."""
    m = types.ModuleType("pynvml")
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM = 1, 2
    m.nvmlInit = lambda: None
    m.nvmlDeviceGetCount = lambda: len(NVML_GPUS)
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetUUID = lambda h: NVML_GPUS[h]["uuid"]
    m.nvmlDeviceGetPciInfo = lambda h: NS(busId=NVML_GPUS[h]["bus"].encode())
    m.nvmlDeviceGetClockInfo = lambda h, kind: state[h]["sm" if kind == 1 else "mem"]
    m.nvmlDeviceGetMaxClockInfo = lambda h, kind: 1980
    m.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: state[h]["reasons"]
    return m


@pytest.fixture()
def gpu_1_as_cuda0(monkeypatch):
    import torch

    dom, bus, dev = (int(x, 16) for x in NVML_GPUS[1]["bus"].split(".")[0].split(":"))
    props = NS(uuid=NVML_GPUS[1]["uuid"][4:], pci_domain_id=dom, pci_bus_id=bus, pci_device_id=dev)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(torch.version, "hip", None)
    state = {0: {"sm": 600, "mem": 800, "reasons": 0x1}, 1: {"sm": 1980, "mem": 2619, "reasons": 0x1}}
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(state))
    return state


def test_gpu_clocks_and_throttle_reasons_of_torchs_gpu(gpu_1_as_cuda0):
    s = gpu_state("cuda:0")  # physical GPU 1, matched by UUID, never NVML index 0
    assert s == {"sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "sm_clock_max_mhz": 1980,
                 "throttle_reasons": ["gpu_idle"], "throttled": False, "source": "NVML"}
    gpu_1_as_cuda0[1].update(sm=1410, reasons=0x20 | 0x4)
    s = gpu_state("cuda:0")
    assert s["throttle_reasons"] == ["sw_power_cap", "sw_thermal_slowdown"] and s["throttled"] is True
    assert gpu_state("cpu") == {"reason": "cpu pass: no GPU clocks"}


def test_a_throttled_window_reaches_the_raw_table_cells_and_notes(gpu_1_as_cuda0):
    from lab.report.condition_cells import condition_cells

    w = WindowConditions("cuda:0", 4)
    w.start()
    sum(range(200_000))
    gpu_1_as_cuda0[1].update(sm=1200, reasons=0x40)  # hardware thermal slowdown during the window
    rec = w.stop(0.5)
    assert rec["gpu_start"]["sm_clock_mhz"] == 1980 and rec["gpu_end"]["sm_clock_mhz"] == 1200
    assert rec["cpus_needed"] == 1 and rec["cpu_time_s"] is not None
    cells, notes = condition_cells(rec, running=False)
    assert cells["gpu_sm_clock_mhz_start"] == 1980 and cells["gpu_sm_clock_mhz_end"] == 1200
    assert (cells["gpu_throttle_start"], cells["gpu_throttle_end"]) == ("gpu_idle", "hw_thermal_slowdown")
    assert any(n.startswith("GPU throttled in the window: start gpu_idle, end hw_thermal_slowdown") for n in notes)


def test_a_cpu_pass_has_empty_gpu_cells_with_the_reason():
    from lab.report.condition_cells import condition_cells

    w = WindowConditions("cpu", 1)
    w.start()
    rec = w.stop(0.01)
    cells, notes = condition_cells(rec, running=False)
    assert cells["gpu_sm_clock_mhz_start"] is None and cells["gpu_throttle_end"] is None
    assert "empty GPU clock cells: cpu pass: no GPU clocks" in notes
    assert condition_cells(None, running=False)[1] == [
        "window conditions not recorded: the pass ended before its measured window (or its runner predates them)"]


def test_an_empty_engine_cpu_time_always_has_its_reason():
    """A vLLM pass recorded before the engine's processes were read (no ``engine_processes``) has
    an empty engine_cpu_time_s with a note saying why; an engine read at both ends gives a value
    and no such note; a transformers pass (the engine is the pass process) needs none."""
    from lab.report.condition_cells import condition_cells

    w = WindowConditions("cpu", 1)
    w.start()
    old = w.stop(0.01)  # what a runner without the engine reading wrote: no engine keys
    assert "engine_cpu_time_s" not in old and "engine_processes" not in old
    cells, notes = condition_cells(old, running=False, own_engine=True)
    assert cells["engine_cpu_time_s"] is None
    assert [n for n in notes if n.startswith("empty engine_cpu_time_s")] == [
        "empty engine_cpu_time_s (cpu_share is the pass process's alone): the engine's processes were not read; "
        "the runner that wrote this pass predates that reading"]
    assert not [n for n in condition_cells(old, running=False)[1] if "engine_cpu_time_s" in n]
    w = WindowConditions("cpu", 1, engine_pid=os.getpid())
    w.start()
    sum(range(100_000))
    read = w.stop(0.01)
    cells, notes = condition_cells(read, running=False, own_engine=True)
    assert cells["engine_cpu_time_s"] is not None and not [n for n in notes if "engine_cpu_time_s" in n]


def test_tf32_on_an_fp32_cuda_pass_is_not_honoured():
    from lab.inputs.variants import Variant
    from lab.passes.observed import NotHonoured, require_honoured

    v = Variant(batch_size=1, precision="fp32", device="cuda")
    obs = {"dtype": "float32", "device": "cuda:0", "attention": "sdpa", "threads_declared": 0, "threads": 4,
           "compile": False, "quantization": "none", "tf32_matmul_declared": False, "tf32_matmul": False,
           "float32_matmul_precision": "highest"}
    require_honoured(v, obs, "cuda:0")
    with pytest.raises(NotHonoured, match="precision fp32 declared, cuBLAS matmuls allowed as TF32"):
        require_honoured(v, {**obs, "tf32_matmul": True, "float32_matmul_precision": "high"}, "cuda:0")
    require_honoured(Variant(batch_size=1, precision="fp32", device="cpu"),
                     {**obs, "device": "cpu", "tf32_matmul": True}, "cpu")  # recorded, no TF32 on a CPU


def test_the_environment_that_changes_results_is_recorded(monkeypatch):
    from lab.inputs.manifest import ENV_ALLOWED, pass_environment

    monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1")
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
    monkeypatch.setenv("HF_TOKEN", "secret")
    env = pass_environment()
    assert env["TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"] == "1" and env["NVIDIA_TF32_OVERRIDE"] == "0"
    assert "HF_TOKEN" not in env and set(env) <= set(ENV_ALLOWED)


def _row(pid: str, vid: str, s: float, starved: bool) -> dict:
    return {"pass_id": pid, "variant_id": vid, "variant_label": f"batch {vid}", "variant_name": f"batch/{vid}",
            "series": "batch", "status": "ok", "measured_s": s, "items_per_s": 1.0, "starved": starved,
            "starved_reason": "2 CPU(s) needed (torch threads 2), 1 available (affinity 1, no quota)" if starved
            else None, "corpus_accepted": True, "metric": 0.9, "notes": ""}


def test_starved_passes_are_named_in_the_summary_pairs_and_decision_note():
    from lab.report.decision_note import decision_note
    from lab.report.summary import VariantSummary, summarize

    rows = [_row("p1", "a", 17.1, True), _row("p2", "a", 16.0, True), _row("p3", "b", 1.27, False),
            _row("p4", "b", 1.30, False)]
    a, b = summarize(rows)
    assert [p.pass_id for p in a.starved_passes] == ["p1", "p2"] and b.starved_passes == ()
    assert "starved pass(es) among these durations: p1, p2" in a.pairs[0].verdict.reason
    assert b.pairs[0].starved_passes == ("p1", "p2")  # the faster side's pair names them too
    assert VariantSummary.from_json(a.to_json()) == a
    first = json.loads(json.dumps(a.to_json()))["starved_passes"][0]
    assert first == {"pass_id": "p1", "reason": a.starved_passes[0].reason}  # summary.json's shape kept
    # summary.json keeps its shape: a pair is {"other", the PairVerdict's fields, "starved_passes" when any}
    pair_json = json.loads(json.dumps(b.to_json()))["pairs"][0]
    assert list(pair_json) == ["other", "n_a", "n_b", "ranges_disjoint", "u_a", "p_value", "distinguished",
                               "reason", "starved_passes"] and pair_json["starved_passes"] == ["p1", "p2"]
    assert "starved_passes" not in summarize(rows[2:] + [_row("p5", "a", 17.0, False)])[0].to_json()["pairs"][0]
    assert VariantSummary.from_json(json.loads(json.dumps(b.to_json()))) == b
    note = decision_note([a, b], {"name": "t"}, {})
    assert "**Starved passes** (lab.passes.conditions.starvation): `p1`: 2 CPU(s) needed" in note
    assert "starved pass(es) among these durations: p1, p2" in note


def test_unreadable_quota_files_are_no_quota_never_an_error(tmp_path):
    proc = tmp_path / "proc_cgroup"
    proc.write_text("0::/a\n")
    _tree(tmp_path / "cg", {"a/cpu.max": "\n", "cpu.max": "garbage 100000\n"})
    q, why = cpu_quota(tmp_path / "cg", proc)
    assert q is None and "not in a CPU quota" in why


def test_the_results_screen_says_which_passes_were_starved():
    from lab.report.summary import summarize
    from tui.screens.results_screen import render_summary

    a, b = summarize([_row("p1", "a", 17.1, True), _row("p2", "a", 16.0, False), _row("p3", "b", 1.27, False),
                      _row("p4", "b", 1.30, False)])
    text = render_summary([a, b])
    assert "[red]starved:[/red] starved pass(es) among these durations: p1 " in text
    assert text.count("starved:") == 1  # variant b had none


@pytest.mark.parametrize("threads, workers, affinity, quota, cpu_s, share, starved", [
    (2, 1, 2, None, 1.6, 0.8, False),      # 2 threads busy 80 % of a 1 s window on 2 free CPUs
    (2, 1, 2, None, 0.6, 0.3, True),       # the same threads got 0.6 s: others took the CPUs
    (1, 1, 2, 0.15, 0.15, 1.0, True),      # a 0.15-CPU quota: the share is full, the quota starves it
    (1, 2, 2, None, 0.9, 0.9, False),      # a worker of a 2-card pass, 1 thread of 2 CPUs shared by 2
    (2, 2, 2, None, 0.9, 0.9, True),       # 2 workers x 2 threads on 2 CPUs: 4 needed
])
def test_window_record_share_and_verdict(monkeypatch, threads, workers, affinity, quota, cpu_s, share, starved):
    clock = iter([10.0, 10.0 + cpu_s])
    monkeypatch.setattr(cond.time, "process_time", lambda: next(clock))
    monkeypatch.setattr(cond, "cpu_affinity", lambda: (affinity, "test"))
    monkeypatch.setattr(cond, "cpu_quota", lambda: (quota, "test quota" if quota else "not in a CPU quota (test)"))
    monkeypatch.setattr(cond, "proc_stat_ticks", lambda: (0, 100))
    w = WindowConditions("cpu", threads, workers)
    w.start()
    rec = w.stop(1.0)
    assert rec["cpu_share"] == share and rec["starved"] is starved, rec
    assert rec["cpus_needed"] == threads * workers and rec["cpus_available"] == min(affinity, quota or affinity)


BUSY = "import time\nt = time.process_time()\nwhile time.process_time() - t < 30: pass\n"
# the engine's root process starts a busy descendant and is busy itself (vLLM: the worker and its engine core)
ENGINE = ("import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', sys.argv[1]])\n" + BUSY)


def test_an_engine_in_its_own_processes_counts_their_cpu_time_in_the_window(monkeypatch):
    import subprocess
    import time

    import psutil

    monkeypatch.setattr(cond, "cpu_affinity", lambda: (1, "test"))
    monkeypatch.setattr(cond, "cpu_quota", lambda: (None, "not in a CPU quota (test)"))
    engine = subprocess.Popen([sys.executable, "-c", ENGINE, BUSY])
    try:
        deadline = time.monotonic() + 30
        while len(psutil.Process(engine.pid).children()) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        with_engine, alone = WindowConditions("cpu", 1, engine_pid=engine.pid), WindowConditions("cpu", 1)
        def engine_cpu() -> float:
            procs = [psutil.Process(engine.pid), *psutil.Process(engine.pid).children(recursive=True)]
            return sum(sum(p.cpu_times()[:2]) for p in procs)

        with_engine.start(), alone.start()
        t, before = time.perf_counter(), engine_cpu()
        # the pass process waits on its engine, as a vLLM client does: at least 1 s, and on a loaded
        # host until the engine's processes got 0.3 s of CPU (at most 15 s)
        time.sleep(1.0)
        while engine_cpu() - before < 0.3 and time.perf_counter() - t < 15:
            time.sleep(0.1)
        wall = time.perf_counter() - t
        rec, own = with_engine.stop(wall), alone.stop(wall)
    finally:
        for p in psutil.Process(engine.pid).children(recursive=True):
            p.kill()
        engine.kill()
        engine.wait()
    assert rec["engine_processes"] == 2 and rec["engine_processes_exited"] == 0
    assert rec["engine_processes_missed"] == 0
    assert rec["engine_cpu_time_s"] > 0.2, rec  # the engine's processes had 0.3 s of CPU in the window
    assert rec["cpu_share"] == round((rec["cpu_time_s"] + rec["engine_cpu_time_s"]) / wall, 4)
    assert own["cpu_share"] < 0.1 and "engine_cpu_time_s" not in own  # a transformers pass: unchanged
    if rec["starved"]:
        assert "s its engine's 2 process(es)" in rec["starved_reason"]


def test_engine_processes_that_start_or_exit_in_the_window():
    start = {1: (100.0, 5.0, 0), 2: (100.0, 3.0, 1), 3: (100.0, 1.0, 1), 5: (100.0, 0.5, 3)}
    # 1 ran 2 s more and reaped 3 (3's 1.5 s total, 1.0 s of it before the window, now in 1's
    # children times); 2 ran 0.5 s; 4 started in the window and ran 0.25 s; 5 exited with its
    # parent 3 gone too: missed (its window time not counted)
    end = {1: (100.0, 5.0 + 2.0 + 1.5, 0), 2: (100.0, 3.5, 1), 4: (101.0, 0.25, 1)}
    assert cond.tree_cpu_seconds(start, end) == (2.0 + 0.5 + 0.5 + 0.25, 2, 1)
    # pid 2 exited and was reaped by 1 (+3.25 s in 1's children times); a new process took pid 2
    reused = {1: (100.0, 5.0 + 3.25, 0), 2: (102.0, 0.5, 1), 3: (100.0, 1.0, 1), 5: (100.0, 0.5, 3)}
    assert cond.tree_cpu_seconds(start, reused) == (0.25 + 0.5, 1, 0)
    assert cond.tree_cpu_seconds({}, {}) == (0.0, 0, 0)


def test_host_limits_read_the_smallest_cgroup_limit_and_say_where(tmp_path):
    from lab.passes.conditions import host_limits, limits_text

    proc = tmp_path / "proc_cgroup"
    proc.write_text("0::/system.slice/pass.scope\n")
    root = tmp_path / "cg"
    _tree(root, {"system.slice/pass.scope/memory.max": "max\n", "system.slice/memory.max": "4294967296\n",
                 "memory.max": "8589934592\n", "system.slice/pass.scope/pids.max": "256\n"})
    shm = tmp_path / "shm"
    shm.mkdir()
    values, where = host_limits(root, proc, {"shm_bytes": shm, "tmp_gone": tmp_path / "absent"})
    assert values["memory_max_bytes"] == 4 * 2**30
    assert where["memory_max_bytes"] == f"cgroup v2 memory.max at {root / 'system.slice'}"
    assert values["pids_max"] == 256 and values["shm_bytes"] > 0
    # no limit set is None with where it looked, never 0
    assert values["memory_swap_max_bytes"] is None
    assert where["memory_swap_max_bytes"].startswith("not in a limit (cgroup v2 memory.swap.max: none set from")
    assert values["tmp_gone"] is None and where["tmp_gone"].startswith("not read: ")
    # the process's own resource limits, as the kernel gives them
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert values["rlimit_nofile"] == (None if soft == resource.RLIM_INFINITY else soft)
    text = limits_text({"values": values, "sources": where})
    assert "memory_max 4.00 GiB" in text and "pids_max 256" in text and "memory_swap_max" not in text
    assert limits_text({"values": {"pids_max": None}}) == "none set" and limits_text(None) is None


def test_host_limits_under_cgroup_v1_and_without_cgroups(tmp_path):
    from lab.passes.conditions import host_limits

    proc = tmp_path / "proc_cgroup"
    proc.write_text("5:pids:/docker/abc\n4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n")
    root = tmp_path / "cg"
    # a container: its cgroup is the mount's root; v1 writes "no limit" as a huge page-rounded number
    _tree(root, {"memory/memory.limit_in_bytes": "9223372036854771712\n", "pids/pids.max": "4096\n"})
    values, where = host_limits(root, proc, {})
    assert values["memory_max_bytes"] is None and "cgroup v1 memory.limit_in_bytes" in where["memory_max_bytes"]
    assert values["pids_max"] == 4096 and where["pids_max"] == f"cgroup v1 pids.max at {root / 'pids'}"
    (root / "memory/memory.limit_in_bytes").write_text("1073741824\n")
    assert host_limits(root, proc, {})[0]["memory_max_bytes"] == 2**30
    values, where = host_limits(root, tmp_path / "absent", {})
    assert values["memory_max_bytes"] is None and where["memory_max_bytes"].startswith("not read: ")
