#!/usr/bin/env python3
"""Write docs/compare-cli-example.txt (four real `iteralab compare` runs, from real archives) and
docs/compare-decision-example.md (the decision.md of the first `--allow-short` run).

In a temporary folder, with the command lines a user types (docs/rental.md, "The same steps from
the command line"): `corpus build` cuts 7 items out of the demo corpus; one tiny campaign (batch 1
and 4, 2 repetitions) is locked, run with the local launcher and archived twice, with
`[timing] threads` 1 priced as rtx-4090 and threads 2 priced as b200 (7-day packages); the
b200 campaign run a third time is paused after its first pass and packed with
`archive --partial`; the bundle's catalog (lab/cost/tarifs-forfaits.csv) is copied with
rtx-4090's 7-day price and the version date changed. Then the four `iteralab compare`
commands run in a subprocess each; the transcript holds each command line, its stdout and
stderr lines in the order printed, and its exit status; the decision.md that run DECISION_RUN
wrote is kept as it was written, and its report.html photographed by headless Chromium
(scripts/browser_check.py; the top SHOT_HEIGHT pixels: the decision and the first chart) into
docs/compare-report.png (left as it was, and said, without Chromium). Temporary and repository
paths are shown relative (the script fails if a /tmp/ or /work/ path is left in either file).
Nothing in the files is typed by hand: run `python scripts/compare_example.py` again after
changing compare. Needs the demo model
(`make model`); about three and a half minutes on 2 busy cores.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / ".cache" / "models" / "demo-minilm-20ng"
SOURCE = REPO / "demo" / "corpus" / "comparison.jsonl"
CATALOG = REPO / "lab" / "cost" / "tarifs-forfaits.csv"
OUT = REPO / "docs" / "compare-cli-example.txt"
DECISION_OUT = REPO / "docs" / "compare-decision-example.md"
SHOT_OUT, SHOT_WIDTH, SHOT_HEIGHT = REPO / "docs" / "compare-report.png", 1200, 1700

BUCKETS = {"short": 4, "medium": 2, "long": 1}  # items drawn per length bucket: 7 in all
BATCHES, REPETITIONS, DAYS = [1, 4], 2, 7  # the campaign's series values, [timing] repetitions, [cost] days
# (archive name, [timing] threads, [cost] gpu, passes run before `archive --partial`; None: all)
RENTALS = [("rtx4090", 1, "rtx-4090", None), ("b200", 2, "b200", None), ("partial-b200", 2, "b200", 1)]
EDITED_GPU, EDITED_PRICE, EDITED_VERSION = "rtx-4090", "300.00", "2026-11-30"  # the catalog edit
EDITED = f"catalog-{EDITED_VERSION}.csv"
LOAD = "2000000"
WINDOW = ["--window-start", "2026-12-01T09:00+01:00", "--deadline", "2026-12-07T09:00+01:00"]
COMPARES: list[tuple[list[str], str]] = [  # (arguments after `iteralab compare`, comment shown above the output)
    (["rtx4090.tar.gz", "b200.tar.gz", "--load", LOAD, *WINDOW, "--out", "compare"], ""),
    (["rtx4090.tar.gz", "b200.tar.gz", "--load", LOAD, *WINDOW, "--allow-short", "--out", "compare"], ""),
    (["rtx4090.tar.gz", "partial-b200.tar.gz", "--load", LOAD, "--out", "compare"], ""),
    (["rtx4090.tar.gz", "b200.tar.gz", "--load", LOAD, *WINDOW, "--allow-short", "--catalog", EDITED,
      "--out", "compare"],
     f"# (the bundle catalog edited after the archives were made: {EDITED_GPU} {DAYS}-day package at "
     f"{EDITED_PRICE} {{currency}}, version {EDITED_VERSION})"),
]
DECISION_RUN = 1  # the COMPARES entry whose compare/decision.md becomes DECISION_OUT (--allow-short, bundle catalog)

CAMPAIGN = """[campaign]
name = "rental"
question = "Which configuration processes all my documents at the lowest committed budget?"

[corpus]
path = "../corpus/comparison.jsonl"
card = "../corpus/corpus_card.json"

[model]
path = "@repo/.cache/models/demo-minilm-20ng"

[quality]
metric = "accuracy"
threshold = 0.2
reference_variant = "batch/batch_size=1"
tolerance = 0.05

[timing]
warmup_items = 2
warmup_passes = 1
repetitions = {repetitions}
seed = 0
threads = {threads}

[defaults]
max_length = 128
padding = "longest"

[[series]]
name = "batch"
factor = "batch_size"
values = {batches}

[cost]
gpu = "{gpu}"
days = {days}
lots = 1
"""


def env(runs: Path | None = None) -> dict[str, str]:
    """The environment of every command: this checkout's lab, output unbuffered (stdout and stderr
    keep their order in one pipe), the campaign's own runs folder."""
    e = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    if runs is not None:
        e["ITERALAB_RUNS"] = str(runs)
    return e


def iteralab(args: list[str], cwd: Path, runs: Path | None = None) -> subprocess.CompletedProcess:
    """`iteralab ARGS` (python -m lab.cli) in ``cwd``; raises SystemExit with its output when it fails."""
    r = subprocess.run([sys.executable, "-m", "lab.cli", *args], cwd=cwd, env=env(runs), check=False,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise SystemExit(f"iteralab {' '.join(args)}: exit {r.returncode}\n{r.stdout[-2000:]}")
    return r


def run_paused_after(folder: Path, passes: int) -> None:
    """`campaign run` with `campaign pause` requested while pass ``passes`` runs (pause takes
    effect after the current pass); raises SystemExit unless the run ends paused."""
    p = subprocess.Popen([sys.executable, "-m", "lab.cli", "campaign", "run", "campaign.toml", "--launcher",
                          "local"], cwd=folder, env=env(folder / "runs"), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    assert p.stdout is not None
    lines = []
    for line in p.stdout:
        lines.append(line)
        if line.startswith(f"pass {passes}/") and line.rstrip().endswith(" started"):
            iteralab(["campaign", "pause", "campaign.toml"], folder, folder / "runs")
    from lab.orchestration.status import CampaignState
    from lab.service.campaigns import HEADLESS_EXIT

    if p.wait() != HEADLESS_EXIT[CampaignState.PAUSED] or not lines or not lines[-1].startswith("campaign paused"):
        raise SystemExit(f"campaign run in {folder.name}: not paused after pass {passes}:\n{''.join(lines)[-2000:]}")


def make_rental(work: Path, name: str, threads: int, gpu: str, passes: int | None) -> Path:
    """Lock, run and archive one campaign in work/NAME (its runs folder inside); returns
    work/NAME.tar.gz, a copy of the archive under a short name."""
    folder = work / name
    folder.mkdir()
    (folder / "campaign.toml").write_text(CAMPAIGN.format(threads=threads, gpu=gpu, batches=BATCHES,
                                                          repetitions=REPETITIONS, days=DAYS))
    runs = folder / "runs"
    iteralab(["protocol", "lock", "campaign.toml"], folder, runs)
    if passes is None:
        iteralab(["campaign", "run", "campaign.toml", "--launcher", "local"], folder, runs)
    else:
        run_paused_after(folder, passes)
    packed = iteralab(["archive", "campaign.toml", *(["--partial"] if passes is not None else [])], folder, runs)
    archive = Path(packed.stdout.strip().splitlines()[-1])
    out = work / f"{name}.tar.gz"
    shutil.copyfile(archive, out)
    return out


def edited_catalog(path: Path) -> str:
    """Write the bundle's catalog with EDITED_GPU's DAYS-day price and every row's version changed
    to ``path``; returns the edited row's currency."""
    rows = list(csv.DictReader(io.StringIO(CATALOG.read_text(encoding="utf-8"))))
    if not any(r["catalog_version"] < EDITED_VERSION for r in rows):
        raise SystemExit(f"{CATALOG.name}: its version is not older than {EDITED_VERSION}; raise EDITED_VERSION")
    hit = [r for r in rows if r["gpu"] == EDITED_GPU and r["days"] == str(DAYS)]
    if len(hit) != 1:
        raise SystemExit(f"{CATALOG.name}: no single {EDITED_GPU} {DAYS}-day row to edit")
    hit[0]["price_per_lot"] = EDITED_PRICE
    for r in rows:
        r["catalog_version"] = EDITED_VERSION
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return hit[0]["currency"]


def relative(text: str, work: Path) -> str:
    """``text`` with the paths under ``work`` and under this checkout shown relative to them."""
    text = text.replace(str(work.resolve()) + "/", "").replace(str(work) + "/", "")
    return text.replace(str(REPO) + "/", "")


def transcript(work: Path, currency: str) -> tuple[list[str], str]:
    """The four compare runs in ``work``: '$ iteralab compare ...', the comment, the output lines
    (paths shown relative to ``work``), '(exit N)', a blank line; and the text of the
    compare/decision.md written by run DECISION_RUN (paths made relative the same way). Raises
    SystemExit when that run wrote no decision.md."""
    out: list[str] = []
    decision = None
    for i, (args, comment) in enumerate(COMPARES):
        written = work / args[args.index("--out") + 1] / "decision.md"
        written.unlink(missing_ok=True)  # an earlier run's file is never taken for this one's
        r = subprocess.run([sys.executable, "-m", "lab.cli", "compare", *args], cwd=work, env=env(),
                           check=False, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out += [f"$ iteralab compare {' '.join(args)}", *([comment.format(currency=currency)] if comment else []),
                *relative(r.stdout, work).rstrip("\n").splitlines(), f"(exit {r.returncode})", ""]
        print(f"compare {' '.join(args[:2])}: exit {r.returncode}")
        if i == DECISION_RUN:
            if r.returncode != 0 or not written.is_file():
                raise SystemExit(f"compare run {i + 1}: exit {r.returncode}, no {written.relative_to(work)}")
            decision = relative(written.read_text(encoding="utf-8"), work)
            shutil.copyfile(written.parent / "report.html", work / "decision-report.html")  # the later runs rewrite it
    assert decision is not None  # DECISION_RUN indexes COMPARES
    return out[:-1], decision


def main() -> int:
    if not (MODEL / "config.json").is_file():
        print(f"{MODEL.relative_to(REPO)}: no demo model; run `make model` first", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sizes = [a for b, n in BUCKETS.items() for a in (f"--{b}", str(n))]
        iteralab(["corpus", "build", "--source", str(SOURCE), "--out", "corpus", *sizes], work)
        for name, threads, gpu, passes in RENTALS:
            make_rental(work, name, threads, gpu, passes)
            print(f"{name}.tar.gz packed")
        lines, decision = transcript(work, edited_catalog(work / EDITED))
        shot = screenshot(work / "decision-report.html")
    for what, text in (("the transcript", lines), ("decision.md", decision.splitlines())):
        leaked = [line for line in text if "/tmp/" in line or "/work/" in line or tmp in line]
        if leaked:
            print(f"a long path left in {what}: {leaked[0][:200]}", file=sys.stderr)
            return 1
    made = "; ".join(f"threads {t} priced as {g}" for _, t, g, p in RENTALS if p is None)
    name, gpu, passes = next((n, g, p) for n, _, g, p in RENTALS if p is not None)
    about = (f"Real runs of `iteralab compare`, written by `python scripts/compare_example.py` (nothing typed "
             "by hand: run it again after changing compare). Two tiny CPU campaigns made by the lab with the "
             f"local launcher ({sum(BUCKETS.values())} items of the demo corpus, batch "
             f"{' and '.join(map(str, BATCHES))}, {REPETITIONS} repetitions; {made}; {DAYS}-day packages), "
             f"archived; the {gpu} campaign run again, paused after {passes} pass(es) and packed with "
             f"`archive --partial` ({name}.tar.gz); the archives copied under short names (compare names "
             "each archive by its file name); then an edited copy of the bundle's catalog.")
    about = about.replace("`archive --partial`", "`archive\0--partial`")  # kept on one line
    head = [f"# {line}".replace("\0", " ") for line in textwrap.wrap(about, 108)] + [""]
    OUT.write_text("\n".join(head + lines) + "\n", encoding="utf-8")
    print(f"{len(lines)} lines -> {OUT.relative_to(REPO)}")
    note = (f"<!-- Written by `python scripts/compare_example.py`: the compare/decision.md of its run "
            f"`iteralab compare {' '.join(COMPARES[DECISION_RUN][0])}` (the whole run in "
            f"{OUT.relative_to(REPO)}); nothing typed by hand. -->")
    DECISION_OUT.write_text(f"{note}\n\n{decision.rstrip()}\n", encoding="utf-8")
    print(f"{len(decision.splitlines())} lines -> {DECISION_OUT.relative_to(REPO)}")
    readme_excerpt(lines)
    return shot


README = REPO / "README.md"
README_MARK = "A real run of two tiny CPU archives"
"""The README paragraph whose next indented block is the decision path of the --allow-short run."""
EXCERPT_WIDTH = 150


def readme_excerpt(lines: list[str]) -> None:
    """Replace the README's excerpt (the block after README_MARK) with the numbered lines of the
    transcript's second command (the --allow-short run), each cut at a word within EXCERPT_WIDTH."""
    runs = "\n".join(lines).split("\n$ ")
    path = [x for x in runs[1].splitlines()[1:] if re.match(r"\d+\. ", x)]
    text = README.read_text(encoding="utf-8")
    start = text.index("\n\n", text.index(README_MARK)) + 2
    end = text.index("\n\n", start)
    block = "\n".join("    " + (x if len(x) <= EXCERPT_WIDTH else x[:EXCERPT_WIDTH].rsplit(" ", 1)[0] + " ...")
                      for x in path)
    README.write_text(text[:start] + block + text[end:], encoding="utf-8")
    print(f"{len(path)} lines -> README.md's excerpt")


def screenshot(page: Path) -> int:
    """SHOT_OUT: the top SHOT_HEIGHT pixels of ``page`` at SHOT_WIDTH, by headless Chromium
    (scripts/browser_check.py); 0 and SHOT_OUT left as it was when Chromium is missing, 1 when the
    page fetched anything or logged an error."""
    from PIL import Image

    sys.path.insert(0, str(REPO / "scripts"))
    from browser_check import check_html, find_chromium

    if find_chromium() is None:
        print(f"chromium not found: {SHOT_OUT.relative_to(REPO)} left as it was")
        return 0
    full = page.with_suffix(".png")
    result = check_html(page, full, SHOT_WIDTH)
    if result["requests"] or result["console_errors"]:
        print(f"{page.name}: fetched {result['requests']} or logged {result['console_errors']}", file=sys.stderr)
        return 1
    with Image.open(full) as image:
        image.crop((0, 0, SHOT_WIDTH, min(SHOT_HEIGHT, image.height))).save(SHOT_OUT)
    print(f"report.html's top {SHOT_HEIGHT} px -> {SHOT_OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
