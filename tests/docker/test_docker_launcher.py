"""Passes in real containers (DockerLauncher) on the CPU image, real model, real corpus subset.

The engine-dependent tests carry the ``docker`` marker and are skipped, with the reason,
only when no engine answers. With an engine but without the image they fail: CI builds it
first (scripts/ci_docker.sh). Everything created here carries this session's
``iteralab.test`` label (conftest.DOCKER_TEST_LABELS) and is removed at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import pytest
from conftest import DOCKER_TEST_LABELS, OOM_BATCH, OOM_LIMIT_BYTES, oom_corpus_rows

from lab.facts.host import read_pins
from lab.inputs.variants import Variant
from lab.launchers.docker import DockerLauncher, iter_lines, unreadable_for
from lab.passes.events import EXIT_OK, parse_event
from lab.passes.spec import PassSpec

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "demo" / "corpus" / "comparison.jsonl"
MODEL = ROOT / ".cache" / "models" / "demo-minilm-20ng"


# ---- pure parts (no engine) -------------------------------------------------------------
def test_iter_lines_rebuilds_lines_cut_anywhere():
    text = '{"iteralab": 1, "event": "progress", "done": 8}\nstrané ligne — ok\r\nlast'
    data = text.encode("utf-8")
    for size in (1, 2, 3, 5, 7, len(data)):
        chunks = [data[i:i + size] for i in range(0, len(data), size)]
        assert list(iter_lines(chunks)) == ['{"iteralab": 1, "event": "progress", "done": 8}',
                                            "strané ligne — ok", "last"]
    assert list(iter_lines([b"a\n", b"", b"\n"])) == ["a", ""]


def test_unreadable_for_reads_mode_bits(tmp_path):
    d = tmp_path / "model"
    d.mkdir(mode=0o755)
    f = d / "model.safetensors"
    f.write_bytes(b"x")
    f.chmod(0o600)
    st = f.stat()
    assert unreadable_for(f, st.st_uid, st.st_gid) == []
    bad = unreadable_for(f, st.st_uid + 12345, st.st_gid + 12345)
    assert len(bad) == 1 and "mode 0600" in bad[0]
    f.chmod(0o644)
    assert unreadable_for(d, st.st_uid + 12345, st.st_gid + 12345) == []
    d.chmod(0o750)
    assert "mode 0750" in unreadable_for(d, st.st_uid + 12345, st.st_gid + 12345)[0]


# ---- engine fixtures --------------------------------------------------------------------
@pytest.fixture(scope="module")
def client(docker_client):
    return docker_client


@pytest.fixture(scope="module")
def image(client):
    tag = os.environ.get("ITERALAB_TEST_IMAGE") or read_pins()["CPU_IMAGE"]  # e.g. one built from a branch
    try:
        client.images.get(tag)
    except Exception:
        pytest.fail(f"image {tag} is not built; run `bash scripts/ci_docker.sh` first")
    return tag


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """The demo model, copied world-readable (the container runs as a non-root user)."""
    if not (MODEL / "config.json").is_file():
        pytest.fail(f"demo model missing at {MODEL}; run `make model`")
    d = tmp_path_factory.mktemp("model") / "demo-minilm-20ng"
    shutil.copytree(MODEL, d)
    for p in [d, *d.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return d


def subset(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def rows():
    return [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]


def stratified_30(rows):
    """18 short, 9 medium, 3 long, in corpus order (every length bucket covered)."""
    want = {"short": 18, "medium": 9, "long": 3}
    out = []
    for r in rows:
        if want.get(r["bucket"], 0) > 0:
            want[r["bucket"]] -= 1
            out.append(r)
    return out


def make_spec(tmp_path, corpus: Path, model: Path, campaign: str, variant: Variant, pass_id: str):
    pass_dir = tmp_path / "passes" / pass_id
    pass_dir.mkdir(parents=True)
    spec = PassSpec(campaign=campaign, pass_id=pass_id, variant=variant, corpus_path=str(corpus),
                    model_ref=str(model), out_dir=str(pass_dir), warmup_items=8, warmup_passes=1, threads=2)
    spec.write(pass_dir / "pass.json")
    return spec, pass_dir


def run_pass(launcher, spec, pass_dir, **kw):
    lines: list[str] = []
    outcome = launcher.launch(spec, pass_dir, lines.append, **kw)
    return outcome, lines, [e for e in map(parse_event, lines) if e is not None]


# ---- passes in containers ---------------------------------------------------------------
@pytest.mark.docker
def test_ok_pass_in_a_container(client, image, model_dir, rows, tmp_path):
    campaign = f"iteralab-test-{uuid.uuid4().hex[:8]}"
    corpus = subset(tmp_path / "corpus30.jsonl", stratified_30(rows))
    spec, pass_dir = make_spec(tmp_path, corpus, model_dir, campaign, Variant(batch_size=4, device="cpu"), "p001-ok")
    launcher = DockerLauncher(image, "cpu", labels=DOCKER_TEST_LABELS, client=client)
    outcome, lines, events = run_pass(launcher, spec, pass_dir)

    assert outcome.exit_code == EXIT_OK and not outcome.killed_host_memory, (outcome, lines[-5:])
    assert outcome.container_id and outcome.isolation.startswith(f"container {image}")
    kinds = [e["event"] for e in events]
    assert "progress" in kinds and kinds[-1] == "result"
    assert all("\n" not in line for line in lines)
    result = json.loads((pass_dir / "result.json").read_text())
    assert result["status"] == "ok" and result["items_completed"] == 30 and result["device"] == "cpu"
    preds = [json.loads(x) for x in (pass_dir / "predictions.jsonl").read_text().splitlines()]
    assert [p["id"] for p in preds] == [r["id"] for r in stratified_30(rows)]
    # host-side spec untouched; the container read its own copy with container paths
    assert PassSpec.read(pass_dir / "pass.json").corpus_path == str(corpus)
    cspec = PassSpec.read(pass_dir / "pass.container.json")
    assert (cspec.corpus_path, cspec.model_ref, cspec.out_dir) == ("/data/corpus30.jsonl", "/models/model",
                                                                    "/work/pass")
    assert (pass_dir / "result.json").stat().st_uid == pass_dir.parent.stat().st_uid  # ownership given back
    assert "model_load" in (pass_dir / "log.txt").read_text()
    assert not client.containers.list(all=True, filters={"id": outcome.container_id})  # removed
    d = launcher.describe()
    assert d["image_id"].startswith("sha256:") and d["engine_version"] and d["runtime"]
    assert d["network"] == "none during passes"


@pytest.mark.docker
def test_container_killed_for_host_memory_keeps_items_completed(client, image, model_dir, tmp_path):
    corpus = subset(tmp_path / "short-then-long.jsonl", oom_corpus_rows())
    campaign = f"iteralab-test-{uuid.uuid4().hex[:8]}"
    variant = Variant(batch_size=OOM_BATCH, max_length=512, device="cpu")
    spec, pass_dir = make_spec(tmp_path, corpus, model_dir, campaign, variant, "p002-oom")
    launcher = DockerLauncher(image, "cpu", mem_limit_bytes=OOM_LIMIT_BYTES, labels=DOCKER_TEST_LABELS,
                              client=client)
    outcome, lines, events = run_pass(launcher, spec, pass_dir)

    assert outcome.killed_host_memory, (outcome, lines[-5:])
    assert outcome.note == "killed, host memory" and outcome.extra["oom_killed"] is True
    assert outcome.exit_code == -9 and outcome.extra["container_exit_code"] == 137
    done = [e["done"] for e in events if e["event"] == "progress"]
    # the first batch (short items) completed, streamed before the kill; the padded second batch died
    assert done == [OOM_BATCH], done
    assert any(e["event"] == "phase" and e.get("phase") == "measured" for e in events)
    assert not (pass_dir / "result.json").exists()  # the kernel killed it: the pass could not write
    assert not client.containers.list(all=True, filters={"id": outcome.container_id})


@pytest.mark.docker
def test_stop_request_stops_the_container(client, image, model_dir, rows, tmp_path):
    corpus = subset(tmp_path / "corpus30.jsonl", stratified_30(rows))
    spec, pass_dir = make_spec(tmp_path, corpus, model_dir, f"iteralab-test-{uuid.uuid4().hex[:8]}",
                               Variant(batch_size=1, device="cpu"), "p003-stop")
    launcher = DockerLauncher(image, "cpu", labels=DOCKER_TEST_LABELS, client=client, stop_timeout_s=5)
    seen: list[str] = []
    outcome = launcher.launch(spec, pass_dir, seen.append,
                              should_stop=lambda: any('"progress"' in s for s in seen))
    assert outcome.note == "stopped by the user" and not outcome.killed_host_memory
    assert not client.containers.list(all=True, filters={"id": outcome.container_id})


@pytest.mark.docker
def test_pass_timeout_stops_the_container(client, image, model_dir, rows, tmp_path):
    corpus = subset(tmp_path / "corpus30.jsonl", stratified_30(rows))
    spec, pass_dir = make_spec(tmp_path, corpus, model_dir, f"iteralab-test-{uuid.uuid4().hex[:8]}",
                               Variant(batch_size=1, device="cpu"), "p005-timeout")
    launcher = DockerLauncher(image, "cpu", labels=DOCKER_TEST_LABELS, client=client,
                              stop_timeout_s=2, timeout_s=2)
    outcome = launcher.launch(spec, pass_dir, lambda line: None)
    assert outcome.note.startswith("killed after the 2 s pass timeout") and not outcome.killed_host_memory
    assert outcome.exit_code is not None and outcome.exit_code != 0
    assert not client.containers.list(all=True, filters={"id": outcome.container_id})


@pytest.mark.docker
def test_unreadable_model_is_refused_with_the_fix(client, image, model_dir, rows, tmp_path):
    model = tmp_path / "private-model"
    shutil.copytree(model_dir, model)
    (model / "model.safetensors").chmod(0o600)
    corpus = subset(tmp_path / "c.jsonl", stratified_30(rows))
    campaign = f"iteralab-test-{uuid.uuid4().hex[:8]}"
    spec, pass_dir = make_spec(tmp_path, corpus, model, campaign, Variant(device="cpu"), "p004")
    launcher = DockerLauncher(image, "cpu", labels=DOCKER_TEST_LABELS, client=client)
    outcome = launcher.launch(spec, pass_dir, lambda line: None)
    if os.geteuid() != 0:
        pytest.skip("runs as the host user, who owns the file")
    assert outcome.exit_code is None and "cannot read" in outcome.note and "chmod" in outcome.note
    assert not launcher.find_leftovers(campaign)


@pytest.mark.docker
def test_leftovers_found_by_campaign_label(client, image):
    campaign = f"iteralab-test-{uuid.uuid4().hex[:8]}"
    c = client.containers.create(image, ["true"], labels={"iteralab.campaign": campaign, "iteralab.pass": "p009",
                                                          "iteralab.variant": "v-x", **DOCKER_TEST_LABELS})
    try:
        launcher = DockerLauncher(image, "cpu", client=client)
        (left,) = launcher.find_leftovers(campaign)
        assert left["id"] == c.id and left["pass"] == "p009" and left["status"] == "created"
        assert launcher.find_leftovers(campaign + "-other") == []
    finally:
        c.remove(force=True)


@pytest.mark.docker
def test_gpu_pass_without_the_toolkit_is_a_failure_row_with_the_fix(client, image, model_dir, rows, tmp_path):
    if "nvidia" in (client.info().get("Runtimes") or {}):
        pytest.skip("this engine has the NVIDIA runtime registered")
    corpus = subset(tmp_path / "c.jsonl", stratified_30(rows))
    campaign = f"iteralab-test-{uuid.uuid4().hex[:8]}"
    spec, pass_dir = make_spec(tmp_path, corpus, model_dir, campaign, Variant(device="cuda"), "p006-gpu")
    launcher = DockerLauncher(image, "nvidia", labels=DOCKER_TEST_LABELS, client=client)
    outcome = launcher.launch(spec, pass_dir, lambda line: None)
    assert outcome.exit_code is None and not outcome.killed_host_memory
    assert "could not select device driver" in outcome.note and "nvidia-ctk" in outcome.note
    assert launcher.find_leftovers(campaign) == []


@pytest.mark.docker
def test_two_card_pass_in_one_container_matches_one_card(client, image, model_dir, tmp_path):
    """Issue 14: the same torchrun entry point inside one container holding the N cards
    (CPU workers here, 2 threads split to 1 each); predictions equal the 1-card pass's."""
    from conftest import cut_corpus

    from lab.launchers.local import LocalLauncher

    corpus = cut_corpus(tmp_path / "corpus.jsonl", 6, 4, 2)
    corpus.chmod(0o644)
    tmp_path.chmod(0o755)
    campaign = f"iteralab-test-{uuid.uuid4().hex[:8]}"
    one, one_dir = make_spec(tmp_path, corpus, model_dir, campaign,
                             Variant(batch_size=4, max_length=128, device="cpu"), "one")
    LocalLauncher().launch(one, one_dir, lambda line: None)
    two, two_dir = make_spec(tmp_path, corpus, model_dir, campaign,
                             Variant(batch_size=4, max_length=128, device="cpu", cards=2), "two")
    launcher = DockerLauncher(image, "cpu", labels=DOCKER_TEST_LABELS, client=client, timeout_s=300)
    outcome, _lines, events = run_pass(launcher, two, two_dir)
    assert outcome.exit_code == EXIT_OK, (two_dir / "log.txt").read_text()[-3000:]
    assert outcome.container_id and "container" in outcome.isolation
    res = json.loads((two_dir / "result.json").read_text())
    assert res["status"] == "ok" and res["cards_observed"] == 2
    assert res["threads"] == 1 and res["threads_per_card"] == [1, 1]
    assert [c["items_total"] for c in res["per_card"]] == [6, 6] and len(res["devices"]) == 2
    assert "torch.distributed.run" in next(e["command"] for e in events if e.get("phase") == "launch")

    def preds(d: Path) -> dict:
        return {r["id"]: r["pred"] for r in map(json.loads, (d / "predictions.jsonl").read_text().splitlines())}
    assert preds(two_dir) == preds(one_dir) and len(preds(two_dir)) == 12
    assert not client.containers.list(all=True, filters={"label": f"iteralab.campaign={campaign}"})


# ---- issue 11: confinement and leftovers ---------------------------------------------------
@pytest.mark.docker
def test_pass_container_is_confined(client, image, model_dir, rows, tmp_path):
    corpus = subset(tmp_path / "c.jsonl", stratified_30(rows))
    spec, pass_dir = make_spec(tmp_path, corpus, model_dir, f"iteralab-test-{uuid.uuid4().hex[:8]}",
                               Variant(device="cpu"), "p010-confined")
    launcher = DockerLauncher(image, "cpu", labels=DOCKER_TEST_LABELS, client=client)
    vols, _ = launcher._mounts(spec, pass_dir.resolve())
    c = launcher._create(spec, vols, launcher._user())
    try:
        hc = c.attrs["HostConfig"]
        assert hc["ReadonlyRootfs"] is True and hc["CapDrop"] == ["ALL"]
        assert "no-new-privileges" in hc["SecurityOpt"] and hc["PidsLimit"] == 4096
        assert "/tmp" in hc["Tmpfs"] and hc["Binds"] and any(b.endswith(":/work/pass:rw") for b in hc["Binds"])
        import psutil

        assert hc["Memory"] == int(psutil.virtual_memory().total * 0.9) == launcher.mem_limit_bytes
    finally:
        c.remove(force=True)
    d = launcher.describe()  # stated and recorded in the manifest
    assert d["mem_limit_rule"].startswith("default: 90% of host RAM")
    assert d["confinement"]["read_only_rootfs"] and d["confinement"]["cap_drop"] == ["ALL"]
    # and a real pass runs under it
    outcome, lines, _ = run_pass(launcher, spec, pass_dir)
    assert outcome.exit_code == EXIT_OK, (outcome, lines[-5:])
    result = json.loads((pass_dir / "result.json").read_text())
    assert result["items_completed"] == 30
    # every limit the container puts on the pass is recorded, read inside it (issue 35)
    lim = result["conditions"]["limits"]
    page = os.sysconf("SC_PAGE_SIZE")  # the kernel keeps a memory limit in whole pages
    assert lim["values"]["memory_max_bytes"] == launcher.mem_limit_bytes // page * page, lim
    assert lim["values"]["pids_max"] == 4096 and lim["values"]["shm_bytes"] == launcher.shm_size_bytes, lim
    assert lim["sources"]["memory_max_bytes"].startswith("cgroup v"), lim


@pytest.mark.docker
def test_resumed_campaign_stops_the_previous_pass_container_first(client, image, model_dir, tmp_path):
    from conftest import cut_corpus, write_campaign

    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock

    name = f"iteralab-test-{uuid.uuid4().hex[:8]}"
    corpus = cut_corpus(tmp_path / "c.jsonl", 2, 1, 1)
    corpus.chmod(0o644)
    f = write_campaign(tmp_path, model_dir, corpus, name=name, values=(1,))
    lock(load_protocol(f))
    # the previous orchestrator was killed while its pass container ran (still holding the GPU)
    old = client.containers.run(image, ["python", "-c", "import time; time.sleep(600)"], detach=True,
                                labels={"iteralab.campaign": name, "iteralab.pass": "p001-r1-v-old",
                                        "iteralab.variant": "v-old", **DOCKER_TEST_LABELS})
    assert old.status in ("created", "running")
    launcher = DockerLauncher(image, "cpu", labels=DOCKER_TEST_LABELS, client=client, stop_timeout_s=2)
    orch = Orchestrator.prepare(f, tmp_path / "runs", launcher)
    assert orch.run() == "finished"
    events = orch.journal.events_since(0)
    kinds = [e["kind"] for e in events]
    payload = next(e["payload"] for e in events if e["kind"] == "leftover")
    assert kinds.index("leftover") < kinds.index("start")  # stopped before the next pass started
    rec = payload["container"]
    assert rec["id"] == old.id and rec["status_before"] == "running" and rec["stopped"] and rec["removed"]
    assert rec["pass"] == "p001-r1-v-old"
    assert not client.containers.list(all=True, filters={"id": old.id})
    assert [a.status for a in orch.journal.attempts()] == ["ok"]


@pytest.mark.docker
def test_frozen_pass_container_is_stopped_by_the_stall_rule(client, image, model_dir, rows, tmp_path):
    corpus = subset(tmp_path / "corpus30.jsonl", stratified_30(rows))
    spec, pass_dir = make_spec(tmp_path, corpus, model_dir, f"iteralab-test-{uuid.uuid4().hex[:8]}",
                               Variant(batch_size=1, device="cpu"), "p011-stall")
    # no stall rule until the freeze: container create/start and the runner's torch import take
    # 5-15 s on a loaded CI machine, so 15 s counted from the launch could fire before the freeze.
    # DockerLauncher's watch re-reads stall_s on every tick: set right after the pause, the rule
    # counts from the last event line, i.e. from the freeze.
    launcher = DockerLauncher(image, "cpu", labels=DOCKER_TEST_LABELS, client=client, stop_timeout_s=2,
                              stall_s=None, timeout_s=300)  # timeout: a pass that never prints fails, never hangs
    frozen: list[str] = []

    def on_line(line: str) -> None:  # the pass freezes (cgroup freezer, like SIGSTOP) at its first event
        if not frozen:
            (c,) = client.containers.list(filters={"label": [f"iteralab.pass={spec.pass_id}",
                                                             f"iteralab.campaign={spec.campaign}"]})
            c.pause()
            frozen.append(c.id)
            launcher.stall_s = 15

    outcome = launcher.launch(spec, pass_dir, on_line)
    assert frozen, outcome
    assert outcome.note.startswith("stalled: no event for 15 s ([timing] stall_s)")
    assert not outcome.killed_host_memory and outcome.exit_code != 0
    assert not client.containers.list(all=True, filters={"id": frozen[0]})
