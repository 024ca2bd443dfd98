"""How long a pass process takes to end, with and without the interpreter's teardown.

A pass process ends with ``lab.passes.events.leave_process`` (threads joined, atexit handlers
run, streams flushed, then ``os._exit``) instead of Python's normal exit, which frees every
torch and transformers object one by one. This script measures both, side by side in one
run, on the same real pass (the demo classifier, a few items of the demo corpus, batch 1):

- lab:    ``python -m lab.passes.runner pass.json`` (what the launchers start);
- python: the same ``main()`` followed by ``sys.exit`` (the interpreter's own teardown).

Rounds alternate the order. Each round's figure is the wall time from the process's start
to its exit, and the time from its last event line to its exit (the teardown a launcher
waits for). Prints the medians and the ratio lab / python of both.

    .venv/bin/python scripts/bench_pass_exit.py [--rounds 6] [--items 8]

Needs the demo model (`make model`); bad input is one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
MODEL = REPO / ".cache" / "models" / "demo-minilm-20ng"
CORPUS = REPO / "demo" / "corpus" / "comparison.jsonl"
NORMAL_EXIT = "import sys; from lab.passes.runner import main; sys.exit(main(sys.argv[1:]))"


def campaign(folder: Path, items: int) -> Path:
    """A one-pass campaign over the first ``items`` items of the demo corpus; its file."""
    rows = CORPUS.read_text(encoding="utf-8").splitlines()[:items]
    (folder / "corpus.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    f = folder / "bench.toml"
    f.write_text(f'''[campaign]
name = "bench-pass-exit"
question = "How long does a pass process take to end?"

[corpus]
path = "corpus.jsonl"

[model]
path = "{MODEL}"

[quality]
metric = "accuracy"
threshold = 0.0
reference_variant = "batch/batch_size=1"
tolerance = 1.0

[timing]
warmup_items = 2
warmup_passes = 1
repetitions = 1
seed = 0
threads = 1

[defaults]
max_length = 128
padding = "longest"

[[series]]
name = "batch"
factor = "batch_size"
values = [1]
''', encoding="utf-8")
    return f


def one(cmd: list[str], env: dict) -> tuple[float, float]:
    """(start to exit s, last event line to exit s) of one pass process."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=str(REPO))
    assert proc.stdout is not None
    last = start
    for _ in proc.stdout:
        last = time.monotonic()
    code = proc.wait()
    end = time.monotonic()
    if code != 0:
        raise SystemExit(f"bench_pass_exit: the pass exited {code}; run it by hand: {' '.join(cmd)}")
    return end - start, end - last


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--items", type=int, default=8)
    args = ap.parse_args(argv)
    if args.rounds < 2 or args.items < 4:
        print("bench_pass_exit: --rounds must be at least 2 and --items at least 4", file=sys.stderr)
        return 2
    if not (MODEL / "config.json").is_file():
        print(f"bench_pass_exit: no demo model at {MODEL}; build it with `make model`", file=sys.stderr)
        return 2
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock

    with tempfile.TemporaryDirectory() as tmp:
        f = campaign(Path(tmp), args.items)
        lock(load_protocol(f))
        orch = Orchestrator.prepare(f, Path(tmp) / "runs", LocalLauncher())
        if orch.run() != "finished":
            print("bench_pass_exit: the campaign's pass did not finish; see its log", file=sys.stderr)
            return 1
        [spec] = list((orch.dir / "passes").glob("*/pass.json"))
        env = {**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
        contenders = {"lab": [sys.executable, "-u", "-m", "lab.passes.runner", str(spec)],
                      "python": [sys.executable, "-u", "-c", NORMAL_EXIT, str(spec)]}
        got: dict[str, list[tuple[float, float]]] = {k: [] for k in contenders}
        for r in range(args.rounds):
            for name in (list(contenders) if r % 2 == 0 else list(contenders)[::-1]):
                got[name].append(one(contenders[name], env))
                status = json.loads((spec.parent / "result.json").read_text())["status"]
                print(f"round {r + 1} {name:<7} total {got[name][-1][0]:6.2f} s  "
                      f"after last event {got[name][-1][1]:5.2f} s  ({status})")
    med = {k: (statistics.median(t for t, _ in v), statistics.median(e for _, e in v)) for k, v in got.items()}
    for k, (total, tail) in med.items():
        print(f"median {k:<7} total {total:6.2f} s  after last event {tail:5.2f} s")
    print(f"ratio lab/python: total {med['lab'][0] / med['python'][0]:.2f}, "
          f"after last event {med['lab'][1] / med['python'][1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
