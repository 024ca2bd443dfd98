"""What actually ran, next to what the variant declared, for every variant field.

Observed on the loaded model and in the measured window, never copied from the declaration:
the dtype and device of the loaded weights, the attention implementation the model reports
(``config._attn_implementation``), torch's thread count, torch's TF32 settings (declared never
on: :func:`observe_tf32`), whether the module is compiled, any quantized weights, the padded
width of each batch (padding), the longest tokenized item (max_length), and the processing
order (bucketing). A declared value the pass did not honour
raises NotHonoured: the pass becomes a failure row with the reason, never a row that claims it
(seed: "Non sostituire silenziosamente").

Multi-card passes (``lab.passes.worker``, one worker per card) observe each card with these
same functions and apply the same rule on each card; :func:`combine_cards` merges the cards'
observations into the pass's, and lab.passes.multicard applies :func:`require_honoured` to
each card's record again, naming the card that did not honour a declared value. Threads on
CPU: the declared ``threads`` is for the pass, split as ``threads // cards`` per worker
(``lab.passes.distributed.threads_per_worker``; over several hosts, threads // workers on
that host); each worker's torch thread count is checked against its share, and the
observed ``threads`` is one worker's count (``threads_split`` states the split).
"""

from __future__ import annotations

import json

from lab.facts.constants import GENERATOR_LAG_SHARE
from lab.facts.errors import FailureKind, PassFailure
from lab.inputs.variants import DTYPES, Variant

BUCKETS = ("short", "medium", "long")


class NotHonoured(PassFailure, RuntimeError):
    """A declared variant value that this pass did not apply; one line naming declared vs observed."""

    kind = FailureKind.NOT_HONOURED


def observe_model(model, threads_declared: int, workers_on_host: int = 1) -> dict:
    """{dtype, device, attention, threads, compile, quantization} of the loaded ``model``.

    ``threads_declared``: the pass's declared threads (0 = torch's default). With
    ``workers_on_host`` > 1 (a multi-card worker) the record adds ``threads_per_worker`` (this
    worker's share, threads // workers, the count :func:`require_honoured` checks) and
    ``threads_split`` (the rule in words).
    """
    params = list(model.parameters())
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in params if p.is_floating_point()})
    quantized = sorted({str(p.dtype).removeprefix("torch.") for p in params if not p.is_floating_point()})
    qconf = getattr(model.config, "quantization_config", None)
    compiled = type(model).__name__ == "OptimizedModule" or bool(getattr(model, "_compiled_call_impl", None))
    return {"dtype": "/".join(dtypes) or "none", "device": str(params[0].device) if params else "none",
            "attention": getattr(model.config, "_attn_implementation", None) or "unknown",
            **observe_threads(threads_declared, workers_on_host),
            **observe_cpu(),
            "compile": compiled,
            "quantization": "none" if not (quantized or qconf) else (str(qconf) if qconf else "/".join(quantized)),
            **observe_tf32()}


def observe_threads(threads_declared: int, workers_on_host: int = 1) -> dict:
    """{threads (torch's count in this process), threads_declared (the pass's)}; with
    ``workers_on_host`` > 1 (a multi-card worker) also ``threads_per_worker`` (this worker's
    share, the count :func:`require_honoured` checks) and ``threads_split`` (the rule in words)."""
    import torch

    from lab.passes.distributed import threads_per_worker

    return {"threads": torch.get_num_threads(), "threads_declared": threads_declared,
            **({} if workers_on_host <= 1 else _split(threads_declared, workers_on_host, threads_per_worker))}


def observe_cpu() -> dict:
    """{cpu_capability}: the instruction set torch's CPU kernels dispatch to in this process
    (lab.facts.host.cpu_capability: "AVX512", "AVX2", "DEFAULT", ...; ATEN_CPU_CAPABILITY
    lowers it)."""
    from lab.facts.host import cpu_capability

    return {"cpu_capability": cpu_capability()}


TF32_DECLARED = False
"""What the lab declares for TF32: never on. It sets no TF32 option, so an fp32 pass's matmuls
are torch's default, full fp32 (``float32_matmul_precision`` "highest", cuBLAS TF32 off)."""


def observe_tf32() -> dict:
    """torch's TF32 settings in this process: ``float32_matmul_precision``
    (``torch.get_float32_matmul_precision()``), ``tf32_matmul``
    (``torch.backends.cuda.matmul.allow_tf32``: cuBLAS fp32 matmuls as TF32; true under
    ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1`` or a precision below "highest"), ``tf32_cudnn``
    (``torch.backends.cudnn.allow_tf32``: convolutions; torch's default is true) and
    ``tf32_matmul_declared`` (``TF32_DECLARED``). TF32 exists only on NVIDIA GPUs from Ampere on:
    on other devices these say what torch would do, not what ran. ``NVIDIA_TF32_OVERRIDE``
    (read by NVIDIA's libraries, not by torch) is recorded with the pass's environment."""
    import torch

    return {"float32_matmul_precision": torch.get_float32_matmul_precision(),
            "tf32_matmul_declared": TF32_DECLARED, "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
            "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32)}


def _split(declared: int, workers: int, share_of) -> dict:
    share = share_of(declared, workers)
    return {"threads_per_worker": share,
            "threads_split": (f"{declared or 'default (host cores)'} threads declared for the pass, split as "
                              f"threads // {workers} workers = {share} per worker "
                              "(lab.passes.distributed.threads_per_worker); observed threads: one worker's count")}


def observe_window(win, max_length: int) -> dict:
    """{padding, max_tokens, bucketing, batch_size, window_items, padding_side, input_ids_sha256}
    observed in the measured window (a WindowResult): ``batch_size`` is the largest batch
    dimension the model received, ``window_items`` the items the window predicted,
    ``padding_side`` the side its batches' masks held padding on (WindowResult.padding_side; left
    out for an engine that packs sequences), ``input_ids_sha256`` the sha256 of the window's
    token ids (lab.passes.inference.input_ids_digest; left out when the lab did not tokenize)."""
    at_max, at_longest, n = win.batches_at_max_length, win.batches_at_longest, win.batches
    if n and at_max == n and at_longest == n:
        padding = "max_length or longest (every batch reached max_length: indistinguishable)"
    elif n and at_max == n:
        padding = "max_length"
    elif n and at_longest == n:
        padding = "longest"
    else:
        padding = "none observed" if not n else f"mixed ({at_max} of {n} batches at max_length)"
    order = ("sorted by token count" if win.order_sorted_by_length and not win.order_is_corpus
             else "corpus order" if win.order_is_corpus and not win.order_sorted_by_length
             else "corpus order (already sorted by token count)")
    sides = {"padding_side": win.padding_side()} if win.batches and not win.packed else {}
    digest = {"input_ids_sha256": win.input_ids_sha256} if win.input_ids_sha256 else {}
    return {"padding": padding, "max_tokens": max(win.tokens_kept, default=0), "bucketing": order,
            "batch_size": win.largest_batch, "window_items": win.items_done, **sides, **digest}


PACKED = "packed (vLLM: no padding)"
"""The observed padding of a vLLM window (lab.passes.backends.vllm_backend): sequences packed, no pad
token computed; it honours a declared ``padding = "longest"`` (no pad token enters a result)."""


def _padding_ok(declared: str, observed: str) -> bool:
    if observed == PACKED:
        return declared == "longest"
    return observed.startswith((declared, "max_length or longest")) or observed == "none observed"


NOT_OBSERVABLE = "declared, not observable"
"""An observed value the lab cannot read (a setting inside the user's own code that it does not
report): recorded as such, never copied from the declaration, and not compared."""


def _engine_setting(name: str, declared, seen, said: str) -> str:
    """'' when ``declared`` is None (not declared) or equals ``seen``; else the contradiction in
    words: ``said`` with the observed value, or that the engine did not report it."""
    if declared is None or seen == declared:
        return ""
    return f"{name} {declared} declared, " + (said.format(seen) if seen is not None else
                                              "vLLM did not report it (its /server_info and /metrics gave no value)")


def require_honoured(variant: Variant, observed: dict, device: str) -> None:
    """Raise NotHonoured naming the first declared field the observation contradicts.

    ``device`` is the resolved device the pass asked for (lab.passes.inference.resolve_device).
    Window fields (padding, max_tokens, bucketing, batch_size) are checked once ``observed``
    holds them. Every field of Variant that says what runs is checked here, except ``cards``
    (lab.passes.multicard compares the cards that reported with the cards declared). ``engine``
    is read from ``observed["engine"]``, which every engine but transformers reports (its absence
    means transformers; the user's code, "entry", runs whatever engine the variant names); the vLLM options from
    what the engine reported (lab.engines.vllm.VllmClient.observed):
    tests/unit/test_every_field_observed.py holds that rule.
    """
    bad = []
    observed = {k: v for k, v in observed.items() if v != NOT_OBSERVABLE}  # custom code: recorded, not claimed
    # custom code: the lab never saw its weights or batches, only what its settings_used() reported
    entry = "the entry's settings_used() reported" if "reported_by_entry" in observed else ""
    if "dtype" in observed and observed["dtype"] != DTYPES[variant.precision]:
        bad.append(f"precision {variant.precision} declared, "
                   + (f"{entry} {observed['dtype']}" if entry else f"weights loaded as {observed['dtype']}"))
    if "device" in observed and observed["device"] != device:
        bad.append(f"device {device} asked, "
                   + (f"{entry} device {observed['device']}" if entry else f"weights on {observed['device']}"))
    engine = observed.get("engine", "transformers")  # the transformers engine reports none
    # attention is transformers' attn_implementation (the user's code may report it); vLLM picks its own
    # backend (recorded, not compared)
    if (variant.attention and (engine == "transformers" or entry)
            and observed.get("attention", variant.attention) != variant.attention):
        bad.append(f"attention {variant.attention} declared, {entry or 'the model reports'} {observed['attention']}")
    share = observed.get("threads_per_worker")
    if share and observed["threads"] != share:
        bad.append(f"threads {observed['threads_declared']} declared for the pass = {share} per worker "
                   f"(threads // workers), torch uses {observed['threads']} in this worker")
    elif (not share and observed["threads_declared"] and "threads" in observed
          and observed["threads"] != observed["threads_declared"]):  # a server's bound threads: not observable
        bad.append(f"threads {observed['threads_declared']} declared, torch uses {observed['threads']}")
    if (variant.precision == "fp32" and device.startswith("cuda") and not torch_hip()
            and observed.get("tf32_matmul") not in (None, TF32_DECLARED)):
        bad.append(f"precision fp32 declared, cuBLAS matmuls allowed as TF32 (torch.backends.cuda.matmul."
                   f"allow_tf32 {observed['tf32_matmul']}, float32 matmul precision "
                   f"{observed.get('float32_matmul_precision')}; TORCH_ALLOW_TF32_CUBLAS_OVERRIDE?)")
    if variant.compile != observed.get("compile", variant.compile):
        bad.append(f"compile {variant.compile} declared, {entry or 'compiled module:'} {observed['compile']}")
    if variant.quantization == "none" and observed.get("quantization", "none") != "none":
        bad.append(f"quantization none declared, {entry or 'weights are'} {observed['quantization']}")
    if "padding" in observed and not _padding_ok(variant.padding, observed["padding"]):
        bad.append(f"padding {variant.padding} declared, {entry or 'batches padded:'} {observed['padding']}")
    if "max_tokens" in observed and observed["max_tokens"] > variant.max_length:
        bad.append(f"max_length {variant.max_length} declared, an item kept {observed['max_tokens']} tokens")
    if "bucketing" in observed and not (observed["bucketing"] != "corpus order" if variant.bucketing
                                        else observed["bucketing"].startswith("corpus order")):
        bad.append(f"bucketing {variant.bucketing} declared, processing order: {observed['bucketing']}")
    lag = observed.get("generator_lag_p99_s")
    if variant.request_rate is not None and lag is not None and lag > GENERATOR_LAG_SHARE / variant.request_rate:
        bad.append(f"request_rate {variant.request_rate:g} req/s declared, the load generator released requests "
                   f"late (lag p99 {lag:.4f} s > {GENERATOR_LAG_SHARE / variant.request_rate:.4f} s, "
                   f"{GENERATOR_LAG_SHARE:.0%} of the mean gap): the client was the bottleneck; give the "
                   "generator more CPU or declare a lower rate")
    if variant.request_rate is not None and observed.get("request_schedule") == "unknown":
        bad.append(f"request_rate {variant.request_rate:g} req/s declared, the load generator's schedule could "
                   "not be replayed, so its lag is unknown (see the pass's load/load.log)")
    if engine != variant.engine and not entry:  # the user's code runs whatever engine the variant names
        bad.append(f"engine {variant.engine} declared, the pass ran {engine}")
    bad += [x for x in (
        _engine_setting("max_num_seqs", variant.max_num_seqs, observed.get("max_num_seqs"),
                        "vLLM scheduled at most {} sequences at once"),
        _engine_setting("max_num_batched_tokens", variant.max_num_batched_tokens,
                        observed.get("max_num_batched_tokens"), "vLLM schedules at most {} tokens in one step"),
        _engine_setting("vllm_memory_fraction", variant.vllm_memory_fraction, observed.get("vllm_memory_fraction"),
                        "vLLM reserved {} of the memory")) if x]
    if "prefix_caching" in observed and observed["prefix_caching"] != bool(variant.prefix_caching):
        bad.append(f"prefix_caching {bool(variant.prefix_caching)} declared, vLLM's enable_prefix_caching "
                   f"{observed['prefix_caching']}")
    n = observed.get("window_items") or 0
    if "batch_size" in observed and n and observed["batch_size"] != min(variant.batch_size, n):
        bad.append(f"batch_size {variant.batch_size} declared, the largest batch the model received held "
                   f"{observed['batch_size']} of {n} items")
    if bad:
        raise NotHonoured("declared value not honoured: " + "; ".join(bad))


def torch_hip() -> bool:
    """True on a ROCm build of torch (TF32 is then hipBLASLt's, off unless HIPBLASLT_ALLOW_TF32)."""
    import torch

    return bool(torch.version.hip)


def truncation_by_bucket(rows: list[dict], win) -> dict:
    """{bucket: {"items", "truncated", "fraction"}} over the items the window tokenized."""
    return truncation_counts(rows, win.tokens_kept, win.tokens_total)


def truncation_counts(rows: list[dict], kept: list, total: list) -> dict:
    """{bucket: {"items", "truncated", "fraction"}}; ``kept``/``total``: tokens per corpus item
    (``rows`` order) after/before truncation, None where unknown. Fractions over the known items."""
    out = {}
    for b in BUCKETS:
        idx = [i for i, r in enumerate(rows) if r.get("bucket") == b]
        if not idx:
            continue
        known = [i for i in idx if total[i] is not None and kept[i] is not None]
        cut = sum(1 for i in known if total[i] > kept[i])
        out[b] = {"items": len(idx), "truncated": cut if known else None,
                  "fraction": round(cut / len(known), 6) if known else None}
    return out


def combine_cards(observations: list[tuple[int, dict]]) -> dict:
    """The pass's observation from its cards' (rank, observed) records.

    A field observed identically on every card gives that value; differing values are kept per
    card as "card 0: x; card 1: y". ``max_tokens`` is the pass's longest item (max over cards).
    A field some card did not record is kept per card with "not recorded". Empty: no card observed.
    """
    out: dict = {}
    for k in dict.fromkeys(k for _, o in observations for k in o):  # first-seen order
        vals = [(r, o.get(k, "not recorded")) for r, o in observations]
        if k == "max_tokens" and all(isinstance(v, int) for _, v in vals):
            out[k] = max(v for _, v in vals)
        elif len({json.dumps(v, sort_keys=True, default=str) for _, v in vals}) == 1:
            out[k] = vals[0][1]
        else:
            out[k] = "; ".join(f"card {r}: {v}" for r, v in vals)
    return out

