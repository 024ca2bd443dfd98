"""Run one bench script and keep its reading: what it printed, with where, when and on what.

    python scripts/bench_record.py NAME [--docs] -- COMMAND ...   # run COMMAND, keep the reading
    python scripts/bench_record.py --render                       # every page's blocks again
    python scripts/bench_record.py --check                        # exit 1 naming a stale block

A reading is one JSON file, ``NAME.json``: ``name``, ``command`` (as run, the interpreter's path
shortened to ``python``), ``commit`` (``git rev-parse --short HEAD``) and ``dirty`` (uncommitted
changes to the working tree's code: docs and Markdown pages left out), both taken at the start,
``date`` (UTC, at the start), ``wall_s``, ``machine`` (CPU model, cores, memory GiB, Python),
``load_start``/``load_end`` (1-minute load average), ``exit`` and ``output`` (everything COMMAND
printed on stdout and stderr, as printed). It goes to ``runs/bench-readings/`` (what `make bench`
keeps), or with ``--docs`` to ``docs/bench-readings/``, and then the block for NAME, between ``<!--
reading:NAME -->`` and ``<!-- /reading:NAME -->``, in docs/benchmarks.md or any other page of
:func:`pages`, is written again from it (:func:`render`): the figures in the docs are the script's
own output, never copied by hand. ``--check`` (run by tests/unit/test_bench_record.py) fails when a
block differs from its reading's rendering or names a reading that is not there.

A GPU check's output comes back from a lent device as files (docs/gpu-readings/NAME-*: the
verdict line, the raw tables) with ``NAME.json`` saying how it was run; the block between
``<!-- gpu:NAME -->`` and ``<!-- /gpu:NAME -->`` is written from them the same way (:func:`render_gpu`).

Exit status: COMMAND's (a failing bench keeps its reading: its output says why); 2 for bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "runs" / "bench-readings"
DOCS = REPO / "docs" / "bench-readings"
PAGE = REPO / "docs" / "benchmarks.md"  # the readings' own page; any docs page may hold a block


def pages() -> list[Path]:
    """The pages whose reading blocks are written from the readings: README.md and docs/*.md."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCK = re.compile(r"<!-- reading:(?P<name>[\w-]+) -->\n.*?<!-- /reading:(?P=name) -->", re.S)
GPU = REPO / "docs" / "gpu-readings"
GPU_BLOCK = re.compile(r"<!-- gpu:(?P<name>[\w-]+) -->\n.*?<!-- /gpu:(?P=name) -->", re.S)
GPU_COLUMNS = (("variant_label", "variant"), ("status", "status"), ("corpus_accepted", "accepted"),
               ("measured_s", "measured window, s"), ("peak_allocated_bytes", "peak allocated, MB"),
               ("peak_reserved_bytes", "peak reserved, MB"), ("device_used_bytes", "device used, MB"),
               ("utilization", "utilization"))


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False).stdout.strip()


def machine() -> dict:
    """CPU model, cores, memory (GiB) and Python of this machine."""
    info = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").is_file() else []
    cpu = next((ln.split(":", 1)[1].strip() for ln in info if ln.startswith("model name")), platform.processor())
    mem = next((int(ln.split()[1]) for ln in Path("/proc/meminfo").read_text().splitlines()
                if ln.startswith("MemTotal")), 0) if Path("/proc/meminfo").is_file() else 0
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem / 2**20, 1),
            "python": platform.python_version()}


def shown(command: list[str]) -> str:
    """COMMAND as a reader would type it: the lab's interpreter (this one, or the venv's that runs
    the command) as ``python``, another interpreter (a peer's venv) and other paths from the
    repository."""
    root = str(REPO) + "/"
    lab = {os.path.abspath(sys.executable), os.path.abspath(REPO / ".venv" / "bin" / "python")}

    def word(w: str) -> str:
        if w.endswith("/bin/python") and os.path.abspath(REPO / w) in lab:
            return "python"
        return w.removeprefix(root)

    return " ".join(word(w) for w in command)


def run(name: str, command: list[str]) -> dict:
    """Run ``command``, echoing its output; the reading (see the module's docstring)."""
    start_date = datetime.now(UTC).isoformat(timespec="seconds")
    load_start = os.getloadavg()[0]
    commit = git("rev-parse", "--short", "HEAD")  # what runs is what the tree holds now, not at the end
    # changes to the code the command runs; the docs (earlier readings of the same `make bench
    # RECORD=--docs`, the pages they are written into) change nothing it measures
    dirty = bool(git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)docs",
                     ":(exclude)*.md"))
    start = time.monotonic()
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        lines.append(line)
    rc = proc.wait()
    return {"name": name, "command": shown(command), "commit": commit, "dirty": dirty, "date": start_date,
            "wall_s": round(time.monotonic() - start, 1), "machine": machine(),
            "load_start": round(load_start, 2), "load_end": round(os.getloadavg()[0], 2),
            "exit": rc, "output": "".join(lines)}


def render(reading: dict) -> str:
    """The Markdown block of one reading: where it comes from, then the output as printed."""
    m = reading["machine"]
    dirty = " plus uncommitted changes" if reading["dirty"] else ""
    failed = f"; it exited {reading['exit']}" if reading["exit"] else ""
    return (f"<!-- reading:{reading['name']} -->\n"
            f"Reading `{reading['name']}`, written by `scripts/bench_record.py` from "
            f"`{reading['command']}`: {reading['date']}, commit {reading['commit']}{dirty}, "
            f"{m['cpu']} ({m['cores']} cores, {m['memory_gib']} GiB, Python {m['python']}), 1-minute load "
            f"average {reading['load_start']:.2f} at the start and {reading['load_end']:.2f} at the end, "
            f"{reading['wall_s']:.0f} s{failed} (docs/bench-readings/{reading['name']}.json):\n\n"
            "```\n" + reading["output"].rstrip("\n") + "\n```\n"
            f"<!-- /reading:{reading['name']} -->")


def gpu_cell(column: str, value: str) -> str:
    """One cell of a GPU reading's table: bytes as MB (10^6), seconds to 2 decimals, utilization
    as a percentage, the rest as the raw table wrote it; an empty cell stays empty."""
    if value == "":
        return ""
    if column.endswith("_bytes"):
        return f"{int(value) / 1e6:,.1f}"
    if column == "measured_s":
        return f"{float(value):.2f}"
    if column == "utilization":
        return f"{float(value):.1%}"
    return value


def render_gpu(name: str, folder: Path = GPU) -> str:
    """The Markdown block of the GPU reading ``name``: its origin (``NAME.json``: ``command``,
    ``commit``, ``date``, ``device``, ``environment``), the check's verdict line as it printed it
    (``NAME-gpu_check.log``) and one row per pass of its demo campaign (``NAME-demo-raw_table.csv``,
    the archive's raw table as it came back). Raises OSError / KeyError for a missing file or field."""
    import csv

    meta = json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
    log = (folder / f"{name}-gpu_check.log").read_text(encoding="utf-8").rstrip("\n")
    with open(folder / f"{name}-demo-raw_table.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    table = ["| " + " | ".join(h for _, h in GPU_COLUMNS) + " |", "|" + "---|" * len(GPU_COLUMNS)]
    table += ["| " + " | ".join(gpu_cell(c, r.get(c, "")) for c, _ in GPU_COLUMNS) + " |" for r in rows]
    return (f"<!-- gpu:{name} -->\n"
            f"GPU reading `{name}`, written by `scripts/bench_record.py` from docs/gpu-readings/{name}.json and "
            f"the files beside it: `{meta['command']}` at commit {meta['commit']} on {meta['date']}, "
            f"{meta['device']}; {meta['environment']}. The check's output as it came back "
            f"(`{name}-gpu_check.log`):\n\n```\n{log}\n```\n\n"
            f"Its demo campaign's passes (`{name}-demo-raw_table.csv`):\n\n" + "\n".join(table) + "\n"
            f"<!-- /gpu:{name} -->")


def readings(folder: Path = DOCS) -> dict[str, dict]:
    return {f.stem: json.loads(f.read_text(encoding="utf-8")) for f in sorted(folder.glob("*.json"))}


def page_with_readings(text: str, kept: dict[str, dict], page: Path = PAGE) -> tuple[str, list[str]]:
    """``text`` with every reading block written again from ``kept``; (text, problems): a block
    whose reading is not kept is left as it is and named."""
    problems: list[str] = []

    def again(match: re.Match) -> str:
        name = match["name"]
        if name not in kept:
            problems.append(f"{page.name}: block reading:{name} has no docs/bench-readings/{name}.json")
            return match[0]
        return render(kept[name])

    def gpu_again(match: re.Match) -> str:
        try:
            return render_gpu(match["name"])
        except (OSError, KeyError, ValueError) as exc:
            problems.append(f"{page.name}: block gpu:{match['name']} cannot be written from docs/gpu-readings/ ({exc})")
            return match[0]

    return GPU_BLOCK.sub(gpu_again, BLOCK.sub(again, text)), problems


def main(argv: list[str]) -> int:
    if argv[:1] in (["--render"], ["--check"]):
        problems: list[str] = []
        kept = readings()
        for page in pages():
            text = page.read_text(encoding="utf-8")
            new, found = page_with_readings(text, kept, page)
            problems += found
            if argv[0] == "--render" and new != text:
                page.write_text(new, encoding="utf-8")
            elif argv[0] == "--check" and new != text:
                problems.append(f"{page.name}: a reading block differs from its reading; run "
                                "`python scripts/bench_record.py --render`")
        for p in problems:
            print(f"bench_record: {p}", file=sys.stderr)
        return 1 if problems else 0
    p = argparse.ArgumentParser(prog="bench_record.py", description=__doc__.split("\n\n")[0])
    p.add_argument("name", help="the reading's name (letters, digits, - and _)")
    p.add_argument("--docs", action="store_true", help="keep it in docs/bench-readings/ and render the page")
    cut = argv.index("--") if "--" in argv else len(argv)
    a, command = p.parse_args(argv[:cut]), argv[cut + 1:]
    if not re.fullmatch(r"[\w-]+", a.name) or not command:
        p.error("give NAME (letters, digits, - and _) and, after --, the command to run")
    reading = run(a.name, command)
    folder = DOCS if a.docs else RUNS
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{a.name}.json").write_text(json.dumps(reading, indent=1) + "\n", encoding="utf-8")
    print(f"bench_record: reading {a.name} -> {(folder / f'{a.name}.json').relative_to(REPO)}")
    if a.docs:
        holding = [pg for pg in pages() if f"<!-- reading:{a.name} -->" in pg.read_text(encoding="utf-8")]
        if not holding:
            print(f"bench_record: no page holds a block reading:{a.name} yet: add the two marker lines where it "
                  f"belongs (docs/benchmarks.md or another docs page), then run `python scripts/bench_record.py "
                  "--render`", file=sys.stderr)
        for pg in holding:
            pg.write_text(page_with_readings(pg.read_text(encoding="utf-8"), readings(), pg)[0], encoding="utf-8")
    return reading["exit"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
