"""`make bench-peer`: the lab's measured window against optimum-benchmark's inference scenario.

Same demo model, batch size, thread count and fixed input lengths (default 128 and 256
tokens) for both; rounds alternate which goes first (rounds numbered from 1 as printed and in
runs/bench_peer.json: odd rounds peer>lab, even rounds lab>peer, for each length).
- peer: optimum-benchmark 0.6.0's inference scenario (scripts/bench_peer_worker.py), in its
        own venv (it needs transformers < 5; the lab's venv has transformers 5), so in its
        own process, started once per round and length: inline launcher, PyTorch backend on
        CPU, ``inter_op_num_threads`` = threads, input shapes batch x length (random token
        ids), ``iterations`` = items / batch forwards after its ``warmup_runs``, duration 0.
        Its figure: forward.throughput (samples/s = batch / mean forward latency), a
        FORWARD-ONLY window on tensors built before timing.
- lab:  in this process (the lab's venv), the same window as `make bench`'s "lab"
        contender (scripts/bench.py: read the corpus file, tokenize, pad, forward, softmax
        and argmax materialized on the host, progress events, peak reset/read), on
        ``items`` real demo-corpus texts that are all at least ``length`` tokens long, so
        that truncation at ``length`` makes every batch exactly batch x length (checked).
        One untimed run first; its model stays loaded between rounds.
Both exclude model loading and warm-up. ratio lab_over_peer = lab items/s / peer samples/s,
from the medians over rounds. Writes runs/bench_peer.json (raw per-round figures) and prints
a table. Every option, the model folder, the peer venv's python and the output path are
checked before any model load: bad input is one line on stderr, exit 2, nothing written lost.

    .venv/bin/python scripts/bench_peer.py [--rounds 4] [--items 128] [--batch 8] \
        [--lengths 128,256] [--threads 1] [--peer-python .cache/bench-peer-venv/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import bench  # noqa: E402  (scripts/bench.py: the lab's window and the machine facts, in one place)
import bench_args  # noqa: E402  (scripts/bench_args.py: the argument checks shared by the bench scripts)
from bench_args import UsageError  # noqa: E402

PEER_VENV = REPO / ".cache/bench-peer-venv"
CORPORA = ("demo/corpus/comparison.jsonl", "demo/corpus/tuning.jsonl")
WINDOWS = {"lab": "read corpus file + tokenize + pad + forward + softmax/argmax to host lists "
                  "(lab.passes.tasks.classification.run_batches, as `make bench`)",
           "peer": "forward only, on input tensors built before timing (optimum-benchmark "
                   "inference scenario, forward.throughput)"}


class PeerReportError(ValueError):
    """An optimum-benchmark report without the forward throughput this script compares."""


def parse_peer_report(data: dict, batch: int) -> dict:
    """The figures of one optimum-benchmark inference report (BenchmarkReport.to_dict()).

    ``data``: the worker's JSON ({"report": {...}, "torch_num_threads": n, "versions": {...}}).
    Returns {"samples_per_s", "forward_latency_mean_s", "forward_count", "torch_num_threads"}.
    Raises PeerReportError when forward.throughput is absent, is not in samples/s, or does not
    equal batch / mean forward latency (optimum-benchmark 0.6.0's Throughput.from_latency).
    """
    try:
        fwd = data["report"]["forward"]
        thr, lat = fwd["throughput"], fwd["latency"]
        value, unit, mean, count = float(thr["value"]), thr["unit"], float(lat["mean"]), int(lat["count"])
    except (KeyError, TypeError, ValueError) as e:
        raise PeerReportError(f"no forward throughput/latency in the report ({type(e).__name__}: {e})") from e
    if unit != "samples/s":
        raise PeerReportError(f"forward throughput unit is {unit!r}, expected 'samples/s'")
    if count < 1 or mean <= 0 or abs(value - batch / mean) > 1e-6 * value:
        raise PeerReportError(f"forward throughput {value} is not batch {batch} / mean latency {mean} s")
    return {"samples_per_s": value, "forward_latency_mean_s": mean, "forward_count": count,
            "torch_num_threads": data.get("torch_num_threads")}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = bench_args.parser("bench-peer", __doc__)
    ap.add_argument("--rounds", type=int, default=4, help="timed rounds; each runs both sides at every length")
    ap.add_argument("--items", type=int, default=128, help="items per lab window; peer iterations = items / batch")
    ap.add_argument("--batch", type=int, default=8, help="batch size in items, both sides")
    ap.add_argument("--lengths", default="128,256", help="fixed input lengths in tokens, comma-separated")
    ap.add_argument("--threads", type=int, default=1, help="torch threads, both sides")
    ap.add_argument("--warmup-runs", type=int, default=10, help="the peer's warm-up forwards (its default)")
    ap.add_argument("--model", default=str(REPO / ".cache/models/demo-minilm-20ng"),
                    help="local transformers sequence-classification checkpoint folder")
    ap.add_argument("--peer-python", default=str(PEER_VENV / "bin/python"),
                    help="python of the venv holding optimum-benchmark (`make bench-peer` creates it)")
    ap.add_argument("--out", default=str(REPO / "runs/bench_peer.json"),
                    help="result file (JSON); replaced only once the run is complete")
    a = ap.parse_args(argv)
    try:
        a.lengths = [int(x) for x in a.lengths.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--lengths {a.lengths!r} is not a comma-separated list of integers, e.g. 128,256") from None
    if not a.lengths or min(a.lengths) < 8:
        raise UsageError("--lengths needs at least one length of 8 tokens or more, e.g. 128,256")
    bench_args.require_at_least(a, 1, "rounds", "items", "batch", "threads")
    bench_args.require_at_least(a, 0, "warmup_runs")
    if a.items % a.batch:
        raise UsageError(f"--items {a.items} is not a multiple of --batch {a.batch}: both sides must run "
                         f"whole batches (e.g. --items {a.items - a.items % a.batch or a.batch})")
    a.out = bench_args.check_output_path(a.out)
    return a


def in_peer_venv(python: Path) -> bool:
    """Whether ``python`` lies inside the project's peer venv (PEER_VENV). The folders are resolved,
    not the file: a venv's bin/python is a link to the system python."""
    p = python.absolute()
    return (p.parent.resolve() / p.name).is_relative_to(PEER_VENV.resolve())


def check_prerequisites(a: argparse.Namespace) -> None:
    """Raise UsageError (with its fix) for a missing or unfit model, length or peer venv."""
    config = bench_args.check_model_folder(a.model)
    bench_args.check_lengths_fit(config, a.lengths, "--lengths")
    peer = Path(a.peer_python)
    point = "point --peer-python at the peer venv's python (`make bench-peer` creates .cache/bench-peer-venv)"
    if not peer.is_file():
        if in_peer_venv(peer):
            raise UsageError(f"no optimum-benchmark venv ({peer} missing): run `make bench-peer`, which creates "
                             f"it from scripts/bench_peer_requirements.txt (needs PyPI)")
        raise UsageError(f"--peer-python {peer} is {'not a file' if peer.exists() else 'missing'}; {point}")
    if not os.access(peer, os.X_OK):
        raise UsageError(f"--peer-python {peer} is not executable; {point}")
    try:
        probe = subprocess.run([str(peer), "-c", "import optimum_benchmark.version, transformers"],
                               check=False, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise UsageError(f"--peer-python {peer} does not run as a python ({type(e).__name__}); {point}") from None
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        fix = (f"delete {PEER_VENV} and run `make bench-peer` again" if in_peer_venv(peer) else point)
        raise UsageError(f"{peer} cannot import optimum_benchmark ({last}): {fix}")


def fixed_length_corpus(tok, items: int, length: int, path: Path, batch: int) -> list[dict]:
    """Write ``items`` demo-corpus rows whose texts have >= ``length`` tokens (specials included).
    Raises UsageError when fewer exist; its fix names the largest multiple of ``batch`` there is."""
    from lab.inputs.corpus import read_corpus
    from lab.passes.inference import tokenize

    rows = [r for c in CORPORA for r in read_corpus(REPO / c)]
    ids, _ = tokenize([r["text"] for r in rows], tok, length)
    keep = [r for r, x in zip(rows, ids, strict=True) if len(x) == length][:items]
    if len(keep) < items:
        raise UsageError(f"only {len(keep)} demo-corpus items have {length} tokens or more; "
                         f"lower --items to {len(keep) - len(keep) % batch or batch} or --lengths")
    path.write_text("".join(json.dumps(r) + "\n" for r in keep), encoding="utf-8")
    return keep


def round_order(number: int) -> tuple[str, str]:
    """Which side goes first in round ``number`` (numbered from 1, as printed and written):
    odd rounds peer>lab, even rounds lab>peer (the module docstring says the same)."""
    return ("peer", "lab") if number % 2 == 1 else ("lab", "peer")


def run_peer(a: argparse.Namespace, length: int, out: Path) -> dict:
    cmd = [a.peer_python, str(REPO / "scripts/bench_peer_worker.py"), "--model", a.model, "--batch", str(a.batch),
           "--sequence-length", str(length), "--threads", str(a.threads), "--iterations", str(a.items // a.batch),
           "--duration", "0", "--warmup-runs", str(a.warmup_runs), "--out", str(out)]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    t0 = time.perf_counter()
    p = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, cwd=REPO)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"optimum-benchmark run (length {length}) failed, exit {p.returncode}: {last}")
    data = json.loads(out.read_text(encoding="utf-8"))
    return {**parse_peer_report(data, a.batch), "process_s": time.perf_counter() - t0,
            "versions": data.get("versions", {})}


def run_lab(ctx: dict) -> dict:
    t0 = time.perf_counter()
    _, win = bench.lab(ctx)
    s = time.perf_counter() - t0
    fixed = win.batches_at_max_length == win.batches and win.padded_tokens == win.real_tokens
    return {"seconds": s, "items_per_s": win.items_done / s, "fixed_shape": fixed, "batches": win.batches}


def table(res: dict) -> str:
    lines = [f"{'length':>6} {'lab items/s':>12} {'peer samples/s':>15} {'lab_over_peer':>14}  per-round ratios"]
    for key, r in res["per_length"].items():
        lines.append(f"{key:>6} {r['lab_items_per_s_median']:>12.3f} {r['peer_samples_per_s_median']:>15.3f} "
                     f"{r['lab_over_peer']:>14.3f}  " + " ".join(f"{x:.3f}" for x in r["lab_over_peer_per_round"]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    sys.stdout.reconfigure(line_buffering=True)  # each round shows as it ends, also through a pipe

    def parse() -> argparse.Namespace:
        a = parse_args(argv)
        check_prerequisites(a)
        return a

    return bench_args.run("bench-peer", parse, measure)


def measure(a: argparse.Namespace, tmp: Path) -> int:
    """The rounds; writes ``a.out``. Returns the exit status (1: a side failed, 2: too few items)."""
    import torch

    from lab.passes.inference import load_model

    torch.set_num_threads(a.threads)
    tok, model = load_model(a.model, "fp32", "cpu")
    ctxs = {}
    try:
        for length in a.lengths:
            path = tmp / f"fixed_{length}.jsonl"
            fixed_length_corpus(tok, a.items, length, path, a.batch)
            ctxs[length] = {"path": path, "tok": tok, "model": model, "batch": a.batch, "max_length": length}
    except UsageError as e:
        print(f"bench-peer: {e}", file=sys.stderr)
        return 2
    info = bench.machine()
    info.update(nice=os.nice(0), threads=a.threads, transformers=__import__("transformers").__version__)
    print(f"batch {a.batch}, lengths {a.lengths}, {a.items} items per lab window = {a.items // a.batch} peer "
          f"forwards, threads {a.threads}, {a.rounds} rounds; {info['cpu']} ({info['cores']} cores), "
          f"nice {info['nice']}, load {info['load_average_1m_start']:.2f}")
    print(f"lab window:  {WINDOWS['lab']}\npeer window: {WINDOWS['peer']}\n"
          "two venvs, two processes: lab in this process, peer in a fresh process per round and length")
    for length in a.lengths:  # untimed: first-call costs stay out of the rounds
        warm = run_lab(ctxs[length])
        if not warm["fixed_shape"]:
            print(f"bench-peer: the lab's batches at length {length} are not all {a.batch} x {length}", file=sys.stderr)
            return 1
    rounds: list[dict] = []
    peer_versions: dict = {}
    print(f"{'round':>5} {'length':>6} {'order':>9} {'lab_s':>8} {'lab it/s':>9} {'peer sa/s':>10} "
          f"{'ratio':>6} {'load':>5}")
    for r in range(a.rounds):
        order = round_order(r + 1)
        for length in a.lengths:
            row: dict = {"round": r + 1, "length": length, "order": list(order)}
            for side in order:
                if side == "lab":
                    row["lab"] = run_lab(ctxs[length])
                else:
                    try:
                        row["peer"] = run_peer(a, length, tmp / f"peer_{r}_{length}.json")
                    except (RuntimeError, PeerReportError) as e:
                        print(f"bench-peer: {e}", file=sys.stderr)
                        return 1
                    peer_versions = row["peer"].pop("versions")
            row["load_average_1m"] = os.getloadavg()[0]
            row["lab_over_peer"] = row["lab"]["items_per_s"] / row["peer"]["samples_per_s"]
            rounds.append(row)
            print(f"{r + 1:>5} {length:>6} {'>'.join(order):>9} {row['lab']['seconds']:>8.3f} "
                  f"{row['lab']['items_per_s']:>9.3f} {row['peer']['samples_per_s']:>10.3f} "
                  f"{row['lab_over_peer']:>6.3f} {row['load_average_1m']:>5.2f}")
    per_length = {}
    for length in a.lengths:
        rows = [x for x in rounds if x["length"] == length]
        lab_med = statistics.median(x["lab"]["items_per_s"] for x in rows)
        peer_med = statistics.median(x["peer"]["samples_per_s"] for x in rows)
        per_length[str(length)] = {
            "lab_seconds": [round(x["lab"]["seconds"], 6) for x in rows],
            "lab_items_per_s": [round(x["lab"]["items_per_s"], 4) for x in rows],
            "peer_samples_per_s": [round(x["peer"]["samples_per_s"], 4) for x in rows],
            "peer_forward_latency_mean_s": [round(x["peer"]["forward_latency_mean_s"], 6) for x in rows],
            "peer_forward_count": [x["peer"]["forward_count"] for x in rows],
            "peer_torch_num_threads": [x["peer"]["torch_num_threads"] for x in rows],
            "peer_process_s": [round(x["peer"]["process_s"], 3) for x in rows],  # start to exit, outside its window
            "orders": [x["order"] for x in rows],
            "load_average_1m": [round(x["load_average_1m"], 2) for x in rows],
            "lab_items_per_s_median": round(lab_med, 4), "peer_samples_per_s_median": round(peer_med, 4),
            "lab_over_peer": round(lab_med / peer_med, 4),
            "lab_over_peer_per_round": [round(x["lab_over_peer"], 4) for x in rows],
        }
    res = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {**info, "load_average_1m_end": os.getloadavg()[0]},
        "model": a.model, "batch_size": a.batch, "threads": a.threads, "lengths": a.lengths,
        "items": a.items, "peer_iterations": a.items // a.batch, "peer_warmup_runs": a.warmup_runs,
        "rounds": a.rounds, "windows": WINDOWS,
        "processes": "lab in the bench process (lab venv); peer in a fresh process per round and length "
                     "(peer venv, inline launcher); order alternates by round",
        "peer": {"venv_python": a.peer_python, **peer_versions},
        "per_length": per_length,
        "lab_over_peer": {k: v["lab_over_peer"] for k, v in per_length.items()},
    }
    out = a.out
    try:
        bench_args.write_json_atomic(out, res)
    except OSError as e:
        print(f"bench-peer: could not write {out} ({e}); the previous file, if any, is unchanged", file=sys.stderr)
        return 1
    print(table(res))
    print(f"lab_over_peer is a throughput ratio: the lab's whole window (reading, tokenizing, materializing) "
          f"over the peer's forward-only figure. load {res['machine']['load_average_1m_end']:.2f}; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
