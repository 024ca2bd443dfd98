"""Corpus builder on the real 20 Newsgroups text and the real tokenizer; bad input is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO, demo_rows

from lab.inputs.corpus import BucketLimits, BuildSpec, CorpusError, build_corpus, load_items, sha256_file

SOURCE = REPO.parent / "shared" / "data" / "20newsgroups" / "20news-bydate-test.jsonl"


@pytest.fixture(scope="module")
def tokenizer():
    from lab.inputs.models import encoder_tokenizer

    return encoder_tokenizer()


def _source(tmp_path, rows, name="src.jsonl"):
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return p


def test_stratified_build_and_card(tmp_path, tokenizer):
    rows = [{"id": r["id"], "text": r["text"], "label": r["label"]} for r in demo_rows()]
    src = _source(tmp_path, rows)
    spec = BuildSpec(sizes={"short": 60, "medium": 30, "long": 10}, tuning_size=40, seed=7)
    card = build_corpus(src, tmp_path / "out", *tokenizer, spec=spec)
    comp = [json.loads(x) for x in (tmp_path / "out" / "comparison.jsonl").read_text().splitlines()]
    assert {b: sum(v.values()) for b, v in card["comparison"]["counts"].items()} == \
        {"short": 60, "medium": 30, "long": 10}
    assert card["disjoint"] and card["tuning"]["items"] == 40
    assert len(card["comparison"]["counts"]["short"]) == 20  # every class represented
    lim = BucketLimits()
    assert all(lim.bucket(r["n_tokens"]) == r["bucket"] for r in comp)
    assert card["comparison"]["sha256"] == sha256_file(tmp_path / "out" / "comparison.jsonl")
    assert set(card["item_sha256"]) == {r["id"] for r in comp}
    assert card["tokenizer"]["revision_sha256"]
    again = build_corpus(src, tmp_path / "again", *tokenizer, spec=spec)
    assert again["comparison"]["sha256"] == card["comparison"]["sha256"]  # seeded, deterministic


def test_committed_demo_corpus_matches_its_card():
    card = json.loads((REPO / "demo" / "corpus" / "corpus_card.json").read_text())
    assert card["source"]["sha256"] == "81534d58ec20e6b140bd61478bef80ea72450608b8ff4a5e79ca973ff62f2b5c"
    assert card["comparison"]["sha256"] == sha256_file(REPO / "demo" / "corpus" / "comparison.jsonl")
    assert {b: sum(v.values()) for b, v in card["comparison"]["counts"].items()} == \
        {"short": 600, "medium": 300, "long": 100}
    if SOURCE.is_file():
        assert sha256_file(SOURCE) == card["source"]["sha256"]


@pytest.mark.parametrize("rows, message", [
    ([{"id": "a", "text": "x y", "label": "l"}, {"id": "a", "text": "z", "label": "l"}],
     "src.jsonl:2: duplicate id 'a' (first on line 1)"),
    ([{"id": "a", "text": "  ", "label": "l"}], "src.jsonl:1: empty text for id 'a'"),
    ([{"id": "a", "label": "l"}], "src.jsonl:1: missing field 'text'"),
])
def test_bad_source_one_line_with_line_number(tmp_path, rows, message):
    with pytest.raises(CorpusError) as e:
        load_items(_source(tmp_path, rows))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_non_utf8_and_bad_json_name_the_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_bytes(b'{"id": "a", "text": "ok", "label": "l"}\n{"id": "b", "text": "caf\xe9", "label": "l"}\n')
    with pytest.raises(CorpusError, match=r"bad.jsonl:2: not valid UTF-8"):
        load_items(p)
    p.write_bytes(b'{"id": "a", "text": "ok", "label": "l"}\n{"id": \n')
    with pytest.raises(CorpusError, match=r"bad.jsonl:2: not valid JSON"):
        load_items(p)


def test_csv_with_other_field_names(tmp_path):
    p = tmp_path / "src.csv"
    p.write_text('doc,body,cat\n1,"first, text",a\n2,second,b\n', encoding="utf-8")
    items = load_items(p, id_field="doc", text_field="body", label_field="cat")
    assert [(i.id, i.text, i.label) for i in items] == [("1", "first, text", "a"), ("2", "second", "b")]
    p.write_text('doc,body,cat\n1,first,a\n1,again,b\n', encoding="utf-8")
    with pytest.raises(CorpusError, match=r"src\.csv:3: duplicate id '1'"):
        load_items(p, id_field="doc", text_field="body", label_field="cat")


def test_csv_header_without_the_id_column_names_line_1(tmp_path):
    p = tmp_path / "src.csv"
    p.write_text('doc,body,cat\n1,"multi\nline",a\n', encoding="utf-8")
    with pytest.raises(CorpusError, match=r"src.csv:1: header has no column 'id' \(columns: doc, body, cat\)"):
        load_items(p)


# ---- one's own corpus (issue 22 part 3): defaults that fit it, messages that name the flag ----

def _own_source(tmp_path, n: int) -> Path:
    """The first ``n`` items of the demo corpus as a user's own JSONL (id, text, label)."""
    rows = [{"id": r["id"], "text": r["text"], "label": r["label"]} for r in demo_rows()[:n]]
    return _source(tmp_path, rows, "mine.jsonl")


def test_own_corpus_defaults_take_a_small_source_whole_with_no_tuning_split(tmp_path, capsys):
    from lab.cli import main

    src = _own_source(tmp_path, 310)
    assert main(["corpus", "build", "--source", str(src), "--out", str(tmp_path / "c")]) == 0
    card = json.loads((tmp_path / "c" / "corpus_card.json").read_text())
    assert card["comparison"]["items"] == 310 and card["tuning"]["items"] == 0  # every item; no tuning split
    assert sum(card["sizes"].values()) == 310  # the card records the sizes drawn
    assert (tmp_path / "c" / "tuning.jsonl").read_text() == ""
    out = capsys.readouterr().out
    assert out.startswith("corpus: 310 items (") and "tuning split 0" in out


def test_a_build_that_would_change_the_corpus_already_in_out_is_refused_unless_forced(tmp_path, capsys):
    """The trial's `corpus build --out c30copy --items 25` over a 30-item corpus replaced it silently,
    breaking any campaign locked on it: refused in one line saying what is there and the two ways on,
    the files untouched; the same build again passes; --force replaces it."""
    from lab.cli import main

    out = tmp_path / "c"
    build = ["corpus", "build", "--source", str(_own_source(tmp_path, 310)), "--out", str(out), "--items"]
    assert main([*build, "30"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert main([*build, "30"]) == 0 and {p.name: p.read_bytes() for p in out.iterdir()} == before
    capsys.readouterr()
    assert main([*build, "25"]) == 2
    sha = json.loads(before["corpus_card.json"])["comparison"]["sha256"]
    assert capsys.readouterr().err.splitlines() == [
        f"iteralab: error: --out {out} already holds a corpus of 30 items (comparison.jsonl sha256 {sha[:12]}), "
        "and this build would change comparison.jsonl, corpus_card.json (a campaign locked on it would no longer "
        "verify); give another --out, or add --force to replace it"]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing left behind either
    assert main([*build, "25", "--force"]) == 0
    assert json.loads((out / "corpus_card.json").read_text())["comparison"]["items"] == 25


def test_own_corpus_items_are_drawn_in_the_source_bucket_shares(tmp_path, capsys):
    from lab.cli import main

    src = _own_source(tmp_path, 1000)  # the demo corpus: 600 / 300 / 100 by bucket
    assert main(["corpus", "build", "--source", str(src), "--out", str(tmp_path / "c"), "--items", "100",
                 "--tuning", "50"]) == 0
    card = json.loads((tmp_path / "c" / "corpus_card.json").read_text())
    assert card["sizes"] == {"short": 60, "medium": 30, "long": 10} and card["tuning"]["items"] == 50
    assert card["disjoint"]


@pytest.mark.parametrize("args, message", [
    (["--tuning", "1600"], "--tuning 1600: only 0 item(s) are left for a tuning split after the 310-item "
                           "comparison corpus; give --tuning 0, or a smaller comparison corpus"),
    (["--items", "200", "--tuning", "1600"], "--tuning 1600: only 110 item(s) are left for a tuning split after "
                                             "the 200-item comparison corpus; give --tuning 110 or fewer"),
    (["--items", "400"], "--items 400: the source has only 310 items; give --items 310 or fewer"),
    (["--short", "500"], "--short 500: the source has only "),
    (["--items", "100", "--short", "5"], "give --items N (drawn in the source's length-bucket shares) or "
                                         "--short/--medium/--long"),
])
def test_own_corpus_refusals_name_the_flag(tmp_path, capsys, args, message):
    from lab.cli import main

    src = _own_source(tmp_path, 310)
    assert main(["corpus", "build", "--source", str(src), "--out", str(tmp_path / "c"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "c" / "comparison.jsonl").exists()


@pytest.mark.skipif(not SOURCE.is_file(), reason=f"{SOURCE} not present (the maintainers' source)")
def test_make_corpus_recipe_rebuilds_the_committed_demo_corpus(tmp_path, capsys):
    """`make corpus` gives its flags explicitly: with the user-corpus defaults, the recipe still
    draws exactly the committed demo corpus and tuning split."""
    import shlex

    from lab.cli import main

    recipe = (REPO / "Makefile").read_text().split("\ncorpus:", 1)[1].split("\n\n", 1)[0]
    argv = shlex.split(recipe.split("$(LAB)", 1)[1].replace("\\\n", " "))
    argv = [str(REPO / a) if a.startswith("../") else a for a in argv]
    out = argv.index("--out")
    argv[out + 1] = str(tmp_path / "demo")
    assert main(argv) == 0
    built = json.loads((tmp_path / "demo" / "corpus_card.json").read_text())
    committed = json.loads((REPO / "demo" / "corpus" / "corpus_card.json").read_text())
    assert built["comparison"]["sha256"] == committed["comparison"]["sha256"]
    assert built["tuning"]["sha256"] == committed["tuning"]["sha256"] and built["tuning"]["items"] == 1600
    assert built["sizes"] == committed["sizes"] == {"short": 600, "medium": 300, "long": 100}
