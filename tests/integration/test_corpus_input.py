"""Issue 11 part 3: corpus input. A byte-order mark, a CSV field over 131,072 characters, a
text of zero tokens, a non-string text; buckets counted with the campaign model's tokenizer
(`corpus build --tokenizer`), recorded in the card and checked at lock. Real tokenizers."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, demo_rows, write_campaign

from lab.inputs.corpus import BuildSpec, CorpusError, build_corpus, load_items
from lab.inputs.models import encoder_tokenizer
from lab.orchestration.protocol import ProtocolError, load_protocol, lock

SPEC = BuildSpec(sizes={"short": 2, "medium": 1, "long": 1}, tuning_size=2, seed=1)


def source_rows(n_per_bucket: int = 6) -> list[dict]:
    out = []
    for b in ("short", "medium", "long"):
        out += [{"id": r["id"], "text": r["text"], "label": r["label"]}
                for r in demo_rows() if r["bucket"] == b][:n_per_bucket]
    return out


def write_csv(path: Path, rows: list[dict], bom: bool = False) -> Path:
    with open(path, "w", newline="", encoding="utf-8-sig" if bom else "utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=["id", "text", "label"])
        w.writeheader()
        w.writerows(rows)
    return path


def write_jsonl(path: Path, rows: list[dict], bom: bool = False) -> Path:
    path.write_text(("\ufeff" if bom else "") + "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_byte_order_mark_csv_and_jsonl(tmp_path):
    tok, info = encoder_tokenizer()
    for f in (write_csv(tmp_path / "s.csv", source_rows(), bom=True),
              write_jsonl(tmp_path / "s.jsonl", source_rows(), bom=True)):
        items = load_items(f)
        assert items[0].id == source_rows()[0]["id"]  # not '\ufeffid' / a JSON error
        card = build_corpus(f, tmp_path / f.suffix[1:], tok, info, SPEC)
        assert card["comparison"]["items"] == 4


def test_csv_field_over_the_default_limit_is_read(tmp_path):
    rows = source_rows()
    rows[0]["text"] = "word " * 40_000  # 200,000 characters > csv's default 131,072
    items = load_items(write_csv(tmp_path / "s.csv", rows))
    assert len(items[0].text) == 200_000


def test_zero_token_text_is_refused_with_its_id(tmp_path):
    rows = source_rows()
    rows[3]["text"] = "\u200b\u200b\x00"  # zero-width and control characters only
    tok, info = encoder_tokenizer()
    with pytest.raises(CorpusError, match=rf"text of id '{rows[3]['id']}' gives 0 tokens"):
        build_corpus(write_jsonl(tmp_path / "s.jsonl", rows), tmp_path / "out", tok, info, SPEC)
    assert not (tmp_path / "out").exists()


def test_non_string_text_has_its_own_message(tmp_path):
    rows = source_rows()
    rows[1]["text"] = 12345
    with pytest.raises(CorpusError, match=rf":2: text of id '{rows[1]['id']}' is int '12345', not a string"):
        load_items(write_jsonl(tmp_path / "s.jsonl", rows))


def cased_copy(tmp_path: Path, model_dir: Path) -> Path:
    """Another real tokenizer: the demo one without lower-casing (counts differ)."""
    out = tmp_path / "cased"
    out.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(model_dir / name, out / name)
    cfg = json.loads((out / "tokenizer_config.json").read_text())
    cfg["do_lower_case"] = False
    (out / "tokenizer_config.json").write_text(json.dumps(cfg))
    t = json.loads((out / "tokenizer.json").read_text())
    t["normalizer"]["lowercase"] = False
    (out / "tokenizer.json").write_text(json.dumps(t))
    return out


def build(tmp_path: Path, source: Path, out: Path, tokenizer: Path | None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "lab.cli", "corpus", "build", "--source", str(source), "--out", str(out),
           "--short", "2", "--medium", "1", "--long", "1", "--tuning", "2"]
    return subprocess.run(cmd + (["--tokenizer", str(tokenizer)] if tokenizer else []), capture_output=True,
                          text=True, cwd=REPO)


def test_corpus_built_with_the_model_tokenizer_locks_another_is_refused(tmp_path, model_dir):
    src = write_jsonl(tmp_path / "s.jsonl", source_rows())
    for name, tok in (("model", model_dir), ("cased", cased_copy(tmp_path, model_dir))):
        r = build(tmp_path, src, tmp_path / name, tok)
        assert r.returncode == 0, r.stderr
        card = json.loads((tmp_path / name / "corpus_card.json").read_text())
        assert card["tokenizer"]["path"] == str(tok.resolve()) and len(card["tokenizer"]["fingerprint"]) == 64
    f = write_campaign(tmp_path, model_dir, tmp_path / "model" / "comparison.jsonl")
    f.write_text(f.read_text().replace("[model]", f'card = "{tmp_path / "model" / "corpus_card.json"}"\n\n[model]'))
    assert lock(load_protocol(f))["version"] == 1
    g = write_campaign(tmp_path, model_dir, tmp_path / "cased" / "comparison.jsonl", name="g")
    g.write_text(g.read_text().replace("[model]", f'card = "{tmp_path / "cased" / "corpus_card.json"}"\n\n[model]'))
    with pytest.raises(ProtocolError, match="counted tokens with 'cased', not the model's tokenizer"):
        lock(load_protocol(g))


def test_tokenizer_that_is_not_a_checkpoint_is_one_line(tmp_path):
    r = build(tmp_path, write_jsonl(tmp_path / "s.jsonl", source_rows()), tmp_path / "o", tmp_path)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "no loadable tokenizer" in r.stderr
