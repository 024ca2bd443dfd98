"""Passes over several cards (issue 14): torchrun workers on CPU, threads split, real model.

A campaign whose series varies ``cards`` over 1 and 2 runs to a verified archive; the
2-card pass's predictions equal the 1-card pass's per id; one row per pass with per-card
devices and memory records; a memory failure on one card makes an ``oom`` row with the
items completed on every card; two torchrun "hosts" over 127.0.0.1 give the same
predictions. CPU workers, one thread each, 12-20 items from the demo corpus.
"""

from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, cut_corpus, settle, wait_until

from lab.facts.host_cards import CardsBeyondHost, check_cards_fit_host, host_card_count
from lab.inputs.variants import Variant, VariantError, expand_series
from lab.orchestration.config import SeriesSection
from lab.orchestration.protocol import ProtocolError, load_protocol
from lab.passes.distributed import (
    ProgressTally,
    shard_positions,
    threads_per_worker,
    torchrun_command,
)

CAMPAIGN = """
[campaign]
name = "{name}"
question = "Does the B200 lot (2 cards) process my corpus for the lowest committed budget?"

[corpus]
path = "corpus.jsonl"

[model]
path = "{model}"

[quality]
metric = "accuracy"
threshold = 0.2
reference_variant = "cards/cards={ref}"
tolerance = 0.05

[timing]
warmup_items = 2
warmup_passes = 1
repetitions = 1
seed = 0
threads = 2

[defaults]
max_length = 128
batch_size = {batch}

[cost]
gpu = "b200"
days = 7
lots = 1

[[series]]
name = "cards"
factor = "cards"
values = {values}
"""


def _campaign(folder: Path, model: Path, name: str, values, batch: int = 4, items=(6, 4, 2)) -> Path:
    cut_corpus(folder / "corpus.jsonl", *items)
    f = folder / f"{name}.toml"
    f.write_text(CAMPAIGN.format(name=name, model=model, ref=values[0], values=list(values), batch=batch))
    return f


def _preds(path: Path) -> dict[str, str]:
    return {r["id"]: r["pred"] for r in map(json.loads, path.read_text().splitlines())}


def _cli(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lab.cli", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=600, check=False)


@pytest.fixture(scope="module")
def cards_campaign(tmp_path_factory, model_dir):
    """The must-show campaign: series over cards 1 and 2, run, reported, archived, verified."""
    d = tmp_path_factory.mktemp("cards")
    f = _campaign(d, model_dir, "lot", (1, 2))
    env = {**os.environ, "ITERALAB_RUNS": str(d / "runs")}
    assert _cli("protocol", "lock", str(f), env=env).returncode == 0
    run = _cli("campaign", "run", str(f), "--launcher", "local", env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    archive = _cli("archive", str(f), env=env)
    assert archive.returncode == 0, archive.stderr[-2000:]
    path = Path(archive.stdout.strip().splitlines()[-1])
    verified = _cli("archive", "verify", str(path), env=env)
    camp_dir = next(p.parent for p in (d / "runs" / "lot").glob("*/journal.sqlite"))
    return {"dir": camp_dir, "archive": path, "verify": verified, "run": run, "corpus": d / "corpus.jsonl"}


# ---- rules ---------------------------------------------------------------------------

def test_shards_partition_the_corpus_deterministically():
    lengths = [5, 90, 7, 60, 61, 3, 200, 8, 9, 10, 11]
    plain = shard_positions(lengths, 3, bucketing=False)
    assert plain == [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9, 10]]  # contiguous, sizes differ by <= 1
    bucketed = shard_positions(lengths, 2, bucketing=True)
    assert sorted(i for s in bucketed for i in s) == list(range(len(lengths)))
    assert all(s == sorted(s) for s in bucketed) and bucketed == shard_positions(lengths, 2, True)
    tokens = [sum(lengths[i] for i in s) for s in bucketed]
    assert abs(tokens[0] - tokens[1]) <= max(lengths)  # balanced by tokens, not by items
    assert abs(tokens[0] - tokens[1]) < abs(sum(lengths[:6]) - sum(lengths[6:]))
    assert shard_positions([1], 2, False) == [[], [0]]
    with pytest.raises(ValueError):
        shard_positions(lengths, 0, False)


def test_cards_field_keeps_one_card_ids_and_works_as_a_series_factor():
    import hashlib
    from dataclasses import asdict

    from lab.inputs.variants import ID_FIELDS

    v = Variant(batch_size=8)  # the id of the fields variants had before cards (and engine) existed
    old = {k: x for k, x in asdict(v).items() if k in ID_FIELDS}
    assert v.variant_id == "v-" + hashlib.sha256(json.dumps(old, sort_keys=True).encode()).hexdigest()[:10]
    two = Variant(batch_size=8, cards=2)
    assert two.variant_id != v.variant_id and two.label.endswith("2 cards") and "cards" not in v.label
    assert Variant.from_json(two.to_json()) == two
    for bad in (0, -1, 1.5, True):
        with pytest.raises(VariantError, match="cards"):
            Variant(cards=bad)
    vs = expand_series(Variant(cards=2), [SeriesSection("b", "batch_size", (1, 4)),
                                          SeriesSection("c", "cards", (1, 2))])
    assert [x.cards for x in vs] == [2, 2, 1]  # [defaults] cards = 2; c/cards=2 equals b/batch_size=1
    assert vs[2].name == "c/cards=1"


def test_threads_split_and_torchrun_command():
    assert threads_per_worker(4, 2) == 2 and threads_per_worker(3, 2) == 1 and threads_per_worker(1, 2) == 1
    one = torchrun_command("p.json", 2)
    assert one[1:4] == ["-u", "-m", "torch.distributed.run"] and "--standalone" in one
    assert one[-3:] == ["-m", "lab.passes.worker", "p.json"] and one[one.index("--nproc_per_node") + 1] == "2"
    many = torchrun_command("p.json", 1, nnodes=2, node_rank=1, rdzv_endpoint="10.0.0.5:29400", rdzv_id="x")
    assert "--standalone" not in many and "c10d" in many and "10.0.0.5:29400" in many
    assert "is_host=false" in many
    with pytest.raises(ValueError, match="rdzv-endpoint"):
        torchrun_command("p.json", 1, nnodes=2)


def test_progress_is_summed_over_cards_not_taken_from_the_last_line():
    t = ProgressTally()
    assert t.update({"event": "progress", "rank": 0, "done": 4}) == 4
    assert t.update({"event": "progress", "rank": 1, "done": 2}) == 6
    assert t.update({"event": "progress", "rank": 0, "done": 6}) == 8
    assert t.update({"event": "oom", "rank": 1, "items_done": 3}) == 9
    assert t.update({"event": "progress", "done": 5}) == 5 and t.update({"event": "phase"}) is None


def test_more_cards_than_the_host_has_is_refused_in_one_line(tmp_path, model_dir):
    n, what = host_card_count("cpu")
    assert n == os.cpu_count() and "CPU" in what
    with pytest.raises(CardsBeyondHost, match=f"has {n} logical CPU core"):
        check_cards_fit_host([Variant(cards=n + 1, device="cpu", name="c/cards=big")])
    with pytest.raises(CardsBeyondHost, match="threads >= 2"):
        check_cards_fit_host([Variant(cards=2, device="cpu")], threads=1)
    check_cards_fit_host([Variant(cards=2, device="cpu")], threads=2)
    with pytest.raises(CardsBeyondHost, match="has 1 GPU"):
        check_cards_fit_host([Variant(cards=2, device="cuda")], counter=lambda d: (1, "1 GPU(s) (counted by x)"))
    assert issubclass(CardsBeyondHost, ProtocolError)
    # the real CLI: `protocol lock` refuses, exit 2, one line with the count found, nothing locked
    f = _campaign(tmp_path, model_dir, "big", (1, n + 1))
    env = {**os.environ, "ITERALAB_RUNS": str(tmp_path / "runs")}
    r = _cli("protocol", "lock", str(f), env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and f"asks for {n + 1} cards" in r.stderr
    assert f"{n} logical CPU core" in r.stderr and not (tmp_path / "big.lock.json").exists()


def test_a_run_on_a_host_with_fewer_cards_than_at_lock_is_refused(tmp_path, model_dir, monkeypatch):
    import lab.facts.host_cards
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import lock

    f = _campaign(tmp_path, model_dir, "moved", (1, 2))
    lock(load_protocol(f))  # this host has the 2 CPU cores
    monkeypatch.setattr(lab.facts.host_cards, "host_card_count", lambda device: (1, "1 GPU(s) (counted by NVML)"))
    with pytest.raises(CardsBeyondHost, match="asks for 2 cards but this host has 1 GPU"):
        Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher())
    assert not (tmp_path / "runs").exists()


# ---- real passes -----------------------------------------------------------------------

def test_series_over_cards_runs_to_a_verified_archive(cards_campaign):
    assert cards_campaign["verify"].returncode == 0, cards_campaign["verify"].stdout
    assert "OK: " in cards_campaign["verify"].stdout and "2 rows checked" in cards_campaign["verify"].stdout
    d = cards_campaign["dir"]
    rows = list(csv.DictReader((d / "report" / "raw_table.csv").read_text().splitlines()))
    assert len(rows) == 2  # one row per pass
    by = {r["cards"]: r for r in rows}
    assert set(by) == {"1", "2"}
    for cards, r in by.items():
        assert r["status"] == "ok" and r["ids_match"] == "True" and r["corpus_accepted"] == "True"
        assert r["expected_ids"] == r["observed_ids"] == "12" and r["duplicate_ids"] == "0"
        assert r["cards_observed"] == cards
        mem = json.loads(r["per_card_memory"])
        assert [m["card"] for m in mem] == list(range(int(cards)))
        assert all(m["process_peak_rss_bytes"] > 100_000_000 and m["peak_allocated_bytes"] is None for m in mem)
        assert all("never added across cards" in m["scope"] for m in mem)
    two = by["2"]
    assert "card 0: cpu" in two["devices_observed"] and "card 1: cpu" in two["devices_observed"]
    assert two["device"] == "cpu x2"
    mem = json.loads(two["per_card_memory"])
    assert int(two["process_peak_rss_bytes"]) == max(m["process_peak_rss_bytes"] for m in mem)  # not a sum
    result = json.loads((d / two["predictions_path"]).parent.joinpath("result.json").read_text())
    assert result["threads"] == 1 and result["threads_per_card"] == [1, 1] and result["cards_declared"] == 2
    assert [c["items_total"] for c in result["per_card"]] == [6, 6]
    assert float(two["measured_s"]) == max(c["measured_s"] for c in result["per_card"])  # slowest card
    # utilization is a one-card measurement: the 1-card row has it, the 2-card row says why not
    assert float(by["1"]["utilization"]) > 0 and float(by["1"]["probe_s"]) > 0
    assert two["utilization"] == two["probe_s"] == ""
    assert "utilization not measured: multi-card passes (lab.passes.multicard) run no probe phase" in two["notes"]


def test_two_cards_predict_what_one_card_predicts_per_id(cards_campaign):
    d = cards_campaign["dir"]
    rows = {r["cards"]: r for r in csv.DictReader((d / "report" / "raw_table.csv").read_text().splitlines())}
    one, two = (_preds(d / rows[c]["predictions_path"]) for c in ("1", "2"))
    corpus_ids = [json.loads(x)["id"] for x in cards_campaign["corpus"].read_text().splitlines()]
    assert list(two) == corpus_ids  # merged back in corpus order
    assert one == two


def test_decision_note_states_cards_measured_vs_cards_in_the_lot(cards_campaign):
    note = (cards_campaign["dir"] / "report" / "decision_note.md").read_text()
    assert "measured on 1 card(s) per pass; the priced package holds 2 card(s) per lot x 1 lot(s) = 2" in note
    assert "describe 1 of the 2 cards paid for" in note and "not measured and not assumed" in note
    assert "measured on 2 card(s) per pass" in note and "covers every card paid for" in note


def test_memory_failure_on_one_card_is_an_oom_row_with_items_completed(tmp_path, model_dir):
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import lock
    from lab.report.build import build_report

    f = _campaign(tmp_path, model_dir, "oom", (2,), batch=1, items=(8, 6, 6))
    lock(load_protocol(f))
    env = {**os.environ, "ITERALAB_TEST_ONLY_INJECT_OOM": "0:2"}  # card 0 fails after 2 batches
    orch = Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher(env=env))
    orch.run()
    build_report(orch.dir)
    rows = list(csv.DictReader((orch.dir / "report" / "raw_table.csv").read_text().splitlines()))
    assert len(rows) == 1
    r = rows[0]
    assert r["status"] == "oom" and r["exit_code"] == "3" and r["corpus_accepted"] == "False"
    pass_dir = orch.dir / "passes" / r["pass_id"]
    result = json.loads((pass_dir / "result.json").read_text())
    cards = {c["card"]: c for c in result["per_card"]}
    assert cards[0]["status"] == "oom" and cards[0]["items_completed"] == 2 and cards[0]["test_only_injected_oom"]
    assert cards[1]["status"] in ("stopped", "ok")  # stopped cleanly (or done first): its record is written
    for c in (0, 1):  # every card's completed items are kept, with their predictions
        kept = (pass_dir / "cards" / f"card{c}.predictions.jsonl").read_text().splitlines()
        assert cards[c]["items_completed"] == len(kept)
    items = cards[0]["items_completed"] + cards[1]["items_completed"]
    assert int(r["items_completed"]) == items == len(_preds(pass_dir / "predictions.jsonl"))
    assert len(json.loads(r["per_card_memory"])) == 2 and "card 0: OutOfMemoryError" in r["notes"]
    assert r["measured_s"] == ""  # no window for a failed pass


def run_on_two_hosts(spec: dict, tmp_path: Path) -> list[Path]:
    """Run the pass ``spec`` (a pass.json's dict) over two torchrun "hosts" on 127.0.0.1: separate
    runner processes, pass folders ``tmp_path/host0`` and ``host1`` (returned); both must exit 0."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs, dirs = [], []
    try:
        for node in (0, 1):  # two "hosts": separate torchrun processes, separate pass folders
            pd = tmp_path / f"host{node}"
            pd.mkdir()
            (pd / "pass.json").write_text(json.dumps({**spec, "out_dir": str(pd)}))
            dirs.append(pd)
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "lab.passes.runner", str(pd / "pass.json"), "--nnodes", "2", "--node-rank",
                 str(node), "--rdzv-endpoint", f"127.0.0.1:{port}", "--local-addr", "127.0.0.1"],
                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True))
        end = time.monotonic() + 300  # one deadline for both hosts, not 300 s each
        outs = [p.communicate(timeout=max(1.0, end - time.monotonic())) for p in procs]
    finally:  # a host still running (timeout, failed start of the other): it and its workers go
        for p in procs:
            if p.poll() is None:
                _kill_tree(p)
    assert [p.returncode for p in procs] == [0, 0], [o[1][-1500:] for o in outs]
    return dirs


def test_two_hosts_over_loopback_give_the_same_predictions(cards_campaign, tmp_path):
    d = cards_campaign["dir"]
    rows = {r["cards"]: r for r in csv.DictReader((d / "report" / "raw_table.csv").read_text().splitlines())}
    spec = json.loads((d / rows["2"]["predictions_path"]).parent.joinpath("pass.json").read_text())
    dirs = run_on_two_hosts(spec, tmp_path)
    merged = [pd for pd in dirs if (pd / "result.json").is_file()]
    assert len(merged) == 1  # the host where rank 0 ran merges; the other keeps its own card
    result = json.loads((merged[0] / "result.json").read_text())
    assert result["status"] == "ok" and result["cards_observed"] == 2
    other = next(pd for pd in dirs if pd not in merged)
    assert [p.name for p in (other / "cards").glob("*.json")] != []
    assert _preds(merged[0] / "predictions.jsonl") == _preds(d / rows["1"]["predictions_path"])


def test_plan_screen_shows_cards_and_refuses_more_than_the_host_has(tmp_path, model_dir):
    import asyncio

    from test_tui_campaigns import CLOCK, FACTS, SAMPLE

    from tui.app import IteraLabApp
    from tui.widgets.telemetry import fixed_telemetry

    f = _campaign(tmp_path, model_dir, "plan", (1, os.cpu_count() + 1))  # one more than the host has

    async def go():
        app = IteraLabApp(f, telemetry=fixed_telemetry(SAMPLE), environment_probe=lambda: FACTS,
                          clock=lambda: CLOCK, poll_interval_s=None, telemetry_interval_s=None,
                          start_screen="plan")
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot, lambda: getattr(app.screen, "plan", None), "the plan")
            head = str(app.screen.query_one("#plan-head").render())
            checks = str(app.screen.query_one("#plan-checks").render())
            return app.screen.plan, head, checks
    plan, head, checks = asyncio.run(go())
    n = os.cpu_count()
    assert plan.cards == (1, n + 1) and f"Cards per pass 1, {n + 1}" in head
    refused = [c for c in plan.checks if c.name == "cards"]
    assert refused and refused[0].ok is False
    assert f"asks for {n + 1} cards but this host has {n} logical CPU core" in refused[0].detail
    assert "cards: variant cards/cards=" in checks.replace("\n", " ")


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL a runner started in its own session, its torchrun and torchrun's workers (their
    own sessions), then reap it."""
    import signal

    import psutil

    try:
        tree = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        tree = []
    os.killpg(proc.pid, signal.SIGKILL)
    for c in tree:
        try:
            c.kill()
        except psutil.Error:
            pass
    proc.communicate()


def _workers_of(pass_dir: Path) -> list:
    """Live processes of the multi-card pass in ``pass_dir``: torchrun, then its workers."""
    import psutil

    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "lab.passes.worker" in cmd and str(pass_dir) in cmd and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(p)
    return sorted(found, key=lambda p: "torch.distributed.run" not in " ".join(p.info["cmdline"]))


def _stop_at_measured(tmp_path, model_dir, on_measured=lambda d: None):
    """A 2-card pass stopped (as by the user) when its first worker starts the measured phase."""
    from lab.launchers.local import LocalLauncher
    from lab.passes.spec import PassSpec

    corpus = cut_corpus(tmp_path / "corpus.jsonl", 8, 6, 6)
    d = tmp_path / "pass"
    d.mkdir()
    spec = PassSpec("t", "stop", Variant(batch_size=1, max_length=128, cards=2), str(corpus),
                    str(model_dir), str(d), warmup_items=2, threads=2)
    spec.write(d / "pass.json")
    seen = {"measured": False}

    def on_line(line: str) -> None:
        if not seen["measured"] and '"phase": "measured", "state": "start"' in line:
            on_measured(d)
            seen["measured"] = True

    t0 = time.monotonic()
    outcome = LocalLauncher().launch(spec, d, on_line, should_stop=lambda: seen["measured"])
    return outcome, time.monotonic() - t0, d


def test_stopping_a_multi_card_pass_leaves_no_worker_running(tmp_path, model_dir):
    outcome, took_s, d = _stop_at_measured(tmp_path, model_dir)
    assert outcome.note == "stopped by the user" and took_s < 120
    # the launcher returns once the pass and every process it started are gone; the short wait is
    # only for a killed worker's exit to be reaped (the check sees no zombie either way)
    wait_until(lambda: not _workers_of(d), 5, "no worker of the stopped pass left running",
               detail=lambda: str(_workers_of(d)))
    records = [json.loads(p.read_text()) for p in sorted((d / "cards").glob("card*.json"))]
    assert len(records) == 2 and {r["status"] for r in records} <= {"stopped", "ok"}


def test_stopping_a_multi_card_pass_with_a_stopped_worker_leaves_no_worker_running(tmp_path, model_dir):
    """A worker that cannot act on torchrun's SIGTERM (SIGSTOPped here; or hung): torchrun would
    wait 30 s for it, the launcher kills the pass after its 10 s grace, and the worker (in its
    own session, torchrun starts workers so) must not outlive the pass."""
    import signal

    import psutil

    frozen: list = []

    def freeze(d: Path) -> None:
        for p in [p for p in _workers_of(d) if "torch.distributed.run" not in " ".join(p.info["cmdline"])][:1]:
            p.send_signal(signal.SIGSTOP)
            frozen.append(p)

    try:
        outcome, took_s, d = _stop_at_measured(tmp_path, model_dir, freeze)
        assert frozen, "no worker was found to stop"
        assert outcome.note == "stopped by the user" and took_s < 120
        wait_until(lambda: not _workers_of(d), 5, "no worker of the stopped pass left running",
                   detail=lambda: str(_workers_of(d)))
    finally:
        for p in frozen:
            try:
                p.kill()
            except psutil.Error:
                pass


def test_bucketed_two_card_pass_balances_tokens_and_predicts_as_one_card(tmp_path, model_dir):
    from lab.launchers.local import LocalLauncher
    from lab.passes.spec import PassSpec

    corpus = cut_corpus(tmp_path / "corpus.jsonl", 6, 4, 4)
    out = {}
    for cards in (1, 2):
        d = tmp_path / f"c{cards}"
        d.mkdir()
        spec = PassSpec("t", f"c{cards}", Variant(batch_size=4, max_length=128, bucketing=True, cards=cards),
                        str(corpus), str(model_dir), str(d), warmup_items=2, threads=2)
        spec.write(d / "pass.json")
        assert LocalLauncher().launch(spec, d, lambda line: None).exit_code == 0
        out[cards] = json.loads((d / "result.json").read_text()), _preds(d / "predictions.jsonl")
    res, preds = out[2]
    assert preds == out[1][1] and res["status"] == "ok" and res["torchrun_wall_s"] > res["phases_s"]["measured"]
    tokens = [json.loads((tmp_path / "c2" / "cards" / f"card{r}.json").read_text())["real_tokens"] for r in (0, 1)]
    assert sum(tokens) == out[1][0]["real_tokens"] and sum(c["items_total"] for c in res["per_card"]) == 14
    assert abs(tokens[0] - tokens[1]) <= 128  # balanced within one item (max_length 128 tokens)
    capped = [min(json.loads(x)["n_tokens"], 128) for x in corpus.read_text().splitlines()]
    blocks = [sum(capped[i] for i in s) for s in shard_positions(capped, 2, bucketing=False)]
    assert abs(tokens[0] - tokens[1]) < abs(blocks[0] - blocks[1])  # contiguous blocks would not be


def test_compare_reads_the_cards_each_pass_measured(cards_campaign, tmp_path):
    import shutil

    from lab.compare.decision import compare_archives
    from lab.compare.evidence import CompareError, load_evidence
    from lab.compare.projection import project
    from lab.cost.forfaits import load_catalog

    again = shutil.copyfile(cards_campaign["archive"], tmp_path / "same-rental-again.tar.gz")
    with pytest.raises(CompareError, match="hold the same campaign's passes"):  # one rental, never two
        compare_archives([cards_campaign["archive"], again], 1000)
    ev = load_evidence(cards_campaign["archive"])
    projections = [project(ev, v, load_catalog(None), 1000, None, 8, host="A") for v in ev.variants]
    by_cards = {p.cards_measured: p for p in projections}
    assert set(by_cards) == {1, 2}
    assert "lot has 2" in by_cards[1].cards_note and "lot has 2" not in by_cards[2].cards_note


# ---- declared values observed and checked on every card (issue 10 section 3, multi-card) ----

def test_two_card_row_records_observed_values_and_truncation(cards_campaign):
    d = cards_campaign["dir"]
    rows = {r["cards"]: r for r in csv.DictReader((d / "report" / "raw_table.csv").read_text().splitlines())}
    one, two = rows["1"], rows["2"]
    assert (two["observed_dtype"], two["observed_device"], two["observed_attention"]) == ("float32", "cpu", "sdpa")
    assert two["observed_threads_declared"] == "2" and two["observed_threads"] == "1"  # 2 for the pass, 1 per worker
    assert "split as threads // 2 workers = 1 per worker" in two["notes"]
    # card 1's shard is the long items: every batch reaches max_length, so its padding reads as either;
    # differing observations are kept per card, never picked for the pass
    assert two["observed_padding"] == ("card 0: longest; card 1: max_length or longest (every batch reached "
                                       "max_length: indistinguishable)")
    assert two["observed_bucketing"] == "corpus order"
    assert two["observed_compile"] == "False" and two["observed_quantization"] == "none"
    assert 0 < int(two["observed_max_tokens"]) <= 128
    for b in ("truncated_short", "truncated_medium", "truncated_long"):  # the same items as one card
        assert two[b] != "" and float(two[b]) == float(one[b]), b
    assert float(two["truncated_long"]) > 0  # demo long items exceed 128 tokens
    preds = [json.loads(x) for x in (d / two["predictions_path"]).read_text().splitlines()]
    assert all({"truncated", "tokens_kept", "tokens_total"} <= set(p) for p in preds)
    assert sum(p["truncated"] for p in preds) == int(two["n_truncated"]) > 0
    result = json.loads((d / two["predictions_path"]).parent.joinpath("result.json").read_text())
    assert [c["observed"]["threads_per_worker"] for c in result["per_card"]] == [1, 1]


def test_attention_the_host_cannot_honour_fails_a_two_card_pass(tmp_path, model_dir, monkeypatch):
    """Locked where the kernel exists (lab.orchestration.preflight.check_attention passes there), run where it
    does not: each card fails with the reason, as one error row."""
    import lab.orchestration.preflight as preflight
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import lock
    from lab.report.build import build_report

    f = _campaign(tmp_path, model_dir, "flash", (2,), items=(2, 2, 2))
    f.write_text(f.read_text().replace("[defaults]\n", '[defaults]\nattention = "flash_attention_2"\n'))
    monkeypatch.setattr(preflight, "check_attention", lambda proto, cfg: preflight.Check("attention", True, "test"))
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher())
    orch.run()
    build_report(orch.dir)
    rows = list(csv.DictReader((orch.dir / "report" / "raw_table.csv").read_text().splitlines()))
    assert len(rows) == 1
    r = rows[0]
    assert r["cards"] == "2" and r["attention"] == "flash_attention_2"
    assert r["status"] == "error" and r["corpus_accepted"] == "False" and r["observed_attention"] == ""
    assert "FlashAttention2" in r["notes"] and "card 0" in r["notes"]


def _card(rank: int, corpus_rows: list[dict], positions: list[int], observed: dict) -> dict:
    return {"rank": rank, "local_rank": rank, "world_size": 2, "node_rank": 0,
            "status": "ok", "error": "", "device": "cpu", "threads": observed["threads"],
            "phases_s": {"measured": 0.1}, "items_total": len(positions), "items_completed": len(positions),
            "positions": positions, "observed": observed}


def test_merge_names_the_card_that_did_not_honour_a_declared_value(tmp_path):
    """The merge applies the one-card rule to every card record: a card whose record says ok but
    whose observation contradicts the declaration (threads beyond its share, another dtype) makes
    the pass an error naming that card; equal fields combine, differing ones are kept per card."""
    from lab.passes.multicard import merge_cards
    from lab.passes.records import decode_result
    from lab.passes.spec import PassSpec

    corpus = cut_corpus(tmp_path / "corpus.jsonl", 1, 1, 0)
    items = [json.loads(x) for x in corpus.read_text().splitlines()]
    spec = PassSpec("t", "merge", Variant(batch_size=1, max_length=128, cards=2), str(corpus), "m",
                    str(tmp_path), threads=2)
    base = {"dtype": "float32", "device": "cpu", "attention": "sdpa", "threads": 1, "threads_declared": 2,
            "compile": False, "quantization": "none", "threads_per_worker": 1, "padding": "longest",
            "max_tokens": 40, "bucketing": "corpus order"}
    (tmp_path / "cards").mkdir()

    def write(obs1: dict) -> dict:
        for r, obs in ((0, base), (1, obs1)):
            card = {**_card(r, items, [r], obs), "tokens_kept": [128], "tokens_total": [128 + r]}
            (tmp_path / "cards" / f"card{r}.json").write_text(json.dumps(card))
            (tmp_path / "cards" / f"card{r}.predictions.jsonl").write_text(json.dumps(
                {"id": items[r]["id"], "pred": "x", "prob": 0.5, "truncated": r == 1, "tokens_kept": 128,
                 "tokens_total": 128 + r}) + "\n")
        return merge_cards(spec, 2, 0, "2026-01-01T00:00:00Z")

    res = write({**base, "max_tokens": 128})
    assert res.status == "ok" and res.failure_kind is None
    assert res.observed is not None and res.observed.threads == 1 and res.observed.max_tokens == 128
    by_bucket = res.truncated_by_bucket or {}
    assert by_bucket["medium"]["fraction"] == 1.0 and by_bucket["short"]["fraction"] == 0
    assert decode_result((tmp_path / "result.json").read_bytes()) == res  # written whole, decodes strictly
    res = write({**base, "threads": 2, "dtype": "bfloat16"})
    assert res.status == "error" and res.exit_code == 4 and res.failure_kind == "not_honoured"
    assert res.observed is not None and res.observed.dtype == "card 0: float32; card 1: bfloat16"
    assert res.observed.threads == "card 0: 1; card 1: 2"
    assert "card 1: NotHonoured" in res.error and "card 0" not in res.error
    assert "precision fp32 declared, weights loaded as bfloat16" in res.error
    assert "threads 2 declared for the pass = 1 per worker" in res.error and "torch uses 2" in res.error
    # the raw table: an integer observation that differs between cards is an empty cell, the values in notes
    import pandas as pd

    from lab.passes.records import Attempt
    from lab.report.raw_table import raw_rows, raw_table

    attempt = Attempt(pass_id="merge", variant_id="v", variant=spec.variant, result=res,
                      notes="", repetition=0, position=0, seq=0, attempt=1, launcher="local",
                      start_time="", end_time="", status=res.status, exit_code=res.exit_code,
                      items_total=2, items_completed=2)
    row = raw_table(raw_rows([attempt], "c", 1, tmp_path)).iloc[0]
    assert row["observed_threads"] is pd.NA and row["observed_dtype"] == "card 0: float32; card 1: bfloat16"
    assert "observed threads differs between cards: card 0: 1; card 1: 2" in row["notes"]


def test_verify_rederives_a_two_card_pass_from_its_cards(cards_campaign, tmp_path):
    """verify accepts the 2-card campaign (must-show fixture) and refuses a consistent edit of one
    card's predictions (SHA256SUMS re-hashed) that the merged predictions do not reflect."""
    from test_archive_evidence import read_members, write_members

    from lab.evidence.archive import verify

    assert verify(cards_campaign["archive"]).ok
    files = read_members(cards_campaign["archive"])
    card1 = next(n for n in files if n.endswith("/cards/card1.predictions.jsonl"))
    pid = card1.split("/passes/")[1].split("/")[0]
    lines = files[card1].decode().splitlines(keepends=True)
    first = json.loads(lines[0])
    lines[0] = json.dumps({**first, "pred": "forged" + first["pred"]}) + "\n"
    files[card1] = "".join(lines).encode()
    v = verify(write_members(tmp_path / "forged.tar.gz", files))
    assert not v.ok
    assert any(f"pass {pid}: its predictions are not the merge of its cards' predictions" in p for p in v.problems)
    assert any(f"pass {pid}: card 1's predictions sha256 differs" in p for p in v.problems)
