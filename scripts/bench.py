"""`make bench`: the lab's measured window side by side with what a user would run instead.

One process, one model, the same items and batch size; rounds alternate the order of the
contenders (round r starts at contender r mod 4), so no contender is always first:
- bare:      read the corpus, tokenize each batch (padding longest, truncation), forward
             under inference_mode, argmax to the host: the least a loop can do;
- lab:       the pass runner's measured window (lab.passes.tasks.classification.run_batches) with its
             progress events (to /dev/null), peak-memory reset/read and synchronization;
- pipeline:  transformers' pipeline("text-classification") with the same batch size and
             truncation: what a user would pick instead;
- bucketed:  the lab's window with length bucketing (a declared variant of the protocol).
Throughput ratios use the median seconds over rounds: lab_over_bare (goal >= 0.97) and
bucketed_over_pipeline (goal >= 1.2). Padding waste is the fraction of fed token positions
that are padding.

Then the embedding task (``[task] kind = "embedding"``), same items, batch and rounds, the
demo checkpoint's encoder (its head unused), mean pooling over the attention mask, normalised:
- emb_bare:     tokenize each batch, encoder forward, mean pool + L2 normalise, to the host;
- emb_lab:      the lab's embedding window (lab.passes.tasks.embedding.EmbeddingJob.run_window)
                with the same events, peak reset/read and synchronization as ``lab``;
- emb_bucketed: the same window with length bucketing;
- st_encode:    sentence-transformers' ``SentenceTransformer.encode`` (Transformer + mean
                Pooling + Normalize modules on the same checkpoint folder), which sorts its
                inputs by length on its own: it is compared with emb_bucketed, not emb_lab.
Ratios: emb_lab_over_bare and emb_bucketed_over_encode (no goal declared for them); the
vectors' agreement is the worst cosine of each contender's vector with emb_bare's, per item.
Writes runs/bench.json and prints both tables.

    .venv/bin/python scripts/bench.py [--items 400] [--batch 8] [--rounds 8] [--threads 2]

Every option is checked before the model loads; bad input is one line on stderr, exit 2, and
the previous result file is left as it was.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
import bench_args  # noqa: E402  (scripts/bench_args.py: the argument checks shared by the bench scripts)

CONTENDERS = ("bare", "lab", "pipeline", "bucketed")
EMB_CONTENDERS = ("emb_bare", "emb_lab", "emb_bucketed", "st_encode")
GOALS = {"lab_over_bare": 0.97, "bucketed_over_pipeline": 1.2}


def bare(ctx):
    import torch

    rows = [json.loads(line) for line in Path(ctx["path"]).read_text(encoding="utf-8").splitlines()]
    preds = []
    with torch.inference_mode():
        for s in range(0, len(rows), ctx["batch"]):
            enc = ctx["tok"]([r["text"] for r in rows[s:s + ctx["batch"]]], padding="longest",
                             truncation=True, max_length=ctx["max_length"], return_tensors="pt")
            logits = ctx["model"](input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
            preds.extend(logits.argmax(-1).tolist())
    return preds, None


def _lab_scope(ctx, run):
    """The lab's scope around a window, as a pass has it: events written, peaks reset and read,
    device synchronised, the corpus read inside the clock; ``run(rows, on_batch)`` is the window."""
    from lab.inputs.corpus import read_corpus
    from lab.memory.peaks import PeakTracker
    from lab.passes.events import EventWriter
    from lab.passes.inference import synchronize

    with open(os.devnull, "w") as sink:
        ev = EventWriter(sink)
        tracker = PeakTracker("cpu")
        tracker.reset()
        synchronize("cpu")
        t0 = time.perf_counter()
        rows = read_corpus(ctx["path"])
        win = run(rows, lambda d: ev.progress(d, len(rows), d / (time.perf_counter() - t0)))
        synchronize("cpu")
        tracker.read()
    return win


def _lab(ctx, bucketing: bool):
    from lab.inputs.variants import Variant
    from lab.passes.tasks.classification import run_batches

    variant = Variant(batch_size=ctx["batch"], padding="longest", max_length=ctx["max_length"], bucketing=bucketing)
    win = _lab_scope(ctx, lambda rows, on_batch: run_batches(rows, ctx["tok"], ctx["model"], "cpu", variant,
                                                             on_batch))
    return win.pred_index, win


def lab(ctx):
    return _lab(ctx, False)


def bucketed(ctx):
    return _lab(ctx, True)


def pipeline(ctx):
    rows = [json.loads(line) for line in Path(ctx["path"]).read_text(encoding="utf-8").splitlines()]
    out = ctx["pipe"]([r["text"] for r in rows], batch_size=ctx["batch"], truncation=True,
                      max_length=ctx["max_length"])
    label2id = ctx["model"].config.label2id
    return [label2id[o["label"]] for o in out], None


def _rows(ctx) -> list[dict]:
    return [json.loads(line) for line in Path(ctx["path"]).read_text(encoding="utf-8").splitlines()]


def emb_bare(ctx):
    import torch

    from lab.passes.tasks.embedding import mean_pool

    rows = _rows(ctx)
    out = []
    with torch.inference_mode():
        for s in range(0, len(rows), ctx["batch"]):
            enc = ctx["enc_tok"]([r["text"] for r in rows[s:s + ctx["batch"]]], padding="longest",
                                 truncation=True, max_length=ctx["max_length"], return_tensors="pt")
            hidden = ctx["encoder"](input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
            out.append(mean_pool(hidden, enc["attention_mask"], normalize=True).numpy())
    import numpy as np

    return np.concatenate(out), None


def _emb_lab(ctx, bucketing: bool):
    from types import SimpleNamespace

    from lab.inputs.variants import Variant
    from lab.passes.tasks.embedding import EmbeddingJob

    spec = SimpleNamespace(extra={"task": {"kind": "embedding", "pooling": "mean", "normalize": True}},
                           variant=Variant(batch_size=ctx["batch"], padding="longest",
                                           max_length=ctx["max_length"], bucketing=bucketing))
    job = EmbeddingJob(spec)
    job.use_loaded(ctx["enc_tok"], ctx["encoder"], "cpu")  # loaded once, as for the other contenders
    win = _lab_scope(ctx, lambda rows, on_batch: job.run_window(rows, "cpu", on_batch))
    return win.vectors, win


def emb_lab(ctx):
    return _emb_lab(ctx, False)


def emb_bucketed(ctx):
    return _emb_lab(ctx, True)


def st_encode(ctx):
    rows = _rows(ctx)
    return ctx["st"].encode([r["text"] for r in rows], batch_size=ctx["batch"], convert_to_numpy=True,
                            show_progress_bar=False), None


def sentence_transformer(model: str, max_length: int, threads: int):
    """sentence-transformers' model on the checkpoint folder ``model``: Transformer (feature
    extraction, ``max_seq_length`` = the lab's max_length) + mean Pooling + Normalize, on CPU."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    tr = Transformer(model, max_seq_length=max_length)
    return SentenceTransformer(modules=[tr, Pooling(tr.get_embedding_dimension(), "mean"), Normalize()],
                               device="cpu")


def worst_cosine(a, b) -> float:
    """The lowest per-item cosine between the rows of ``a`` and ``b`` [items, width]."""
    import numpy as np

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return float(cos.min())


def timed_rounds(names: tuple, fns: dict, ctx: dict, n_rounds: int, differ) -> tuple[dict, list, dict]:
    """``n_rounds`` rounds of every contender in ``names``, round r starting at contender
    r mod len(names); prints one line per round. ``differ(out, first_out)`` scores how far a
    contender's output is from the first one timed (``names[0]``'s in round 1); the worst over
    rounds is kept.
    Returns (seconds per contender, orders, worst difference per contender)."""
    seconds: dict[str, list[float]] = {n: [] for n in names}
    orders, ref, worst = [], None, {n: 0 for n in names}
    print(f"{'round':>5} " + " ".join(f"{n + '_s':>13}" for n in names) + "  order")
    for r in range(n_rounds):
        k = r % len(names)
        order = names[k:] + names[:k]
        orders.append(list(order))
        for name in order:
            t0 = time.perf_counter()
            out, _ = fns[name](ctx)
            seconds[name].append(time.perf_counter() - t0)
            ref = out if ref is None else ref
            worst[name] = max(worst[name], differ(out, ref))
        print(f"{r + 1:>5} " + " ".join(f"{seconds[n][-1]:>13.3f}" for n in names) + "  " + ">".join(order))
    return seconds, orders, worst


def machine() -> dict:
    import torch

    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "device": "cpu", "load_average_1m_start": os.getloadavg()[0]}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, all checked before any heavy import or model load (UsageError: one line)."""
    ap = bench_args.parser("bench", __doc__)
    ap.add_argument("--items", type=int, default=400,
                    help="items taken evenly from demo/corpus/comparison.jsonl (fewer if the corpus is smaller)")
    ap.add_argument("--batch", type=int, default=8, help="batch size in items, the same for every contender")
    ap.add_argument("--max-length", type=int, default=256,
                    help="truncation length in tokens (>= 8, at most the model's max_position_embeddings)")
    ap.add_argument("--rounds", type=int, default=8, help="timed rounds; each runs every contender once")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads (torch.set_num_threads)")
    ap.add_argument("--model", default=str(REPO / ".cache/models/demo-minilm-20ng"),
                    help="local transformers sequence-classification checkpoint folder")
    ap.add_argument("--out", default=str(REPO / "runs/bench.json"),
                    help="result file (JSON); replaced only once the run is complete")
    a = ap.parse_args(argv)
    bench_args.require_at_least(a, 1, "items", "batch", "rounds", "threads")
    bench_args.check_variant_and_files(a, padding="longest", bucketing=True)  # the lab's own rule, in one place
    return a


def main(argv: list[str] | None = None) -> int:
    return bench_args.run("bench", lambda: parse_args(argv), measure)


def measure(a: argparse.Namespace, tmp: Path) -> int:
    """Load, warm up, run the rounds; writes ``a.out`` atomically. Returns the exit status."""
    import torch
    from transformers import pipeline as hf_pipeline

    from lab.passes.inference import load_model

    torch.set_num_threads(a.threads)
    rows = [json.loads(x) for x in (REPO / "demo/corpus/comparison.jsonl").read_text(encoding="utf-8").splitlines()]
    step = max(1, len(rows) // a.items)
    subset = rows[::step][: a.items]
    path = tmp / "bench.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in subset))
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # the reason is our one line; transformers' load report is not
    hf_logging.disable_progress_bar()
    try:
        tok, model = load_model(a.model, "fp32", "cpu")
    except Exception as e:  # config.json present but the checkpoint does not load
        first = (str(e).splitlines() or [""])[0][:160]
        print(f"bench: --model {a.model} does not load ({type(e).__name__}: {first}); give a transformers "
              "sequence-classification checkpoint folder (`make model` builds the demo one)", file=sys.stderr)
        return 2
    pipe = hf_pipeline("text-classification", model=model, tokenizer=tok, device="cpu")
    ctx = {"path": path, "tok": tok, "model": model, "pipe": pipe, "batch": a.batch, "max_length": a.max_length}
    fns = {"bare": bare, "lab": lab, "pipeline": pipeline, "bucketed": bucketed}
    info = machine()
    print(f"items {len(subset)}, batch {a.batch}, padding longest, max_length {a.max_length}, "
          f"threads {a.threads}, {info['cpu']} ({info['cores']} cores), load {info['load_average_1m_start']:.2f}")
    windows = {}
    for name in CONTENDERS:  # one untimed run each: first-call costs stay out of the rounds
        _, windows[name] = fns[name](ctx)
    seconds, orders, differing = timed_rounds(CONTENDERS, fns, ctx, a.rounds,
                                              lambda p, q: sum(x != y for x, y in zip(p, q, strict=True)))
    med = {n: statistics.median(seconds[n]) for n in CONTENDERS}
    print("median " + " ".join(f"{med[n]:>13.3f}" for n in CONTENDERS))
    emb = measure_embedding(a, ctx)
    waste = {k: 1 - windows[k].real_tokens / windows[k].padded_tokens for k in ("lab", "bucketed")}
    res = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {**info, "load_average_1m_end": os.getloadavg()[0], "threads": a.threads},
        "model": a.model, "items": len(subset), "batch_size": a.batch, "padding": "longest",
        "max_length": a.max_length, "rounds": a.rounds, "orders": orders,
        "seconds": {n: [round(s, 6) for s in seconds[n]] for n in CONTENDERS},
        "median_s": {n: round(med[n], 6) for n in CONTENDERS},
        "items_per_s": {n: round(len(subset) / med[n], 4) for n in CONTENDERS},
        "lab_over_bare": round(med["bare"] / med["lab"], 4),
        "bucketed_over_pipeline": round(med["pipeline"] / med["bucketed"], 4),
        "bucketed_over_lab": round(med["lab"] / med["bucketed"], 4),
        "goals": GOALS,
        "real_tokens": windows["lab"].real_tokens,
        "fed_positions_longest": windows["lab"].padded_tokens,
        "fed_positions_bucketed": windows["bucketed"].padded_tokens,
        "padding_waste_longest": round(waste["lab"], 6),
        "padding_waste_bucketed": round(waste["bucketed"], 6),
        "same_predictions": not any(differing.values()),
        "differing_predictions": differing,
        "embedding": emb,
    }
    res["goals_met"] = {k: res[k] >= g for k, g in GOALS.items()}
    out = a.out
    try:
        bench_args.write_json_atomic(out, res)
    except OSError as e:
        print(f"bench: could not write {out} ({e}); the previous file, if any, is unchanged", file=sys.stderr)
        return 1
    print("items/s: " + ", ".join(f"{n} {res['items_per_s'][n]:.2f}" for n in CONTENDERS))
    print(f"lab_over_bare {res['lab_over_bare']:.3f} (goal >= 0.97: {res['goals_met']['lab_over_bare']}); "
          f"bucketed_over_pipeline {res['bucketed_over_pipeline']:.3f} "
          f"(goal >= 1.2: {res['goals_met']['bucketed_over_pipeline']})")
    print(f"padding waste: longest {res['padding_waste_longest']:.3f}, bucketed "
          f"{res['padding_waste_bucketed']:.3f} ({res['real_tokens']} real tokens; fed "
          f"{res['fed_positions_longest']} vs {res['fed_positions_bucketed']}); same predictions: "
          f"{res['same_predictions']}; load {res['machine']['load_average_1m_end']:.2f}")
    print("embedding items/s: " + ", ".join(f"{n} {emb['items_per_s'][n]:.2f}" for n in EMB_CONTENDERS))
    print(f"emb_lab_over_bare {emb['emb_lab_over_bare']:.3f}; emb_bucketed_over_encode "
          f"{emb['emb_bucketed_over_encode']:.3f} (encode sorts by length on its own, so it is set against the "
          f"lab's bucketed window; emb_lab_over_encode {emb['emb_lab_over_encode']:.3f} is unbucketed against "
          "sorted)")
    print(f"embedding padding waste: longest {emb['padding_waste_longest']:.3f}, bucketed "
          f"{emb['padding_waste_bucketed']:.3f}; worst cosine with emb_bare: "
          + ", ".join(f"{n} {emb['worst_cosine_with_bare'][n]:.6f}" for n in EMB_CONTENDERS) + f"; wrote {out}")
    return 0


def measure_embedding(a: argparse.Namespace, ctx: dict) -> dict:
    """The embedding contenders (module docstring) over ``ctx``'s items: one untimed run each,
    then ``a.rounds`` rotated rounds; returns the result's ``embedding`` object."""
    from lab.passes.tasks.embedding import load_encoder

    ctx["enc_tok"], ctx["encoder"] = load_encoder(a.model, "fp32", "cpu")
    ctx["st"] = sentence_transformer(a.model, a.max_length, a.threads)
    fns = {"emb_bare": emb_bare, "emb_lab": emb_lab, "emb_bucketed": emb_bucketed, "st_encode": st_encode}
    print("embedding task: mean pooling over the attention mask, normalised; st_encode sorts by length itself "
          "(compare it with emb_bucketed)")
    windows = {name: fns[name](ctx)[1] for name in EMB_CONTENDERS}  # untimed first runs
    seconds, orders, drift = timed_rounds(EMB_CONTENDERS, fns, ctx, a.rounds, lambda v, w: 1 - worst_cosine(v, w))
    med = {n: statistics.median(seconds[n]) for n in EMB_CONTENDERS}
    print("median " + " ".join(f"{med[n]:>13.3f}" for n in EMB_CONTENDERS))
    n = len(_rows(ctx))
    lab_w, buck_w = windows["emb_lab"], windows["emb_bucketed"]
    return {
        "pooling": {"rule": "mean", "mask": "attention_mask", "normalize": True},
        "orders": orders,
        "seconds": {k: [round(x, 6) for x in seconds[k]] for k in EMB_CONTENDERS},
        "median_s": {k: round(med[k], 6) for k in EMB_CONTENDERS},
        "items_per_s": {k: round(n / med[k], 4) for k in EMB_CONTENDERS},
        "emb_lab_over_bare": round(med["emb_bare"] / med["emb_lab"], 4),
        "emb_bucketed_over_encode": round(med["st_encode"] / med["emb_bucketed"], 4),
        "emb_lab_over_encode": round(med["st_encode"] / med["emb_lab"], 4),
        "encode_sorts_by_length": True,
        "padding_waste_longest": round(1 - lab_w.real_tokens / lab_w.padded_tokens, 6),
        "padding_waste_bucketed": round(1 - buck_w.real_tokens / buck_w.padded_tokens, 6),
        "worst_cosine_with_bare": {k: round(1 - drift[k], 6) for k in EMB_CONTENDERS},
    }


if __name__ == "__main__":
    sys.exit(main())
