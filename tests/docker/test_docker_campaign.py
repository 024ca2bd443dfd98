"""A small campaign end to end through the Docker launcher, by the UI's code path.

``Orchestrator.prepare(...).run()`` with a DockerLauncher on the CPU image: 2 variants
(batch 1 and batch OOM_BATCH at max_length 512) x 2 repetitions on a 64-item corpus, under
a container memory limit that batch 1 fits and the large batch padded to 512 tokens does
not (calibration in conftest.py). Each large-batch pass becomes a failure row "killed, host
memory" with the items completed so far (its first batch, from the streamed progress); the
batch-1 passes are validated corpora. No container stays.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest
from conftest import DOCKER_TEST_LABELS, OOM_BATCH, OOM_LIMIT_BYTES, oom_corpus_rows

from lab.facts.host import read_pins
from lab.launchers.docker import DockerLauncher
from lab.orchestration.orchestrator import Orchestrator
from lab.orchestration.protocol import load_protocol, lock

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / ".cache" / "models" / "demo-minilm-20ng"

CAMPAIGN_TOML = """
[campaign]
name = "{name}"
question = "Which batch size processes the corpus within a {limit_mib} MiB container?"
deliverables = 1

[corpus]
path = "corpus.jsonl"

[model]
path = "model"

[quality]
metric = "accuracy"
threshold = 0.2
reference_variant = "batch/batch_size=1"
tolerance = 0.05
subgroups = "buckets"

[timing]
warmup_items = 8
warmup_passes = 1
repetitions = 2
rotation = "cyclic"
process = "fresh"
seed = 0
threads = 2

[defaults]
precision = "fp32"
padding = "longest"
max_length = 512
bucketing = false
device = "cpu"

[[series]]
name = "batch"
factor = "batch_size"
values = [1, {oom_batch}]
"""


@pytest.fixture(scope="module")
def client(docker_client):
    return docker_client


def campaign_folder(tmp_path: Path, name: str) -> Path:
    """campaign.toml + the 64-item corpus of conftest.oom_corpus_rows() + the model."""
    pick = oom_corpus_rows()
    d = tmp_path / "campaign"
    d.mkdir()
    (d / "corpus.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in pick),
                                    encoding="utf-8")
    if not (MODEL / "config.json").is_file():
        pytest.fail(f"demo model missing at {MODEL}; run `make model`")
    shutil.copytree(MODEL, d / "model")
    for p in [d / "model", *(d / "model").rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)  # the container's user is not root
    (d / "campaign.toml").write_text(CAMPAIGN_TOML.format(name=name, limit_mib=OOM_LIMIT_BYTES // 2**20,
                                                                     oom_batch=OOM_BATCH), encoding="utf-8")
    return d / "campaign.toml"


@pytest.mark.docker
def test_campaign_through_docker_with_a_pass_killed_for_host_memory(client, tmp_path):
    image = read_pins()["CPU_IMAGE"]
    try:
        client.images.get(image)
    except Exception:
        pytest.fail(f"image {image} is not built; run `bash scripts/ci_docker.sh` first")
    name = f"iteralab-test-campaign-{uuid.uuid4().hex[:8]}"
    campaign_file = campaign_folder(tmp_path, name)
    lock(load_protocol(campaign_file))
    launcher = DockerLauncher(image, "cpu", mem_limit_bytes=OOM_LIMIT_BYTES, labels=DOCKER_TEST_LABELS,
                              client=client)

    orch = Orchestrator.prepare(campaign_file, tmp_path / "runs", launcher)
    assert orch.run() == "finished"

    rows = orch.journal.attempts()
    assert len(rows) == 4 and {r.launcher for r in rows} == {"docker"}
    by_batch: dict[int, list] = {}
    for r in rows:
        by_batch.setdefault(r.variant.batch_size, []).append(r)
    ok, killed = by_batch[1], by_batch[OOM_BATCH]
    assert len(ok) == len(killed) == 2
    for r in ok:
        assert r.status == "ok" and r.items_completed == 64, r
        assert r.validation.corpus_accepted is True, r.validation
    for r in killed:
        assert r.status == "killed", r
        assert "killed, host memory" in r.notes and "container " in r.notes
        # items completed so far (the first batch, short items), from the streamed progress
        assert r.items_completed == OOM_BATCH, r
        v = r.validation
        assert v.corpus_accepted is False and "pass status killed" in v.reasons[0]
        launch = r.launch
        assert launch["killed_host_memory"] and launch["extra"]["oom_killed"] is True
    kinds = {e["kind"] for e in orch.journal.events_since(0)}
    assert {"start", "phase", "progress", "end"} <= kinds
    assert launcher.find_leftovers(name) == []
