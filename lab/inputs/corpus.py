"""Corpus loading, length buckets, stratified sampling, fingerprints and the corpus card.

A corpus item is ``{"id": str, "text": str, "label": str}``; the built comparison
corpus adds ``bucket`` (short / medium / long) and ``n_tokens`` (tokenizer count,
special tokens excluded). A corpus built without labels (``--no-labels``: no reference
answers) has ``"label": null`` on every item, is drawn as the labelled build of the same source,
seed and counts would draw (stratified by the labels the source carries, set aside; by bucket
only where it carries none), and is judged by the ``agreement`` metric (each pass against the
reference variant's first valid pass).
Source rule: seed, "Esempio: classificare gli stessi 1.000 testi" (600 short, 300 medium,
100 long, class-representative, limits set with the chosen tokenizer); tuning data kept
apart from the comparison corpus (seed, "Preparare gli input").
"""

from __future__ import annotations

import csv
import io
import json
import random
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from lab.facts.constants import CORPUS_SEED
from lab.facts.diskfull import staged_files
from lab.facts.errors import UserError
from lab.facts.files import sha256_bytes, sha256_file

BUCKETS = ("short", "medium", "long")
BOM = b"\xef\xbb\xbf"  # UTF-8 byte-order mark


class CorpusError(UserError):
    """Bad corpus input; the message is one line naming the file, line and fix."""


@dataclass(frozen=True)
class BucketLimits:
    """Token-count limits: short < ``short_below``; long > ``long_above``; medium between (inclusive)."""

    short_below: int = 64
    long_above: int = 256

    def bucket(self, n_tokens: int) -> str:
        if n_tokens < self.short_below:
            return "short"
        if n_tokens > self.long_above:
            return "long"
        return "medium"


@dataclass(frozen=True)
class Item:
    id: str
    text: str
    label: str | None  # None: a corpus without labels (load_items with label_field None)


NO_LABEL = "(no label)"  # the class name an unlabelled corpus's counts are kept under (corpus card)
NO_LABELS_HINT = ("or --no-labels for a corpus without reference answers (judged by agreement with the "
                  "reference variant)")


def has_label(value) -> bool:
    """Whether a corpus item's ``label`` value is a label: not absent, null, or blank (an empty
    string would otherwise be one more class, and every metric on it trivially true)."""
    return value is not None and bool(str(value).strip())


def labelled(rows: Iterable[dict]) -> bool:
    """Whether a built corpus's ``rows`` carry labels: True when every item has one, False when
    none has (built with --no-labels). Raises CorpusError (one line) for a corpus that mixes both:
    a metric on labels would silently skip the items without one."""
    has = [has_label(r.get("label")) for r in rows]
    if all(has):
        return True
    if not any(has):
        return False
    first = next(r for r, h in zip(rows, has, strict=True) if not h)
    raise CorpusError(f"item {first.get('id')!r} has no label while {sum(has)} other(s) have one; label every item, "
                      "or rebuild the corpus with --no-labels (judged by agreement with the reference variant)")


def item_hash(item: dict) -> str:
    """sha256 of an item's canonical JSON (id, text, label) — the per-item fingerprint."""
    canon = json.dumps({"id": item["id"], "text": item["text"], "label": item["label"]},
                       ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return sha256_bytes(canon.encode("utf-8"))


def _decode(raw: bytes, path: Path, lineno: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorpusError(
            f"{path}:{lineno}: not valid UTF-8 (byte {exc.start}); re-encode the file as UTF-8"
        ) from None


def _check(rec: dict, fields: tuple[str, str, str | None], path: Path, lineno: int,
           seen: dict[str, int]) -> Item:
    id_f, text_f, label_f = fields
    named = [f for f in fields if f is not None]
    for f in named:
        if f not in rec or rec[f] is None or (f == label_f and not has_label(rec[f])):
            what = (f"missing field '{f}'" if f not in rec else f"field '{f}' is null" if rec[f] is None
                    else f"field '{f}' is empty")
            raise CorpusError(
                f"{path}:{lineno}: {what}; every item needs {', '.join(named)}"
                " (set other names with --id-field/--text-field/--label-field"
                + (f", {NO_LABELS_HINT})" if f == label_f else ")"))
    item_id, text = str(rec[id_f]), rec[text_f]
    label = None if label_f is None else str(rec[label_f])
    if not isinstance(text, str):
        raise CorpusError(f"{path}:{lineno}: text of id '{item_id}' is {type(text).__name__} {str(text)[:40]!r}, "
                          f"not a string; write it as a JSON string (in quotes)")
    if not text.strip():
        raise CorpusError(f"{path}:{lineno}: empty text for id '{item_id}'; remove the item or give it text")
    if not item_id.strip():
        raise CorpusError(f"{path}:{lineno}: empty id; every item needs a stable non-empty id")
    if item_id in seen:
        raise CorpusError(
            f"{path}:{lineno}: duplicate id '{item_id}' (first on line {seen[item_id]}); ids must be unique")
    seen[item_id] = lineno
    return Item(item_id, text, label)


def load_items(path: str | Path, id_field: str = "id", text_field: str = "text",
               label_field: str | None = "label", labels_ignored: dict[str, str] | None = None) -> list[Item]:
    """Read a JSONL (one object per line) or CSV (header row) source.

    Returns items in file order; ``label_field`` None reads no label (every Item.label None:
    a corpus without reference answers, ``corpus build --no-labels``), and the items whose
    ``label`` field holds one all the same are put in ``labels_ignored`` when given, {id: label}
    (so the build can draw as the labelled build would and say what it set aside). Raises
    CorpusError (one line, with the line number) on non-UTF-8 bytes, malformed JSON, a missing,
    null or (label) blank field, an empty text or id, or a duplicate id.
    """
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"{path}: no such file; give the path of a .jsonl or .csv corpus")
    fields = (id_field, text_field, label_field)
    seen: dict[str, int] = {}
    items: list[Item] = []
    data = path.read_bytes()
    if data.startswith(BOM):  # spreadsheet exports: the mark is not part of the first column's name
        data = data[len(BOM):]
    if path.suffix.lower() == ".csv":
        lines = data.split(b"\n")
        for i, raw in enumerate(lines, start=1):
            _decode(raw, path, i)
        reader = csv.DictReader(io.StringIO(data.decode("utf-8"), newline=""))
        csv.field_size_limit(max(csv.field_size_limit(), len(data)))  # a long text is one field
        missing = [f for f in fields if f is not None and f not in (reader.fieldnames or [])]
        if missing:
            raise CorpusError(
                f"{path}:1: header has no column '{missing[0]}' (columns: {', '.join(reader.fieldnames or [])});"
                " set --id-field/--text-field/--label-field"
                + (f", {NO_LABELS_HINT}" if missing[0] == label_field else ""))
        for rec in reader:
            items.append(_check(rec, fields, path, reader.line_num, seen))
            if labels_ignored is not None and label_field is None and has_label(rec.get("label")):
                labels_ignored[items[-1].id] = str(rec["label"])
    else:
        for i, raw in enumerate(data.split(b"\n"), start=1):
            line = _decode(raw, path, i).strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CorpusError(f"{path}:{i}: not valid JSON ({exc.msg}); one JSON object per line") from None
            if not isinstance(rec, dict):
                raise CorpusError(f"{path}:{i}: expected a JSON object per line")
            items.append(_check(rec, fields, path, i, seen))
            if labels_ignored is not None and label_field is None and has_label(rec.get("label")):
                labels_ignored[items[-1].id] = str(rec["label"])
    if not items:
        raise CorpusError(f"{path}: no items; the corpus file is empty")
    return items


def read_corpus(path: str | Path) -> list[dict]:
    """Read a built corpus JSONL (id, text, label, bucket, n_tokens) in file order."""
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def count_tokens(texts: Sequence[str], tokenizer) -> list[int]:
    """Token count per text with ``tokenizer``, special tokens excluded, no truncation."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # counting long texts is the point: no "longer than max" warning
    out: list[int] = []
    for start in range(0, len(texts), 256):
        enc = tokenizer(list(texts[start:start + 256]), add_special_tokens=False,
                        truncation=False, return_attention_mask=False,
                        return_token_type_ids=False)
        out.extend(len(ids) for ids in enc["input_ids"])
    return out


def _class_order(c: str | None) -> tuple[bool, str]:
    """Sort key of a stratum: the labels in string order, then the items without one."""
    return (c is None, c or "")


def _quotas(total: int, weights: Mapping[str | None, int], available: Mapping[str | None, int]
            ) -> dict[str | None, int]:
    """Largest-remainder allocation of ``total`` over classes by ``weights``, capped by availability."""
    if sum(available.values()) < total:
        raise CorpusError(f"only {sum(available.values())} items available for {total} requested")
    quota = {c: 0 for c in weights}
    remaining = total
    active = {c for c in weights if available.get(c, 0) > 0}
    while remaining > 0 and active:
        wsum = sum(weights[c] for c in active)
        shares = {c: remaining * weights[c] / wsum for c in sorted(active, key=_class_order)}
        floors = {c: int(s) for c, s in shares.items()}
        left = remaining - sum(floors.values())
        for c in sorted(active, key=lambda c: (-(shares[c] - floors[c]), _class_order(c)))[:left]:
            floors[c] += 1
        for c in sorted(active, key=_class_order):
            take = min(floors[c], available[c] - quota[c])
            quota[c] += take
            remaining -= take
        active = {c for c in active if quota[c] < available[c]}
    return quota


DEFAULT_CORPUS_ITEMS = 1000
"""Comparison corpus size of `iteralab corpus build` when no count is given (the seed's
example: "classificare gli stessi 1.000 testi"), drawn in the source's own length-bucket
shares; a smaller source is taken whole."""


@dataclass(frozen=True)
class BuildSpec:
    """What to draw: the comparison corpus, the tuning split, seed, limits.

    ``sizes``: items per length bucket ({"short": 600, ...}: the demo's), or None to draw
    ``items`` (None: DEFAULT_CORPUS_ITEMS, or the whole source when it has fewer) split over
    the buckets in the source's own shares. ``tuning_size``: items of a disjoint tuning split
    (to fit or set up a model; 0 when the campaign brings its own model).
    """

    sizes: dict | None = None
    items: int | None = None
    tuning_size: int = 0
    seed: int = CORPUS_SEED
    limits: BucketLimits = BucketLimits()


def bucket_sizes(spec: BuildSpec, available: dict[str, int]) -> dict[str, int]:
    """Items to draw per bucket: ``spec.sizes`` as given, else ``spec.items`` split over the
    buckets by ``available`` (items of the source per bucket; largest remainder). Raises
    CorpusError naming the flag when more items are asked than the source has."""
    total = sum(available.values())
    if spec.sizes is not None:
        for b in BUCKETS:
            want, have = spec.sizes.get(b, 0), available.get(b, 0)
            if want > have:
                raise CorpusError(
                    f"--{b} {want}: the source has only {have} {b} item(s) ({spec.limits.short_below} / "
                    f"{spec.limits.long_above} token limits); give --{b} {have} or fewer, move the limits "
                    "(--short-below / --long-above), or give --items N instead to draw in the source's shares")
        return {b: spec.sizes.get(b, 0) for b in BUCKETS}
    if spec.items is not None and spec.items > total:
        raise CorpusError(f"--items {spec.items}: the source has only {total} items; give --items {total} "
                          "or fewer (without --items a source under "
                          f"{DEFAULT_CORPUS_ITEMS:,} items is taken whole)")
    want = min(total, DEFAULT_CORPUS_ITEMS if spec.items is None else spec.items)
    quota = _quotas(want, {b: available.get(b, 0) for b in BUCKETS}, {b: available.get(b, 0) for b in BUCKETS})
    return {b: quota[b] for b in BUCKETS}


def stratified_split(items: list[Item], n_tokens: list[int], spec: BuildSpec,
                     strata: dict[str, str] | None = None) -> tuple[list[dict], list[dict]]:
    """Draw the comparison corpus (per bucket, class-stratified) and a disjoint tuning split.

    Class weights are the classes' shares in the whole source, so the drawn corpus keeps a
    representative class distribution. An item without a label is stratified by
    ``strata[id]`` (the label the source carried, set aside by --no-labels: the draw is then
    the labelled build's, ids and texts, with the labels dropped) or, absent there, in one class
    of its own (a source without labels: strata are the buckets alone). Deterministic for a
    given seed and source order. Returns (comparison, tuning), each a list of dicts with bucket
    and n_tokens.
    """
    rng = random.Random(spec.seed)  # drawn from in the same order for given or derived sizes
    strata = strata or {}
    rows: list[dict[str, Any]] = [
        dict(id=it.id, text=it.text, label=it.label, bucket=spec.limits.bucket(n), n_tokens=n)
            for it, n in zip(items, n_tokens, strict=True)]
    cls = {r["id"]: r["label"] if r["label"] is not None else strata.get(r["id"]) for r in rows}
    weights: dict[str | None, int] = {}
    for r in rows:
        weights[cls[r["id"]]] = weights.get(cls[r["id"]], 0) + 1
    comparison: list[dict] = []
    sizes = bucket_sizes(spec, {b: sum(1 for r in rows if r["bucket"] == b) for b in BUCKETS})
    for bucket in BUCKETS:
        pool: dict[str | None, list[dict]] = {c: [] for c in weights}
        for r in rows:
            if r["bucket"] == bucket:
                pool[cls[r["id"]]].append(r)
        quota = _quotas(sizes[bucket], weights, {c: len(v) for c, v in pool.items()})
        for c in sorted(pool, key=_class_order):
            comparison.extend(rng.sample(pool[c], quota[c]))
    chosen = {r["id"] for r in comparison}
    rest: dict[str | None, list[dict]] = {c: [] for c in weights}
    for r in rows:
        if r["id"] not in chosen:
            rest[cls[r["id"]]].append(r)
    left = sum(len(v) for v in rest.values())
    if spec.tuning_size > left:
        room = f"give --tuning {left} or fewer" if left else "give --tuning 0"
        raise CorpusError(
            f"--tuning {spec.tuning_size}: only {left} item(s) are left for a tuning split after the "
            f"{len(comparison)}-item comparison corpus; {room}, or a smaller comparison corpus (--items, "
            "--short/--medium/--long) to leave more; --tuning 0 (the default) suits a campaign that brings "
            "its own model: the split only serves to fit or set up one")
    tq = _quotas(spec.tuning_size, weights, {c: len(v) for c, v in rest.items()})
    tuning: list[dict] = []
    for c in sorted(rest, key=_class_order):
        tuning.extend(rng.sample(rest[c], tq[c]))
    order = {r["id"]: i for i, r in enumerate(rows)}
    comparison.sort(key=lambda r: order[r["id"]])
    tuning.sort(key=lambda r: order[r["id"]])
    return comparison, tuning


def write_jsonl(rows: Iterable[dict], path: Path) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")


def counts_by_bucket_class(rows: list[dict]) -> dict[str, dict[str, int]]:
    """{bucket: {label: count}} over ``rows``."""
    out: dict[str, dict[str, int]] = {b: {} for b in BUCKETS}
    for r in rows:
        d = out.setdefault(r["bucket"], {})
        label = NO_LABEL if r["label"] is None else r["label"]
        d[label] = d.get(label, 0) + 1
    return {b: dict(sorted(d.items())) for b, d in out.items()}


def corpus_card(comparison_path: Path, tuning_path: Path, comparison: list[dict],
                tuning: list[dict], source: Path, tokenizer_info: dict, spec: BuildSpec) -> dict:
    """The corpus card: file hashes, per-item hashes, counts per bucket x class, tokenizer, limits."""
    return {
        "source": {"path": source.name, "sha256": sha256_file(source)},
        "comparison": {"file": comparison_path.name, "sha256": sha256_file(comparison_path),
                       "items": len(comparison), "counts": counts_by_bucket_class(comparison),
                       "labels": all(r["label"] is not None for r in comparison)},
        "tuning": {"file": tuning_path.name, "sha256": sha256_file(tuning_path),
                   "items": len(tuning)},
        "disjoint": not ({r["id"] for r in comparison} & {r["id"] for r in tuning}),
        "tokenizer": tokenizer_info,
        "limits": {**asdict(spec.limits), "rule": "short < short_below <= medium <= long_above < long"},
        "sizes": spec.sizes,
        "seed": spec.seed,
        "item_sha256": {r["id"]: item_hash(r) for r in comparison},
    }


def build_corpus(source: str | Path, out_dir: str | Path, tokenizer, tokenizer_info: dict,
                 spec: BuildSpec = BuildSpec(), id_field: str = "id", text_field: str = "text",
                 label_field: str | None = "label", force: bool = False) -> dict:
    """Build ``comparison.jsonl``, ``tuning.jsonl`` and ``corpus_card.json`` in ``out_dir``.

    ``label_field`` None: a corpus without labels (each item ``"label": null``, the card says
    ``"labels": false``; the draw is stratified by the labels the source carried all the same,
    so it holds the ids and texts the labelled build would, by bucket only where it carries
    none; those labels are counted in the returned card's ``source_labels_ignored``, not written). Returns
    the corpus card. Raises CorpusError on bad input, too few items per bucket, or (``force``
    False) an ``out_dir`` already holding a corpus whose files this build would change (a locked
    campaign reads them by sha256; building the same files again passes).
    """
    source = Path(source)
    out = Path(out_dir)
    counts = [*(spec.sizes or {}).items(), ("tuning", spec.tuning_size)]
    if spec.items is not None:
        counts.append(("items", spec.items))
    for name, n in counts:
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise CorpusError(f"--{name} {n!r}: item counts must be integers >= 0")
    if (spec.sizes is not None and sum(spec.sizes.values()) < 1) or spec.items == 0:
        raise CorpusError("the comparison corpus would be empty; ask for at least one item")
    if not 0 < spec.limits.short_below <= spec.limits.long_above + 1:
        raise CorpusError(f"limits short_below={spec.limits.short_below} long_above={spec.limits.long_above}: "
                          "need 0 < short_below <= long_above + 1 tokens")
    if out.exists() and not out.is_dir():
        raise CorpusError(f"--out {out}: exists and is not a folder; choose a folder path")
    ignored: dict[str, str] = {}
    items = load_items(source, id_field, text_field, label_field, ignored)
    n_tokens = count_tokens([it.text for it in items], tokenizer)
    empty = [it.id for it, n in zip(items, n_tokens, strict=True) if n == 0]
    if empty:
        raise CorpusError(f"{source}: text of id '{empty[0]}' gives 0 tokens with "
                          f"{tokenizer_info.get('name') or 'the tokenizer'} (only control or zero-width "
                          f"characters?){f' and {len(empty) - 1} more' if len(empty) > 1 else ''}; "
                          "remove the item or give it text")
    comparison, tuning = stratified_split(items, n_tokens, spec, ignored)
    drawn = {b: sum(1 for r in comparison if r["bucket"] == b) for b in BUCKETS}
    # the card records the sizes drawn (those given, or the source's shares of --items)
    card = _write_corpus(out, comparison, tuning, source, tokenizer_info, replace(spec, sizes=drawn), force)
    return {**card, "source_labels_ignored": len(ignored)} if ignored else card


def _write_corpus(out: Path, comparison: list[dict], tuning: list[dict], source: Path, tokenizer_info: dict,
                  spec: BuildSpec, force: bool = False) -> dict:
    """Write the three files in a temporary folder inside ``out`` and rename each into place
    only once all are complete: a full disk (DiskFull, one line) or any failure leaves the
    corpus that was there whole, card and files matching; so does a refusal to change a corpus
    already there (``force`` False: :func:`refuse_changed_corpus`)."""
    def refuse(exc: OSError) -> CorpusError:
        return CorpusError(f"--out {out}: cannot create the folder ({exc.strerror}); choose a folder you can "
                           "write to")

    with staged_files(out, ".corpus-build-", "creating the corpus folder",
                      "writing the corpus; the corpus there before is unchanged", refuse) as tmp:
        cpath, tpath = tmp / "comparison.jsonl", tmp / "tuning.jsonl"
        write_jsonl(comparison, cpath)
        write_jsonl(tuning, tpath)
        card = corpus_card(cpath, tpath, comparison, tuning, source, tokenizer_info, spec)
        (tmp / "corpus_card.json").write_text(json.dumps(card, indent=1, ensure_ascii=False) + "\n",
                                              encoding="utf-8")
        if not force:
            refuse_changed_corpus(out, tmp)
    return card


CORPUS_FILES = ("comparison.jsonl", "tuning.jsonl", "corpus_card.json")
"""The files ``corpus build`` writes into its --out folder."""


def refuse_changed_corpus(out: Path, built: Path) -> None:
    """CorpusError (one line) when ``out`` already holds any of CORPUS_FILES whose bytes differ
    from the same file in ``built`` (the new build): what is there (its items and sha256,
    from the card when readable), and the two ways on (another --out, or --force)."""
    changed = [n for n in CORPUS_FILES if (out / n).is_file() and (out / n).read_bytes() != (built / n).read_bytes()]
    if not changed:
        return
    try:
        old = json.loads((out / "corpus_card.json").read_text(encoding="utf-8"))["comparison"]
        there = f"a corpus of {old['items']} items (comparison.jsonl sha256 {str(old['sha256'])[:12]})"
    except (OSError, ValueError, KeyError, TypeError):
        there = f"corpus files ({', '.join(n for n in CORPUS_FILES if (out / n).is_file())})"
    raise CorpusError(f"--out {out} already holds {there}, and this build would change {', '.join(changed)} "
                      "(a campaign locked on it would no longer verify); give another --out, or add --force "
                      "to replace it")


def fingerprint(path: str | Path) -> dict:
    """Corpus fingerprint for manifests: file sha256, item count, and per-bucket counts."""
    rows = read_corpus(path)
    counts = {b: sum(1 for r in rows if r.get("bucket") == b) for b in BUCKETS}
    return {"file": Path(path).name, "sha256": sha256_file(path), "items": len(rows), "buckets": counts}
