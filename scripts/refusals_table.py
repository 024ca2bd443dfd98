#!/usr/bin/env python3
"""Write docs/refusals.md: every refusal at `iteralab protocol lock`, from real runs.

Each case edits a copy of the demo campaign (lab/defaults/demo.toml), or the model or corpus
it names, runs `python -m lab.cli protocol lock FILE` in a subprocess and records the line
printed on stderr and the exit code. Nothing in the table is typed by hand: run
`python scripts/refusals_table.py` again after changing a check. Needs the demo model
(`make model`); about a minute on 2 cores.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from lab.facts.host import iteralab_command  # noqa: E402  (the repository's own lab, not an installed one)

# the executable the hints of a `python -m lab.cli` child name on this machine (an absolute path
# when no iteralab is on PATH): the doc shows the plain `iteralab` a user types, never this machine's path
MACHINE_COMMAND = iteralab_command(str(REPO / "lab" / "cli.py"))
DEMO = REPO / "lab" / "defaults" / "demo.toml"
MODEL = REPO / ".cache" / "models" / "demo-minilm-20ng"
CORPUS = REPO / "demo" / "corpus" / "comparison.jsonl"
OUT = REPO / "docs" / "refusals.md"

# (what the user wrote, old text in demo.toml, new text); "MODEL:<edit>" / "CORPUS:<edit>" edit those;
# a tuple of old texts and a tuple of new ones make several edits.
CASES: list[tuple[str, str | tuple[str, ...], str | tuple[str, ...]]] = [
    ("misspelt key in [defaults]", 'precision = "fp32"', 'precison = "bf16"'),
    ("misspelt key in [defaults]", 'padding = "longest"', "batch_sise = 8"),
    ("misspelt key in [timing]", "repetitions = 5", "repetitons = 5"),
    ("misspelt key in [quality]", 'metric = "accuracy"', 'metric = "accuracy"\nthreshhold = 0.5'),
    ("misspelt key in [cost]", "lots = 1", "lost = 1"),
    ("unknown key in a [[series]]", 'factor = "batch_size"', 'factor = "batch_size"\nprecison = "fp16"'),
    ("misspelt section", "[corpus]", "[corpsu]\npath = 'x'\n[corpus]"),
    ("series factor that is not a variant field", 'factor = "batch_size"', 'factor = "batch"'),
    ("boolean where an integer is expected", 'padding = "longest"', "batch_size = true"),
    ("string where a boolean is expected", "bucketing = false", 'bucketing = "yes"'),
    ("string where an integer is expected", "threads = 2 ", 'threads = "2" '),
    ("series value of the wrong type", "values = [1, 4, 8]", 'values = [1, "4", 8]'),
    ("missing required key", 'metric = "accuracy"         # or "macro_f1"', ""),
    ("unknown metric", 'metric = "accuracy"', 'metric = "bleu"'),
    ("threshold outside [0, 1]", "threshold = 0.55", "threshold = 55"),
    ("reference variant not declared", 'reference_variant = "batch/batch_size=1"',
     'reference_variant = "batch/batch_size=2"'),
    ("repetitions below 1", "repetitions = 5", "repetitions = 0"),
    ("repetitions that can never be meant", "repetitions = 5", "repetitions = 100000000"),
    ("threads beyond any host", "threads = 2 ", "threads = 100000 "),
    ("batch size at the int64 maximum", "values = [1, 4, 8]", "values = [1, 4, 9223372036854775807]"),
    ("a series value listed twice", "values = [1, 4, 8]", "values = [1, 4, 4, 8]"),
    ("deadline already past", '# deadline = "2026-12-04T09:00:00+01:00"', 'deadline = "2001-09-10T09:00:00+00:00"'),
    ("deadline out of range once in UTC", '# deadline = "2026-12-04T09:00:00+01:00"',
     'deadline = "9999-12-31T23:59:00-01:00"'),
    ("rotation not implemented", 'rotation = "cyclic"', 'rotation = "random"'),
    ("subgroups not implemented", 'subgroups = "buckets"', 'subgroups = "labels"'),
    ("process policy other than fresh", 'process = "fresh"', 'process = "shared"'),
    ("stall rule of zero seconds", "[timing]", "[timing]\nstall_s = 0"),
    ("unsupported precision", 'precision = "fp32"', 'precision = "int4"'),
    ("package days not offered", "days = 7", "days = 5"),
    ("GPU not in the catalog", 'gpu = "rtx-4090"', 'gpu = "h100"'),
    ("lots below 1", "lots = 1", "lots = 0"),
    ("deadline not a date-time", '# deadline = "2026-12-04T09:00:00+01:00"', 'deadline = "tomorrow"'),
    ("deadline without a time zone", '# deadline = "2026-12-04T09:00:00+01:00"', 'deadline = "2026-12-04T09:00:00"'),
    ("deliverables below 1", "deliverables = 1 ", "deliverables = 0 "),
    ("window with one end", '# window_start = "2026-11-30T09:00:00+01:00"',
     'window_start = "2026-11-30T09:00:00+01:00"'),
    ("window end before start",
     '# window_start = "2026-11-30T09:00:00+01:00"\n# window_end = "2026-12-04T09:00:00+01:00"',
     'window_start = "2026-12-30T09:00:00+01:00"\nwindow_end = "2026-12-04T09:00:00+01:00"'),
    ("campaign name with a path", 'name = "demo-20newsgroups"', 'name = "../../x"'),
    ("secret-looking key in [model]", '# pad_token = "[PAD]"', 'token = "my-access-token"'),
    ("Hugging Face token as a value", '# pad_token = "[PAD]"', 'revision = "hf_xxxxxxxxxxxxxxxxxxxxxxxx"'),
    ("revision next to a local model path", '# pad_token = "[PAD]"', 'revision = "v1.0"'),
    ("password inside a URL", 'path = "@repo/.cache/models/demo-minilm-20ng"',
     'path = "https://user:pass@example.org/model"'),
    ("not valid TOML", "[[series]]", "[[series]]\nbroken ="),
    ("corpus file missing", 'path = "@repo/demo/corpus/comparison.jsonl"', 'path = "missing.jsonl"'),
    ("model folder missing", 'path = "@repo/.cache/models/demo-minilm-20ng"', 'path = "no-such-model"'),
    ("model is not a sequence classifier", "MODEL:architectures", ""),
    ("corpus labels the model cannot produce (integers vs names)", "CORPUS:integer-labels", ""),
    ("a label metric on a corpus without labels", "CORPUS:no-labels", ""),
    ("a corpus labelled only in part", "CORPUS:half-labels", ""),
    ("max_length above the model's positions", "max_length = 256", "max_length = 1024"),
    ("tokenizer without padding token", "MODEL:no-pad", ""),
    ("declared pad_token not in the vocabulary", "MODEL:no-pad", '[model]\npad_token = "<pad>"'),
    ("corpus card counted with another tokenizer", "CARD:other-tokenizer", ""),
    ("device unknown", 'device = "auto"', 'device = "tpu"'),
    ("GPU device on a host without GPU", 'device = "auto"', 'device = "cuda"'),
    ("GPU index beyond the host's GPU count", 'device = "auto"', 'device = "cuda:7"'),
    ("more cards per pass than the host has", 'padding = "longest"', 'padding = "longest"\ncards = 4'),
    ("attention implementation misspelt", 'padding = "longest"', 'padding = "longest"\nattention = "spda"'),
    ("attention kernel whose package is absent", 'padding = "longest"',
     'padding = "longest"\nattention = "flash_attention_2"'),
    ("model folder without weights", "MODEL:no-weights", ""),
    ("weights file cut short (an interrupted copy)", "MODEL:truncated-weights", ""),
    ("corpus card missing", 'card = "@repo/demo/corpus/corpus_card.json"', 'card = "missing_card.json"'),
    ("corpus card of another corpus file", "CARD:other-corpus", ""),
    ("projection rule: a negative minimum window", "repetitions = 5", "repetitions = 5\nmin_window_s = -1"),
    ("projection rule: no accepted pass asked", "repetitions = 5", "repetitions = 5\nmin_accepted_passes = 0"),
    # [task] kinds, the user's own code and metric, generation, embedding, vLLM (several edits: tuples)
    ("[task] kind misspelt", "[corpus]", '[task]\nkind = "embeding"\n[corpus]'),
    ("[task] kind that is not a string", "[corpus]", '[task]\nkind = ["embedding"]\n[corpus]'),
    ("unknown key in [task]", "[corpus]", '[task]\nkind = "embedding"\npoolin = "mean"\n[corpus]'),
    ("embedding pooling not implemented", "[corpus]", '[task]\nkind = "embedding"\npooling = "cls"\n[corpus]'),
    ("a metric that does not judge the task kind", "[corpus]", '[task]\nkind = "embedding"\n[corpus]'),
    ("your own metric for an embedding task", ("[corpus]", 'metric = "accuracy"'),
     ('[task]\nkind = "embedding"\n[corpus]', 'metric = "m.py:score"\ndirection = "higher"')),
    ("your own metric without its direction", 'metric = "accuracy"', 'metric = "m.py:score"'),
    ("your own metric with a wrong direction", 'metric = "accuracy"', 'metric = "m.py:score"\ndirection = "down"'),
    ("your own metric's file missing", 'metric = "accuracy"', 'metric = "missing.py:score"\ndirection = "higher"'),
    ("custom task without an entry", "[corpus]", '[task]\nkind = "custom"\n[corpus]'),
    ("custom entry not file.py:Name", "[corpus]", '[task]\nkind = "custom"\nentry = "model.py"\n[corpus]'),
    ("custom entry file missing", "[corpus]", '[task]\nkind = "custom"\nentry = "missing.py:Model"\n[corpus]'),
    ("generation without prompt and max_new_tokens", "[corpus]", '[task]\nkind = "generation"\n[corpus]'),
    ("generation decoding other than greedy", "[corpus]",
     '[task]\nkind = "generation"\nprompt = "{text}"\nmax_new_tokens = 4\ndecoding = "beam"\n[corpus]'),
    ("generation stop string that is not a string", "[corpus]",
     '[task]\nkind = "generation"\nprompt = "{text}"\nmax_new_tokens = 4\nstop = [1]\n[corpus]'),
    ("generation with padding to max_length", ("[corpus]", 'metric = "accuracy"', 'padding = "longest"'),
     ('[task]\nkind = "generation"\nprompt = "{text}"\nmax_new_tokens = 4\n[corpus]', 'metric = "exact_match"',
      'padding = "max_length"')),
    ("vLLM for a custom task", ("[corpus]", 'padding = "longest"'),
     ('[task]\nkind = "custom"\nentry = "model.py:Model"\n[corpus]', 'padding = "longest"\nengine = "vllm"')),
    ("vLLM with padding to max_length", 'padding = "longest"', 'padding = "max_length"\nengine = "vllm"'),
    ("a vLLM option on a transformers variant", 'padding = "longest"', 'padding = "longest"\nmax_num_seqs = 8'),
    ("a server scenario without a latency objective", "[corpus]", '[scenario]\nkind = "server"\n[corpus]'),
    ("a TTFT objective for a classification server (its answer comes whole)", "[corpus]",
     '[scenario]\nkind = "server"\nttft_s = 1.0\n[corpus]'),
    ("arrivals of burstiness 0", "[corpus]", '[scenario]\nkind = "server"\ne2el_s = 1.0\nburstiness = 0\n[corpus]'),
    ("no request in flight allowed", "[corpus]",
     '[scenario]\nkind = "server"\ne2el_s = 1.0\nmax_concurrency = 0\n[corpus]'),
    ("negative warm-up requests", "[corpus]",
     '[scenario]\nkind = "server"\ne2el_s = 1.0\nwarmup_requests = -3\n[corpus]'),
    ("a share of good requests above 1", "[corpus]",
     '[scenario]\nkind = "server"\ne2el_s = 1.0\nshare = 1.5\n[corpus]'),
    ("a percentile of 150", "[corpus]",
     '[scenario]\nkind = "server"\ne2el_s = 1.0\ne2el_percentile = 150\n[corpus]'),
    ("a negative latency bound", "[corpus]", '[scenario]\nkind = "server"\ne2el_s = -1\n[corpus]'),
    ("a negative peak rate", "[corpus]", '[scenario]\nkind = "server"\ne2el_s = 1.0\npeak_rate = -5\n[corpus]'),
    ("an average rate above the peak", "[corpus]",
     '[scenario]\nkind = "server"\ne2el_s = 1.0\npeak_rate = 5\naverage_rate = 9\n[corpus]'),
    ("a rate search in an offline scenario", "[corpus]", '[scenario]\nsearch = true\n[corpus]'),
]

# Values that lock but are unusual: `protocol lock` succeeds (exit 0) and prints one warning line each.
WARNINGS = [
    ("many repetitions", "repetitions = 5", "repetitions = 50"),
    ("more threads than this host's CPUs", "threads = 2 ", "threads = 512 "),
    ("a batch size above 1024", "values = [1, 4, 8]", "values = [1, 4, 2048]"),
    ("a deadline more than a year ahead", '# deadline = "2026-12-04T09:00:00+01:00"',
     'deadline = "2031-12-04T09:00:00+01:00"'),
    ("fewer repetitions than compare's projection rule needs", "repetitions = 5", "repetitions = 2"),
]


def model_copy(work: Path, edit: str) -> Path:
    out = work / f"model-{edit}"
    out.mkdir()
    for f in MODEL.iterdir():
        (shutil.copyfile(f, out / f.name) if f.suffix == ".json" else (out / f.name).symlink_to(f))
    if edit in ("no-weights", "truncated-weights"):
        weights = out / "model.safetensors"
        weights.unlink()
        if edit == "truncated-weights":
            data = (MODEL / "model.safetensors").read_bytes()
            weights.write_bytes(data[: len(data) // 2])
        return out
    name, key = ("config.json", "architectures") if edit == "architectures" else ("tokenizer_config.json", "pad_token")
    d = json.loads((out / name).read_text())
    d[key] = ["BertModel"] if edit == "architectures" else None
    (out / name).write_text(json.dumps(d))
    return out


def case_file(work: Path, i: int, old: str | tuple[str, ...], new: str | tuple[str, ...]) -> tuple[Path, str]:
    text = DEMO.read_text()
    if isinstance(old, tuple) or isinstance(new, tuple):  # several edits, in order
        assert isinstance(old, tuple) and isinstance(new, tuple), (old, new)
        for o, n in zip(old, new, strict=True):
            assert o in text, o
            text = text.replace(o, n, 1)
        shown = " ⏎ ".join(new)
        return write_case(work, i, text), shown
    shown = new
    if old.startswith("MODEL:"):
        (work / str(i)).mkdir()
        m = model_copy(work / str(i), old[6:])
        text = text.replace('path = "@repo/.cache/models/demo-minilm-20ng"', f'path = "{m}"')
        if new:
            text = text.replace("[model]", new)
        whose = {"MODEL:architectures": 'config.json architectures = ["BertModel"]',
                 "MODEL:no-weights": "model.safetensors is missing",
                 "MODEL:truncated-weights": "model.safetensors holds only its first half"}.get(
                     old, "tokenizer has pad_token = null")
        shown = f"[model] path = a checkpoint whose {whose}" + (f"; {new.splitlines()[1]}" if new else "")
    elif old.startswith("CORPUS:"):
        rows = [json.loads(x) for x in CORPUS.read_text(encoding="utf-8").splitlines()]
        label = {"CORPUS:integer-labels": lambda k, r: str(k % 20), "CORPUS:no-labels": lambda k, r: None,
                 "CORPUS:half-labels": lambda k, r: r["label"] if k % 2 else None}[old]
        c = work / f"corpus-{i}.jsonl"
        c.write_text("".join(json.dumps({**r, "label": label(k, r)}) + "\n" for k, r in enumerate(rows)))
        text = text.replace('path = "@repo/demo/corpus/comparison.jsonl"', f'path = "{c}"').replace(
            'card = "@repo/demo/corpus/corpus_card.json"\n', "")
        shown = {"CORPUS:integer-labels": '[corpus] path = a corpus whose labels are "0".."19"',
                 "CORPUS:no-labels": '[corpus] path = a corpus built with --no-labels; metric = "accuracy"',
                 "CORPUS:half-labels": "[corpus] path = a corpus where every other item has no label"}[old]
    elif old == "CARD:other-corpus":
        card = json.loads((REPO / "demo" / "corpus" / "corpus_card.json").read_text())
        card["comparison"]["sha256"] = "0" * 64
        c = work / f"card-{i}.json"
        c.write_text(json.dumps(card))
        text = text.replace('card = "@repo/demo/corpus/corpus_card.json"', f'card = "{c}"')
        shown = "[corpus] card = a card built for another comparison file (its sha256 differs)"
    elif old == "CARD:other-tokenizer":
        card = json.loads((REPO / "demo" / "corpus" / "corpus_card.json").read_text())
        card["tokenizer"] = {"name": "gpt2 (byte-level BPE)", "fingerprint": "0" * 64}
        c = work / f"card-{i}.json"
        c.write_text(json.dumps(card))
        text = text.replace('card = "@repo/demo/corpus/corpus_card.json"', f'card = "{c}"')
        shown = "[corpus] card = a card whose tokens were counted by another tokenizer (gpt2)"
    else:
        assert old in text, old
        text = text.replace(old, new, 1)
    return write_case(work, i, text), shown


def as_typed(line: str) -> str:
    """``line`` with the hints' executable as a user types it: `iteralab ...` in place of
    :data:`MACHINE_COMMAND` (this machine's absolute path)."""
    if MACHINE_COMMAND != "iteralab":
        line = line.replace(f"`{MACHINE_COMMAND} ", "`iteralab ")
    # the same interpreter named from the repository (the case's paths are shortened before this)
    return line.replace("`.venv/bin/python -m lab.cli ", "`iteralab ")


def write_case(work: Path, i: int, text: str) -> Path:
    f = work / f"case{i:02d}" / "campaign.toml"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(text)
    return f


def main() -> int:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for i, (what, old, new) in enumerate(CASES):
            f, shown = case_file(work, i, old, new)
            r = subprocess.run([sys.executable, "-m", "lab.cli", "protocol", "lock", str(f)], capture_output=True,
                               check=False, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
            lines = r.stderr.strip().splitlines()
            line = (lines[-1] if lines else r.stdout.strip()).replace(str(f.parent) + "/", "").replace(str(work), "…")
            line = as_typed(line.replace(str(REPO) + "/", ""))
            if r.returncode == 0 or len(lines) != 1:
                print(f"case {what!r}: not a one-line refusal (exit {r.returncode}): {r.stderr[-300:]}",
                      file=sys.stderr)
                return 1
            rows.append((what, shown or f"(removed) {old}", line, r.returncode))
            print(f"{r.returncode}  {line[:110]}")
    md = ["# Refusals at `iteralab protocol lock`", "",
          "Generated by `python scripts/refusals_table.py` from real runs of `iteralab protocol lock` on edited",
          "copies of the demo campaign (`lab/defaults/demo.toml`), its model and its corpus, on a host without GPU.",
          "Every refusal is one line on stderr and exit code 2; nothing is locked. The checks live in",
          "`lab/orchestration/config.py` (the campaign file), `lab/orchestration/identity.py` "
          "(secret-looking keys and values, named",
          "by place, never by value), `lab/orchestration/protocol.py` (what a task kind cannot run) and",
          "`lab/orchestration/preflight.py` (corpus, model, host, the user's code); the Plan screen",
          "shows the same checks before locking.", "",
          "| case | input | line printed | exit |", "|---|---|---|---|"]
    esc = lambda s: s.replace("|", "\\|").replace("\n", " ⏎ ")  # noqa: E731
    md += [f"| {esc(w)} | `{esc(i)}` | {esc(line)} | {code} |" for w, i, line, code in rows]
    warned = warnings_rows()
    if warned is None:
        return 1
    md += ["", "## Warnings at `iteralab protocol lock`", "",
           "Values that can be meant but rarely are: the lock goes through (exit 0) and prints one line each on",
           "stderr (`lab.orchestration.protocol.lock_warnings`), before the `locked` line.", "",
           "| case | input | line printed | exit |", "|---|---|---|---|"]
    md += [f"| {esc(w)} | `{esc(i)}` | {esc(line)} | {code} |" for w, i, line, code in warned]
    OUT.write_text("\n".join(md) + "\n", encoding="utf-8")
    print(f"{len(rows)} refusals -> {OUT.relative_to(REPO)}")
    return 0


def warnings_rows() -> list[tuple] | None:
    """(case, input, warning line, exit code) for WARNINGS; None (printed why) when a case does
    not lock or does not print exactly one warning line."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for i, (what, old, new) in enumerate(WARNINGS):
            f, shown = case_file(work, 100 + i, old, new)
            r = subprocess.run([sys.executable, "-m", "lab.cli", "protocol", "lock", str(f)], capture_output=True,
                               check=False, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
            lines = r.stderr.strip().splitlines()
            if r.returncode != 0 or len(lines) != 1 or not lines[0].startswith("iteralab: warning: "):
                print(f"warning case {what!r}: not one warning line (exit {r.returncode}): {r.stderr[-300:]}",
                      file=sys.stderr)
                return None
            rows.append((what, shown, as_typed(lines[0].replace(str(f.parent) + "/", "")), r.returncode))
            print(f"{r.returncode}  {lines[0][:110]}")
    return rows


if __name__ == "__main__":
    sys.exit(main())
