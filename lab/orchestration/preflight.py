"""Checks run at `protocol lock`, before any pass: what can be known now is refused now.

A campaign is hours of rented GPU time; an input that can never give a valid result must
not lock, run every pass and end "finished" with every row failed. The checks load the
model's config and tokenizer (never the weights), read the corpus and ask the host how many
GPUs it has. Each refusal is one line that names the model's (or host's) own figure and the
fix. The Plan screen shows the same list.

Sources: seed ("definisci i limiti con il tokenizer scelto"; "Verificare ... prima del
primo passaggio misurato"); SPEC 3.1 (protocol locked before the first measured pass).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, replace
from pathlib import Path

from lab.engines.vllm import vllm_refusal
from lab.facts.constants import AGREEMENT, VLLM_MEMORY_FRACTION
from lab.facts.errors import clip
from lab.facts.files import REPO_ROOT, sha256_file
from lab.facts.host import gpu_count, iteralab_command
from lab.inputs.corpus import BUCKETS, CorpusError, count_tokens, has_label, labelled, load_items, read_corpus
from lab.inputs.models import ModelFolderError, local_checkpoint_config, model_folder, tokenizer_fingerprint
from lab.inputs.variants import DTYPES
from lab.kinds.kind import ANY, CAUSAL_LM, ENCODER, SEQUENCE_CLASSIFICATION, VECTOR

DEVICE_RE = re.compile(r"^(auto|cpu|cuda|rocm|gpu|cuda:\d+)$")


@dataclass(frozen=True)
class Check:
    """One lock-time check. ``ok``: True passed, False refused, None not applicable (why in detail)."""

    name: str
    ok: bool | None
    detail: str


def pad_suggestion(tok) -> str | None:
    """A token that can pad: a vocabulary entry named like a padding token, else end-of-sequence."""
    vocab = tok.get_vocab()
    return next((t for t in ("[PAD]", "<pad>", "<|pad|>") if t in vocab), None) or tok.eos_token or tok.unk_token


def _load_model_facts(model_ref: str, revision: str | None = None):
    """(config, tokenizer) from a local folder or the local hub cache at ``revision`` ([model]
    revision, None for a local folder or hub main); never the weights."""
    from transformers import AutoConfig, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    cfg = AutoConfig.from_pretrained(model_ref, revision=revision, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(model_ref, revision=revision, local_files_only=True)
    return cfg, tok


def check_corpus(proto) -> tuple[list[Check], dict[str, str]]:
    path = proto.corpus_path
    if not path.is_file():
        build = f"{iteralab_command()} corpus build --source YOUR.jsonl --out {shlex.quote(str(path.parent))}"
        return [Check("corpus", False, f"corpus {path} not found; build it (`{build}`) or fix [corpus] path")], {}
    try:
        items = load_items(path, label_field=None)  # JSON lines, ids and texts; labels next, from the same lines
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if labelled(rows):  # every row has one (labelled refuses a corpus labelled in part)
            items = [replace(it, label=str(r["label"])) for it, r in zip(items, rows, strict=True)]
    except CorpusError as exc:
        return [Check("corpus", False, str(exc) if str(exc).startswith(str(path)) else f"{path}: {exc}")], {}
    q = proto.config.quality
    with_labels = items[0].label is not None
    if not with_labels and q.metric != AGREEMENT:
        return [Check("corpus", False, f"{path.name} has no labels (no item has one): [quality] metric "
                                       f"{q.metric!r} compares predictions with labels; use metric = "
                                       f'"{AGREEMENT}" (each pass against the reference variant\'s first valid '
                                       "pass), or build the corpus from a source with labels")], {}
    for r in rows:
        if r.get("bucket") not in BUCKETS:
            return [Check("corpus", False, f"{path.name}: item {r.get('id')!r} has bucket {r.get('bucket')!r}, "
                                           f"not one of {', '.join(BUCKETS)}; build the corpus with "
                                           f"`{iteralab_command()} corpus build --source YOUR.jsonl --out "
                                           f"{shlex.quote(str(path.parent))}`")], {}
    labels = {it.label for it in items}
    card_problem = check_card(proto.card_path, path)
    if card_problem:
        return [Check("corpus", False, card_problem)], {}
    return ([Check("corpus", True, f"{len(items)} items, {f'{len(labels)} labels' if with_labels else 'no labels'}")],
            {it.id: it.text for it in items})


def check_card(card: Path | None, corpus: Path) -> str:
    """'' when no card is declared or the declared ``[corpus] card`` describes the ``[corpus]
    path`` file (its ``comparison.sha256``, written by `iteralab corpus build`); else why not,
    in one line with the fix. A card that is missing or describes another file was skipped:
    the tokenizer check, the bucket counts and the archived card then spoke of nothing, or of
    another corpus."""
    if card is None:
        return ""
    fix = (f"rebuild it with `{iteralab_command()} corpus build --source YOUR.jsonl --out "
           f"{shlex.quote(str(card.parent))}` or remove [corpus] card")
    if not card.is_file():
        return f"[corpus] card {card} not found; {fix}"
    try:
        described = json.loads(card.read_text(encoding="utf-8"))["comparison"]["sha256"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return (f"corpus card {card.name} has no comparison sha256 (not written by `{iteralab_command()} corpus "
                f"build`); {fix}")
    actual = sha256_file(corpus)
    if described != actual:
        return (f"corpus card {card.name} describes another file (sha256 {str(described)[:12]}...), not [corpus] "
                f"path {corpus.name} (sha256 {actual[:12]}...); {fix}")
    return ""


CAUSAL_LM_ARCHITECTURES = ("ForCausalLM", "LMHeadModel")
"""Architecture name endings transformers' AutoModelForCausalLM loads (e.g. LlamaForCausalLM,
GPT2LMHeadModel, the demo generator's BertLMHeadModel)."""


def check_model(proto, texts: dict[str, str], labels: set[str]) -> list[Check]:
    ref = proto.model_ref
    m = proto.config.model
    if m.path is not None:
        try:  # before transformers: a folder without usable weights fails every pass at model load
            local_checkpoint_config(ref)
        except ModelFolderError as exc:
            return [Check("model", False, f"[model] path: {exc}")]
    try:
        cfg, tok = _load_model_facts(ref, m.revision)
    except Exception as exc:  # missing config.json, not in the hub cache, unknown model type
        where = "a transformers checkpoint folder" if m.path else "in the local Hugging Face cache (download it first)"
        return [Check("model", False, f"model {ref}: config/tokenizer not loadable ({type(exc).__name__}: "
                                      f"{str(exc).splitlines()[0][:160]}); it must be {where}")]
    out = []
    archs = list(getattr(cfg, "architectures", None) or [])
    kind = proto.kind
    arch = check_architecture(kind, Path(ref).name, archs, cfg)
    out.append(arch)
    # a custom entry loads its own model (no attention of the lab's); a classifier's head must be right first
    if kind.architecture != ANY and (arch.ok or kind.architecture != SEQUENCE_CLASSIFICATION):
        out.append(check_attention(proto, cfg))
    names = {str(v) for v in (getattr(cfg, "id2label", None) or {}).values()}
    unknown = sorted(labels - names)
    if not labels:  # check_corpus let it through only with the agreement metric
        out.append(Check("labels", True, "no corpus labels: each pass is judged by its agreement with the "
                                         "reference variant's first valid pass"))
    elif kind.labels_role is not None:  # not the checkpoint's labels: what they are to the kind
        out.append(Check("labels", True, f"{len(labels)} corpus labels, {kind.labels_role}"))
    elif unknown:
        shown = ", ".join(repr(n) for n in sorted(names)[:4]) + (", ..." if len(names) > 4 else "")
        out.append(Check("labels", False, f"corpus label(s) {', '.join(map(repr, unknown[:3]))} are not labels the "
                                          f"model can produce (its config id2label has {len(names)}: {shown}); "
                                          "relabel the corpus with the model's label names or use a matching model"))
    else:
        out.append(Check("labels", True, f"{len(labels)} corpus labels among the model's {len(names)}"))
    counts = count_tokens(list(texts.values()), tok)
    empty = [i for i, n in zip(texts, counts, strict=True) if n == 0]
    if empty:
        out.append(Check("tokens", False, f"text of id {empty[0]!r} gives 0 tokens with the model's tokenizer (only "
                                          "control or zero-width characters?); remove the item or give it text"))
    else:
        out.append(Check("tokens", True, f"every text has >= 1 token (longest {max(counts)})"))
    if kind.lab_tokenizes:  # a custom entry tokenizes in its own code
        out.append(check_first_ids(proto, tok, texts))
    limit = getattr(cfg, "max_position_embeddings", None)
    tok_limit = getattr(tok, "model_max_length", None)
    limits = [(n, v) for n, v in (("max_position_embeddings", limit), ("tokenizer model_max_length", tok_limit))
              if isinstance(v, int) and 0 < v < 10**6]
    bad = [(v, n, x) for v in proto.variants for n, x in limits if v.max_length > x]
    if bad:
        v, n, x = bad[0]
        out.append(Check("max_length", False, f"variant {v.name} max_length {v.max_length} exceeds the model's {n} "
                                              f"{x}; declare max_length <= {x}"))
    else:
        out.append(Check("max_length", True, ", ".join(f"{n} {x}" for n, x in limits) or "no limit declared"))
    if kind.generates_text:
        out.append(check_new_tokens(proto.config.task.rule(), tok, limit, texts))
        out.append(check_generation_config(ref, m.revision, proto.config.task.rule()))
    declared = m.pad_token
    if declared is not None:
        vocab = tok.get_vocab()
        if declared not in vocab:
            out.append(Check("pad_token", False, f"[model] pad_token {declared!r} is not in the tokenizer's vocabulary "
                                                 f"({len(vocab)} tokens); name an existing token, e.g. "
                                                 f"{pad_suggestion(tok)!r}"))
        else:
            out.append(Check("pad_token", True, f"{declared!r} declared in [model] (recorded in the lock)"))
    elif tok.pad_token is None:
        out.append(Check("pad_token", False, f"the tokenizer of {Path(ref).name} has no padding token "
                                             f"(pad_token None); declare [model] pad_token, e.g. "
                                             f"pad_token = {pad_suggestion(tok)!r}"))
    else:
        out.append(Check("pad_token", True, f"{tok.pad_token!r} from the tokenizer"))
    card = proto.card_path
    if card is not None and card.is_file():
        recorded = (json.loads(card.read_text(encoding="utf-8")).get("tokenizer") or {})
        fp = recorded.get("fingerprint")
        if fp is None:
            out.append(Check("tokenizer", None, f"corpus card {card.name} records no tokenizer fingerprint; "
                                                f"rebuild it with `{iteralab_command()} corpus build --tokenizer "
                                                "MODEL` to check"))
        elif fp != tokenizer_fingerprint(tok):
            out.append(Check("tokenizer", False, f"corpus card {card.name} counted tokens with "
                                                 f"{recorded.get('name') or recorded.get('path')!r}, not the model's "
                                                 f"tokenizer ({Path(ref).name}): length buckets would be wrong; "
                                                 f"rebuild with `{iteralab_command()} corpus build --tokenizer {ref}`"))
        else:
            out.append(Check("tokenizer", True, "corpus buckets counted with the model's tokenizer"))
    return out


def check_architecture(kind, model: str, archs: list[str], cfg) -> Check:
    """The checkpoint (``cfg``, its config; ``archs`` its declared architectures; ``model`` its
    folder name) is one the task ``kind``'s job loads (its ``architecture``): an encoder's hidden
    state for embeddings, a causal LM for generation, a sequence-classification head with labels
    for classification; any model for a custom entry (its code loads what it needs)."""
    if kind.architecture == ENCODER:  # any encoder: its last hidden state is pooled (lab.passes.tasks.embedding)
        width = getattr(cfg, "hidden_size", None)
        return Check("architecture", bool(width), f"{', '.join(archs) or 'encoder'}: last hidden state of "
                                                  f"width {width}, pooled by [task] pooling" if width else
                     f"model {model} declares no hidden_size; an encoder checkpoint is needed")
    if kind.architecture == CAUSAL_LM:  # lab.passes.tasks.generation: AutoModelForCausalLM
        causal = any(a.endswith(CAUSAL_LM_ARCHITECTURES) for a in archs)
        return Check("architecture", causal, ", ".join(archs) if causal else
                     f"model {model} declares architectures {archs or 'none'}; a causal language "
                     f"model ({' or '.join('…' + a for a in CAUSAL_LM_ARCHITECTURES)}) is needed for {kind.name}")
    if kind.architecture == ANY:  # the user's code loads its own model: only the tokenizer is the lab's
        return Check("architecture", True, f"{', '.join(archs) or 'any'}: the custom entry loads what it "
                                           "needs (model_path in its settings); the lab uses the [model] "
                                           "tokenizer for the length buckets only")
    if not any(a.endswith("ForSequenceClassification") for a in archs):
        return Check("architecture", False, f"model {model} declares architectures "
                                            f"{archs or 'none'}; a sequence-classification checkpoint "
                                            "(…ForSequenceClassification) is needed")
    return Check("architecture", True, ", ".join(archs))


FIRST_ITEMS = 8
"""How many of the corpus's first items check_first_ids tokenizes at lock."""


def check_first_ids(proto, tok, texts: dict[str, str]) -> Check:
    """The first ``FIRST_ITEMS`` items tokenized as a pass will (generation: the prompt,
    lab.passes.tasks.generation_core.encode_prompts; else the text, truncated at the first
    variant's max_length), refused when one's ids start or end with the same special token twice:
    the prompt or text holds a token the tokenizer adds itself (``"<s>{text}"`` on a tokenizer
    that adds ``<s>``: ids ``[1, 1, ...]``; vLLM PR 16976, TRL issue 3853)."""
    items = list(texts.items())[:FIRST_ITEMS]
    if proto.kind.generates_text:
        from lab.passes.tasks.generation_core import encode_prompts

        rule = proto.config.task.rule()
        ids = encode_prompts(tok, [t for _, t in items], rule)
        where = "[task] prompt"
    else:
        max_length = min(v.max_length for v in proto.variants)
        ids = [tok(t, truncation=True, max_length=max_length)["input_ids"] for _, t in items]
        where = "the corpus text"
    special = set(tok.all_special_ids)
    for (item_id, _), seq in zip(items, ids, strict=True):
        ends = [(True, seq[:2]), (False, seq[-2:])] if len(seq) >= 2 else []
        for first, pair in ends:
            if pair[0] == pair[1] and pair[0] in special:
                name = tok.convert_ids_to_tokens(pair[0])
                shown = f"start [{pair[0]}, {pair[1]}, ...]" if first else f"end [..., {pair[0]}, {pair[1]}]"
                return Check("token ids", False, f"the token ids of item {item_id!r} {shown}: {name!r} twice, "
                                                 f"because {where} holds {name!r} and the tokenizer adds it itself; "
                                                 f"remove {name!r} from {where}")
    return Check("token ids", True, f"the first {len(items)} item(s) hold no special token twice")


def check_generation_config(ref: str, revision: str | None, rule) -> Check:
    """A warning naming the decoding fields of the checkpoint's generation_config.json that
    would change a greedy output and that the lab's own configuration sets aside
    (lab.passes.tasks.generation_core.checkpoint_overrides); passed when there are none."""
    from transformers import GenerationConfig

    from lab.passes.tasks.generation_core import (
        CHECKPOINT_GENERATION_FILE,
        checkpoint_overrides,
        lab_generation_config,
        overrides_line,
    )

    try:
        own = GenerationConfig.from_pretrained(ref, revision=revision or "main", local_files_only=True)
    except (OSError, ValueError):
        return Check("generation settings", True, f"no {CHECKPOINT_GENERATION_FILE} in the checkpoint; the lab's "
                                                  "own configuration for the declared rule")
    overrides = checkpoint_overrides(own, lab_generation_config(rule))
    if overrides:
        return Check("generation settings", None, "warning: " + overrides_line(overrides))
    return Check("generation settings", True, f"{CHECKPOINT_GENERATION_FILE} sets nothing the declared rule "
                                              "does not; the lab hands generate its own configuration")


def check_new_tokens(rule, tok, max_positions: int | None, texts: dict[str, str]) -> Check:
    """Every item's prompt (``texts``: id -> text, cut and placed in the template as each pass
    does, lab.passes.tasks.generation_core.encode_prompts) plus the rule's ``max_new_tokens``
    fits the model's ``max_position_embeddings``; else passes would fail at that item's batch
    (generation_core.require_positions). The refusal names the longest prompt and the fix that
    can work (generation_core.positions_fix: a lower max_new_tokens when no cut of the text
    leaves room, else max_text_tokens)."""
    from lab.passes.tasks.generation_core import (
        GenerationRuleError,
        encode_prompts,
        positions_fix,
        template_tokens,
    )

    if not isinstance(max_positions, int) or max_positions <= 0 or not texts:
        return Check("max_new_tokens", True, f"{rule.max_new_tokens}; the model declares no position limit")
    try:
        lengths = [len(s) for s in encode_prompts(tok, list(texts.values()), rule)]
    except GenerationRuleError as exc:  # a cut the tokenizer cannot make
        return Check("max_new_tokens", False, f"[task] {exc}")
    longest = max(range(len(lengths)), key=lengths.__getitem__)
    if lengths[longest] + rule.max_new_tokens > max_positions:
        item = list(texts)[longest]
        fix = positions_fix(rule, max_positions, template_tokens(tok, rule))
        return Check("max_new_tokens", False, f"[task] max_new_tokens {rule.max_new_tokens} with the prompt of id "
                                              f"{item!r} ({lengths[longest]} tokens) passes the model's "
                                              f"{max_positions} positions; {fix}")
    return Check("max_new_tokens", True, f"{rule.max_new_tokens} + the longest prompt's {lengths[longest]} tokens "
                                         f"within the model's {max_positions} positions")


def check_attention(proto, cfg) -> Check:
    """Every declared ``attention`` is an implementation transformers accepts for this model
    with the packages installed here (the pass images pin the same transformers and carry no
    extra kernels, images/requirements-*.txt): the classification model is built from its
    config on torch's meta device (no weights, no memory) with ``attn_implementation`` set,
    so transformers' own check runs. A misspelt name ('spda': ValueError) or a kernel whose
    package is absent ('flash_attention_2': ImportError) would otherwise fail every pass at
    model load."""
    import copy

    import torch
    from transformers import AutoModelForSequenceClassification

    declared = sorted({v.attention for v in proto.variants if v.attention})
    for name in declared:
        try:
            with torch.device("meta"):
                AutoModelForSequenceClassification.from_config(copy.deepcopy(cfg), attn_implementation=name)
        except Exception as exc:  # ValueError (unknown name), ImportError (kernel package absent)
            user = next(v.name for v in proto.variants if v.attention == name)
            why = clip(str(exc), 160)
            return Check("attention", False, f"variant {user}: attention {name!r} cannot be used with this model "
                                             f"here ({type(exc).__name__}: {why}); declare attention = \"sdpa\" "
                                             "(the default) or \"eager\"")
    return Check("attention", True, ", ".join(declared) or "the library's default")


def check_devices(proto) -> list[Check]:
    devices = sorted({v.device for v in proto.variants})
    bad = [d for d in devices if not DEVICE_RE.match(d)]
    if bad:
        return [Check("device", False, f"device {bad[0]!r} unknown; use auto, cpu, cuda, cuda:N or rocm")]
    gpu_devices = [d for d in devices if d not in ("auto", "cpu")]
    if not gpu_devices:
        return [Check("device", True, ", ".join(devices))]
    n, source = gpu_count()
    for d in gpu_devices:
        index = int(d.split(":")[1]) if ":" in d else 0
        if index >= n:
            have = f"{n} GPU" + ("s" if n != 1 else "")
            fix = f"use cuda:0 .. cuda:{n - 1}" if n else "use device = \"cpu\" or \"auto\", or run on a GPU host"
            return [Check("device", False, f"device {d!r} needs GPU index {index} but this host has {have} "
                                           f"({source}); {fix}")]
    return [Check("device", True, f"{', '.join(devices)}; {n} GPU(s) ({source})")]


def check_cards(proto) -> list[Check]:
    """Multi-card variants against this host (``lab.facts.host_cards.check_cards_fit_host``, the
    same rule `campaign run` applies); no line when every variant uses one card."""
    from lab.facts.host_cards import CardsBeyondHost, check_cards_fit_host

    cards = sorted({v.cards for v in proto.variants})
    if cards == [1]:
        return []
    try:
        check_cards_fit_host(proto.variants, proto.config.timing.threads)
    except CardsBeyondHost as exc:
        return [Check("cards", False, str(exc))]
    return [Check("cards", True, f"{', '.join(map(str, cards))} card(s) per pass; this host has enough")]


def check_projection_rule(proto, items: int | None = None) -> list[Check]:
    """The projection validity rule ([timing] min_window_s, min_accepted_passes; lab.compare
    projects a configuration to a load only when it holds) against what is known at lock: the
    repetitions and the corpus size (``items``; read from the corpus when None). A warning
    (ok None), never a refusal: the campaign still measures; its configurations will be
    marked "too short to project" by compare unless allowed. No line when the rule can be met."""
    t = proto.config.timing
    notes = []
    if t.repetitions < t.min_accepted_passes:
        notes.append(f"repetitions {t.repetitions} < min_accepted_passes {t.min_accepted_passes}: no "
                     "configuration can meet the rule")
    if items is None:
        try:
            items = len(read_corpus(proto.corpus_path))
        except (OSError, ValueError, CorpusError):  # the corpus checks above name the problem
            items = None
    if items and t.min_window_s and items < t.min_window_s:
        notes.append(f"{items} corpus items: a pass lasts {t.min_window_s:g} s only below "
                     f"{items / t.min_window_s:.2f} items/s")
    if not notes:
        return []
    return [Check("projection rule", None, "warning: " + "; ".join(notes) + "; compare will mark this "
                  "campaign's configurations too short to project (--allow-short overrides, named in "
                  "every output)")]


def check_server_rates(proto, items: int | None = None) -> list[Check]:
    """A server scenario's declared rates against the corpus (``items`` requests per pass; read
    from the corpus when None): a rate whose pass's arrivals last longer than
    lab.facts.constants.LONG_SERVER_PASS_S, named with its length (a warning, ok None: 0.001 req/s
    is a rate, and a 16-hour pass, not a typo the lab can tell). No line when none does."""
    from lab.facts.constants import LONG_SERVER_PASS_S

    rates = sorted({v.request_rate for v in proto.variants if v.request_rate is not None})
    if not rates:
        return []
    if items is None:
        try:
            items = len(read_corpus(proto.corpus_path))
        except (OSError, ValueError, CorpusError):  # the corpus checks name the problem
            return []
    reps = proto.config.timing.repetitions
    long = [r for r in rates if items / r > LONG_SERVER_PASS_S]
    if not long:
        return []
    parts = [f"at {r:g} req/s a pass's {items} requests arrive over {items / r / 3600:.1f} h ({reps} repetition(s): "
             f"{reps * items / r / 3600:.1f} h)" for r in long]
    return [Check("server rates", None, "warning: " + "; ".join(parts) + "; check the rates ([[series]] "
                  "factor = \"request_rate\", req/s)")]


def check_engine(proto) -> list[Check]:
    """Variants declaring engine = "vllm": the vLLM environment can be had (built on first
    need, lab.engines.vllm_env) and the pinned vLLM supports the model's architecture, asked
    of vLLM in its own venv (lab.engines.vllm.vllm_refusal) for the runner the task needs
    (the kind's ``vllm_runner``, lab.kinds); for generation vLLM also loads it and generates a
    token (its transformers back-end resolves decoders it cannot load), with the first vLLM
    variant's memory fraction (else lab.facts.constants.VLLM_MEMORY_FRACTION: on CPU for a
    ``device = "cpu"`` variant or a host without GPUs, else on a GPU). Each declared
    precision's dtype is resolved, and for embedding the pooler vLLM would apply must be the
    declared rule (lab.engines.vllm.pooling_mismatch): a variant that can never run is refused
    here in one line, not in every pass after an engine start. [] without such a variant."""
    vllm = [v for v in proto.variants if v.engine == "vllm"]
    names = [v.name or v.variant_id for v in vllm]
    if not names:
        return []
    try:
        folder = model_folder(proto.model_ref, proto.config.model.revision)
    except ModelFolderError:
        return []  # check_model refused the model already
    runner = proto.kind.vllm_runner
    on_cpu = vllm[0].device == "cpu" or not gpu_count()[0]
    fraction = vllm[0].vllm_memory_fraction or VLLM_MEMORY_FRACTION["cpu" if on_cpu else "gpu"]
    task = proto.config.task
    pooling = (task.pooling, bool(task.normalize)) if proto.kind.record == VECTOR else None
    dtypes = sorted({DTYPES[v.precision] for v in vllm})
    why = next((w for d in dtypes if (w := vllm_refusal(
        folder, runner=runner, load_fraction=fraction if runner == "generate" else None, dtype=d,
        pooling=pooling))), "")
    return [Check("engine", False, why) if why else
            Check("engine", True, f"vllm for {', '.join(names)}: {folder.name} supported ({runner})")]


def lock_checks(proto) -> list[Check]:
    """Every lock-time check of ``proto`` (a lab.orchestration.protocol.Protocol), in order; stops at the
    corpus or model when later checks need them."""
    checks, texts = check_corpus(proto)
    if checks[-1].ok:
        labels = {r["label"] for r in read_corpus(proto.corpus_path) if has_label(r.get("label"))}
        checks += check_model(proto, texts, labels)
    checks += check_user_code(proto)
    checks += check_devices(proto)
    checks += check_cards(proto)
    checks += check_engine(proto)
    checks += check_projection_rule(proto)
    checks += check_server_rates(proto)
    return checks


def check_user_code(proto) -> list[Check]:
    """The user's code the protocol runs ([task] entry, [quality] metric = "file.py:function"),
    each imported in a fresh Python process (lab.passes.tasks.custom.check_in_fresh_process): refused
    in one line when it cannot be loaded or lacks the protocol (signatures included), or is a folder;
    each [task] files item refused when it is missing or a folder."""
    from lab.passes.tasks.custom import check_in_fresh_process

    out = []
    files = proto.task_files()
    for role, ref in (("entry", proto.config.task.entry), ("metric", proto.config.quality.metric)):
        if role not in files or ref is None:
            continue
        hint = repo_hint(ref.rsplit(":", 1)[0], files[role])
        if hint:
            where = "[task] entry" if role == "entry" else "[quality] metric"
            out.append(Check(role, False, f"{where} {ref!r}: {files[role]} not found; {hint}"))
            continue
        full = f"{files[role]}:{ref.rsplit(':', 1)[1]}"
        why = check_in_fresh_process(full, metric=role == "metric", entry_run=proto.kind.entry)
        out.append(Check(role, not why, why or f"{ref} imports in a fresh process and has the protocol"))
    for role, path in files.items():
        if role.startswith("file:") and path.is_dir():
            out.append(Check("files", False, f"[task] files {role[5:]!r}: {path} is a folder; list the files the "
                                             "entry reads, one by one"))
        elif role.startswith("file:") and not path.is_file():
            out.append(Check("files", False, f"[task] files {role[5:]!r}: {path} not found; "
                                             f"{repo_hint(role[5:], path) or 'fix the path'}"))
    return out


def repo_hint(written: str, resolved: Path) -> str:
    """'did you mean "@repo/<written>"?' when the relative path ``written`` (as in the campaign
    file) is not found where it resolved (``resolved``: next to the campaign file) but is a file
    under the bundle, where the documented ``@repo/`` prefix (docs/task-custom.md) points; else ""."""
    if resolved.is_file() or written.startswith("@repo/") or Path(written).expanduser().is_absolute():
        return ""
    return f'did you mean "@repo/{written}"?' if (REPO_ROOT / written).is_file() else ""


def first_refusal(checks: list[Check]) -> Check | None:
    return next((c for c in checks if c.ok is False), None)
