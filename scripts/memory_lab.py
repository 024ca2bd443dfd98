#!/usr/bin/env python3
"""Memory lab: estimate vs observed peak memory over a grid of batch x length.

Checks the environment first (torch and its build, device visible, versions, model),
exits 2 with a one-line reason when something needed is missing. Then, for each
(length, batch): the estimate (lab.memory.estimate) and one real forward pass
(lab.memory.observe), printed as a table with the error; a PNG plot; optional JSON/CSV;
with a budget, the largest batch per length bucket (lab.memory.feasibility).

    python scripts/memory_lab.py                       # demo model, auto device
    python scripts/memory_lab.py --batches 1,8 --lengths 128,512 --plot out.png --json out.json
    python scripts/memory_lab.py --device cuda --precision bf16 --budget-bytes 24e9
    python scripts/memory_lab.py --task generation --batches 1,8 --lengths 64,128 --max-new-tokens 16

``--task generation``: the demo generator (a causal LM) by default; each cell is one greedy
``generate`` of exactly ``--max-new-tokens`` tokens after prompts of each length, against
lab.memory.estimate.estimate_generation (weights + KV cache + prefill activations + logits).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DEMO_MODEL = ROOT / ".cache/models/demo-minilm-20ng"
DEMO_GENERATOR = ROOT / ".cache/models/demo-gen-20ng"
DEMO_CORPUS = ROOT / "demo/corpus/comparison.jsonl"
MB = 2**20


def fail(msg: str) -> None:
    print(f"memory_lab: {msg}", file=sys.stderr)
    sys.exit(2)


def ints(text: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected integers separated by commas") from None
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected integers >= 1")
    return vals


def check_environment(args) -> dict:
    """Versions and device; exits 2 when torch, transformers, the device or the model is missing."""
    try:
        import torch
    except ImportError:
        fail("torch is not installed in this Python; install it (pip install torch) or run inside the lab image")
    try:
        import transformers
    except ImportError:
        fail("transformers is not installed; pip install transformers")
    from lab.passes.inference import DeviceUnavailable, resolve_device

    build = "rocm" if torch.version.hip else ("cuda" if torch.version.cuda else "cpu")
    try:
        device, backend = resolve_device(args.device)
    except DeviceUnavailable as exc:
        fail(str(exc))
    env = {"python": platform.python_version(), "torch": torch.__version__, "torch_build": build,
           "cuda_runtime": torch.version.cuda, "hip_runtime": torch.version.hip,
           "transformers": transformers.__version__, "device": device, "backend": backend,
           "threads": torch.get_num_threads(), "gpu": None}
    if device.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name(device)
    if not (Path(args.model) / "config.json").exists() and args.model.count("/") != 1:
        target = "model-gen" if args.task == "generation" else "model"
        fail(f"model {args.model} not found; build the demo model with `make {target}` or pass --model")
    if not Path(args.corpus).exists():
        fail(f"corpus {args.corpus} not found; pass --corpus (JSONL with text and bucket)")
    if args.precision != "fp32" and device == "cpu":
        print(f"note: {args.precision} on CPU is measured as asked; GPU figures will differ", file=sys.stderr)
    return env


def load_texts(path: str, bucket: str) -> tuple[list[str], dict[str, int]]:
    """Texts of ``bucket`` (longest first) and the longest item per bucket in tokens."""
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    longest: dict[str, int] = {}
    for r in rows:
        if "bucket" in r and "n_tokens" in r:
            longest[r["bucket"]] = max(longest.get(r["bucket"], 0), int(r["n_tokens"]))
    texts = [r["text"] for r in sorted(rows, key=lambda r: -int(r.get("n_tokens", 0)))
             if r.get("bucket", bucket) == bucket]
    return (texts or [r["text"] for r in rows]), longest


def fmt_mb(v) -> str:
    return "" if v is None else f"{v / MB:.1f}"


def table(rows: list[dict]) -> str:
    """Estimate vs observed, in MiB; empty cell when not measured (never 0)."""
    head = ("batch", "len", "est_w_MiB", "est_act_MiB", "est_total_MiB", "alloc_MiB", "reserved_MiB",
            "device_used_MiB", "rss_peak_MiB", "rss_rise_MiB", "compared", "error_%")
    lines = ["  ".join(f"{h:>{max(len(h), 5)}}" for h in head)]
    for r in rows:
        e, o, c = r["estimate"], r["observation"] or {}, r["comparison"] or {}
        short = {"total_bytes": "total", "activation_bytes": "act", "peak_allocated_bytes": "alloc",
                 "process_rss_rise_bytes": "rss_rise"}
        cmp_ = f"{short[c['estimate_term']]}~{short[c['observed_counter']]}" if c else r["error"] or ""
        err = "" if c.get("error_fraction") is None else f"{100 * c['error_fraction']:+.1f}"
        cells = (r["batch_size"], r["seq_len_tokens"], fmt_mb(e["weights_bytes"]), fmt_mb(e["activation_bytes"]),
                 fmt_mb(e["total_bytes"]), fmt_mb(o.get("peak_allocated_bytes")), fmt_mb(o.get("peak_reserved_bytes")),
                 fmt_mb(o.get("device_used_bytes")), fmt_mb(o.get("process_peak_rss_bytes")),
                 fmt_mb(o.get("process_rss_rise_bytes")), cmp_, err)
        lines.append("  ".join(f"{v!s:>{max(len(h), 5)}}" for h, v in zip(head, cells, strict=True)))
    return "\n".join(lines)


def plot(rows: list[dict], path: str, title: str) -> None:
    """Observed (solid) vs estimate (dashed) of the compared figures, MiB against batch size, one colour per length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for k, s in enumerate(sorted({r["seq_len_tokens"] for r in rows})):
        cell = [r for r in rows if r["seq_len_tokens"] == s and r["comparison"]]
        if not cell:
            continue
        bs = [r["batch_size"] for r in cell]
        col = f"C{k}"
        ax.plot(bs, [r["comparison"]["observed_bytes"] / MB for r in cell], "o-", color=col, label=f"observed, {s} tok")
        ax.plot(bs, [r["comparison"]["estimate_bytes"] / MB for r in cell], "x--", color=col,
                label=f"estimate, {s} tok")
    c = next((r["comparison"] for r in rows if r["comparison"]), None)
    if c:
        title += f"\nestimate {c['estimate_term']} (dashed) vs observed {c['observed_counter']} (solid)"
    ax.set_ylabel("MiB")
    ax.set_xlabel("batch size (items)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="classification", choices=("classification", "generation"),
                    help="classification: one forward (encoder estimate); generation: greedy generate")
    ap.add_argument("--model", help="checkpoint folder or hub id (default: the demo model of --task)")
    ap.add_argument("--max-new-tokens", type=int, default=16, help="--task generation: tokens written per item")
    ap.add_argument("--corpus", default=str(DEMO_CORPUS), help="JSONL corpus; long-bucket texts feed the batches")
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda", "rocm"))
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"))
    ap.add_argument("--batches", type=ints, default=[1, 4, 8], help="comma-separated batch sizes (default 1,4,8)")
    ap.add_argument("--lengths", type=ints, default=[64, 128, 256, 512], help="comma-separated lengths in tokens")
    ap.add_argument("--plot", default="memory_lab.png", help="PNG path (default memory_lab.png)")
    ap.add_argument("--json", help="write environment, rows and feasibility as JSON here")
    ap.add_argument("--csv", help="write one row per grid cell as CSV here")
    ap.add_argument("--budget-bytes", type=float, help="memory budget for feasibility (default: the GPU's memory)")
    ap.add_argument("--margin", type=float, default=0.10, help="fraction of the budget kept free (default 0.10)")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (torch.set_num_threads); 0 = torch default")
    args = ap.parse_args(argv)
    gen = args.task == "generation"
    args.model = args.model or str(DEMO_GENERATOR if gen else DEMO_MODEL)
    if gen and args.max_new_tokens < 1:
        fail(f"--max-new-tokens {args.max_new_tokens}: give an integer >= 1")

    env = check_environment(args)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
        env["threads"] = args.threads
    print("environment: " + ", ".join(f"{k}={v}" for k, v in env.items()))
    from lab.memory.estimate import DecoderShape, EncoderShape
    from lab.memory.feasibility import batch_fits, device_budget_bytes, generation_fits
    from lab.memory.observe import observe_grid
    from lab.passes.inference import load_model
    from lab.passes.tasks.generation import load_generator

    new = args.max_new_tokens if gen else 0
    tok, model = (load_generator if gen else load_model)(args.model, args.precision, env["device"])
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit and max(args.lengths) + new > limit:
        fail(f"length {max(args.lengths)}" + (f" + {new} new tokens" if gen else "")
             + f" exceeds the model's max_position_embeddings {limit}; lower --lengths")
    texts, longest = load_texts(args.corpus, "long")
    order = {"short": 0, "medium": 1, "long": 2}
    longest = dict(sorted(longest.items(), key=lambda kv: order.get(kv[0], 9)))
    rows = observe_grid(model, tok, texts, args.batches, args.lengths, env["device"], args.precision, args.model,
                        max_new_tokens=new or None)
    if gen:
        print(f"generation: greedy, exactly {new} new tokens per item; len = prompt tokens; "
              "est_act = KV cache + prefill activations + logits")
    print(table(rows))
    errs = [r["comparison"]["error_fraction"] for r in rows
            if r["comparison"] and r["comparison"]["error_fraction"] is not None]
    if errs:
        print(f"estimate error: min {100 * min(errs):+.1f}%, max {100 * max(errs):+.1f}% over {len(errs)} cells")

    budget, why = (int(args.budget_bytes), "") if args.budget_bytes else device_budget_bytes(env["device"])
    fits = None
    if budget is None:
        print(f"feasibility: not computed ({why})")
    else:
        if gen:  # the longest prompt of the grid, in every bucket
            found = generation_fits(DecoderShape.from_model(model), args.precision, list(longest), budget,
                                    max(args.lengths), new, margin_fraction=args.margin)
        else:
            found = batch_fits(EncoderShape.from_model(model), args.precision, longest, budget,
                               max_length=limit, margin_fraction=args.margin)
        fits = {b: f.to_json() for b, f in found.items()}
        print(f"feasibility: budget {budget / MB:.0f} MiB, margin {args.margin:.0%} kept free -> usable "
              f"{next(iter(fits.values()))['usable_bytes'] / MB:.0f} MiB" if fits else "feasibility: no buckets")
        for b, f in fits.items():
            print(f"  {b:>6}: {f['seq_len_tokens']} tokens -> largest batch {f['max_batch_size']}")

    where = env["gpu"] or platform.processor() or "cpu"
    title = f"{Path(args.model).name}, {args.precision}, {env['device']} ({where})" + (
        f", generate {new} new tokens" if gen else "")
    plot(rows, args.plot, title)
    print(f"plot: {args.plot}")
    if args.json:
        Path(args.json).write_text(json.dumps({"environment": env, "rows": rows, "feasibility": fits,
                                               "budget_bytes": budget, "margin_fraction": args.margin}, indent=1))
        print(f"json: {args.json}")
    if args.csv:
        import csv

        with open(args.csv, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["batch_size", "seq_len_tokens", "weights_bytes", "activation_bytes", "total_bytes",
                        "peak_allocated_bytes", "peak_reserved_bytes", "device_used_bytes",
                        "process_peak_rss_bytes", "process_rss_rise_bytes", "error_fraction", "error"])
            for r in rows:
                e, o, c = r["estimate"], r["observation"] or {}, r["comparison"] or {}
                w.writerow([r["batch_size"], r["seq_len_tokens"], e["weights_bytes"], e["activation_bytes"],
                            e["total_bytes"], o.get("peak_allocated_bytes"), o.get("peak_reserved_bytes"),
                            o.get("device_used_bytes"), o.get("process_peak_rss_bytes"),
                            o.get("process_rss_rise_bytes"), c.get("error_fraction"), r["error"] or ""])
        print(f"csv: {args.csv}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
