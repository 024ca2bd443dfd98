"""The user's own embedding and generation code on the real product (issue 33, part 2): the examples
(examples/custom_embedder.py, examples/custom_generator.py) run as ``[task] entry`` beside
``kind = "embedding"`` and ``kind = "generation"`` in two "rentals" each (1 and 2 threads), batch 1
and 4; every pass is validated as the built-in kind's (vectors by cosine, outputs by exact match),
their results equal the built-in job's on the same items, the archives verify (a forged metric is
refused) and compare judges the two hosts per id like the built-in kind; an entry returning the
wrong shape is a failure row naming it; vLLM beside an entry is refused at lock in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import REPO, cut_corpus, run_reported, write_campaign
from test_archive_evidence import edit_raw_table, member, read_members, write_members

WINDOW = dict(window_start="2026-12-01T09:00+01:00", deadline="2026-12-05T09:00+01:00")
EMBEDDER = f"{REPO}/examples/custom_embedder.py:DemoEmbedder"
GENERATOR = f"{REPO}/examples/custom_generator.py:DemoGenerator"
EMB_TASK = '\n[task]\nkind = "embedding"\nentry = "{entry}"\n'
GEN_TASK = ('\n[task]\nkind = "generation"\nprompt = "{{text}}\\nNewsgroup:"\nmax_text_tokens = 64\n'
            'max_new_tokens = 16\nstop = ["\\n"]\nnormalisation = "lowercase_space"\nentry = "{entry}"\n')


def campaign(folder, model, corpus, kind: str, entry: str, threads: int = 1, gpu: str = "rtx-4090",
             values=(1, 4)):
    folder.mkdir(exist_ok=True)
    (folder / corpus.name).write_bytes(corpus.read_bytes())
    f = write_campaign(folder, model, folder / corpus.name, name=kind[:3], values=values, threshold=0.0)
    metric = "nn_accuracy" if kind == "embedding" else "exact_match"
    task = (EMB_TASK if kind == "embedding" else GEN_TASK).format(entry=entry)
    f.write_text(f.read_text().replace("threads = 1", f"threads = {threads}")
                 .replace('metric = "accuracy"', f'metric = "{metric}"') + task
                 + f'\n[cost]\ngpu = "{gpu}"\ndays = 7\nlots = 1\n')
    return f


def run(f):
    from lab.service.campaigns import make_archive

    orch = run_reported(f)
    return orch, make_archive(orch.dir)


def rentals(d, model, kind, entry) -> dict:
    corpus = cut_corpus(d / "corpus.jsonl", 3, 2, 1)
    a = run(campaign(d / "a", model, corpus, kind, entry, 1, "rtx-4090"))
    b = run(campaign(d / "b", model, corpus, kind, entry, 2, "b200"))
    return {"corpus": corpus, "a": a, "b": b}


@pytest.fixture(scope="module")
def embedding_rentals(tmp_path_factory, model_dir):
    return rentals(tmp_path_factory.mktemp("entry-emb"), model_dir, "embedding", EMBEDDER)


@pytest.fixture(scope="module")
def generation_rentals(tmp_path_factory, gen_model_dir):
    return rentals(tmp_path_factory.mktemp("entry-gen"), gen_model_dir, "generation", GENERATOR)


def results(orch) -> list[tuple[object, dict, list[dict]]]:
    out = []
    for a in orch.journal.attempts():
        pdir = orch.dir / "passes" / a.pass_id
        out.append((a, json.loads((pdir / "result.json").read_text()),
                    [json.loads(x) for x in (pdir / "predictions.jsonl").read_text().splitlines()]))
    return out


def check_archive(archive, tmp_path):
    """verify passes; a metric forged in the raw table is refused, naming the pass."""
    from lab.evidence.archive import verify

    v = verify(archive)
    assert v.ok, v.problems
    files = read_members(archive)
    pid = member(files, "/predictions.jsonl").split("/")[-2]
    edit_raw_table(files, lambda rows: [r.update(metric="0.99") for r in rows if r["pass_id"] == pid])
    bad = verify(write_members(tmp_path / "forged.tar.gz", files))
    assert any(p.startswith(f"pass {pid}: metric 0.99 in the raw table") for p in bad.problems), bad.problems


def test_own_embedding_code_is_judged_as_the_builtin_kind(embedding_rentals, model_dir, tmp_path):
    from lab.compare import compare_archives
    from lab.inputs.corpus import read_corpus
    from lab.passes.tasks.embedding import load_encoder, mean_pool
    from lab.passes.tasks.embedding_metrics import load_vectors

    orch, archive = embedding_rentals["a"]
    corpus = read_corpus(orch.proto.corpus_path)
    texts = [r["text"] for r in corpus]
    tok, enc = load_encoder(str(model_dir), "fp32", "cpu")  # the built-in job's encoder and pooling rule
    import torch

    with torch.inference_mode():
        feats = tok(texts, truncation=True, max_length=128, padding=True, return_tensors="pt")
        builtin = mean_pool(enc(**feats).last_hidden_state, feats["attention_mask"], normalize=True).numpy()
    rows = results(orch)
    assert [a.status for a, _, _ in rows] == ["ok", "ok"]
    for a, res, lines in rows:
        v = a.validation
        assert v.ids_match and v.format_ok and v.coverage_ok and v.corpus_accepted, v.reasons
        assert v.metric_name == "nn_accuracy" and v.agreement_worst > 0.999, v
        assert res["entry"].endswith("custom_embedder.py:DemoEmbedder")
        assert res["pooling"]["rule"].startswith("the entry's own") and res["vectors_shape"] == [len(corpus), 384]
        assert res["observed"]["dtype"] == "float32" and res["observed"]["max_tokens"] == "declared, not observable"
        assert [x["id"] for x in lines] == [r["id"] for r in corpus]
        vec = load_vectors((orch.dir / "passes" / a.pass_id / "vectors.npy").read_bytes()).astype(np.float32)
        cos = (vec * builtin).sum(axis=1) / np.linalg.norm(vec, axis=1) / np.linalg.norm(builtin, axis=1)
        assert cos.min() > 0.999, cos  # the built-in job's vectors, up to float16 storage
        assert all(abs(x["norm"] - 1.0) < 2e-3 for x in lines)  # the example normalises; the lab records the norm
    check_archive(archive, tmp_path)
    c = compare_archives([archive, embedding_rentals["b"][1]], 50000, allow_short=True, **WINDOW)
    assert len(c.agreements) == 2
    for x in c.agreements:
        assert x.ids == len(corpus) and x.flips == 0 and x.within_tolerance and x.cosine_worst > 0.999, x
    assert "the same ML result on B b200" in c.stands_on
    from lab.compare.tables import decision_markdown

    assert "run by your own code" in c.ran and f"**What ran.** {c.ran[0].upper()}" in decision_markdown(c)


def test_own_generation_code_is_judged_as_the_builtin_kind(generation_rentals, gen_model_dir, tmp_path):
    from lab.compare import compare_archives
    from lab.inputs.corpus import read_corpus
    from lab.passes.tasks.generation import load_generator, rule_of
    from lab.passes.tasks.generation_core import generate_batch

    orch, archive = generation_rentals["a"]
    corpus = read_corpus(orch.proto.corpus_path)
    rows = results(orch)
    rule = rule_of(rows[0][1]["generation"]["rule"])
    tok, model = load_generator(str(gen_model_dir), "fp32", "cpu")
    builtin = [g.text for g in generate_batch(tok, model, "cpu", [r["text"] for r in corpus], rule)]
    assert [a.status for a, _, _ in rows] == ["ok", "ok"]
    for a, res, lines in rows:
        v = a.validation
        assert v.ids_match and v.format_ok and v.coverage_ok and v.corpus_accepted, v.reasons
        assert v.metric_name == "exact_match" and v.agreement_with_reference == 1.0, v
        assert res["entry"].endswith("custom_generator.py:DemoGenerator")
        assert res["generation"]["padding"].startswith("the entry's own") and res["output_tokens"] > 0
        assert [x["output"] for x in lines] == builtin  # the built-in job's greedy outputs, id for id
        assert {x["stopped_by"] for x in lines} <= {"stop", "entry"}
        assert all(x["input_tokens"] > 0 for x in lines)
        assert res["observed"]["engine"] == "entry"  # the user's code ran, whatever engine the variant names
    # the lab made the prompts (its counts stand); the entry padded them (not observable)
    import csv

    for row in csv.DictReader(open(orch.dir / "report" / "raw_table.csv", encoding="utf-8")):
        assert row["real_tokens"] and row["n_truncated"] and not row["padded_tokens"], row
        assert "empty padded_tokens: the entry pads the prompts the lab made" in row["notes"]
    check_archive(archive, tmp_path)
    c = compare_archives([archive, generation_rentals["b"][1]], 50000, allow_short=True, **WINDOW)
    assert len(c.agreements) == 2
    assert all(x.ids == len(corpus) and x.within_tolerance for x in c.agreements), c.agreements
    assert "the same ML result on B b200" in c.stands_on


def one_embedding_pass(tmp_path, model_dir, corpus, name: str, code: str, kind: str = "embedding"):
    """The one attempt of a batch-1 campaign of ``kind`` over ``corpus`` whose entry is the class
    ``name`` of the file written with ``code``, and its result.json as a dict."""
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock

    path = tmp_path / f"{name.lower()}.py"
    path.write_text(code)
    f = campaign(tmp_path / "c", model_dir, corpus, kind, f"{path}:{name}", values=(1,))
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher())
    orch.run()
    (a,) = orch.journal.attempts()
    return a, json.loads((orch.dir / "passes" / a.pass_id / "result.json").read_text())


def test_an_embed_of_the_wrong_shape_is_a_failure_row_naming_it(tmp_path, model_dir):
    a, res = one_embedding_pass(tmp_path, model_dir, cut_corpus(tmp_path / "corpus.jsonl", 3, 2, 1), "Flat",
                                "class Flat:\n"
                                "    def __init__(self, settings, device):\n        pass\n"
                                "    def embed(self, texts):\n        return [0.5] * len(texts)\n")
    assert a.status == "error", a.status
    assert "embed returned an array of shape (1,), not (texts, width) on warm-up batch 1" in res["error"], res


def test_task_settings_the_entry_ignores_are_not_honoured_rows(tmp_path, model_dir, gen_model_dir):
    """A new user's trial: an entry that ignored normalize (norms about 6.9 with normalize = true)
    or max_new_tokens (109 tokens for 16 declared) was recorded as it came, and its pass accepted.
    A task setting handed to the code and not applied is now what a variant's is: a failure row
    "not honoured" naming the setting, what came back and the fix; the outputs are kept."""
    corpus = cut_corpus(tmp_path / "corpus.jsonl", 2, 1, 0)
    (tmp_path / "emb").mkdir()
    (tmp_path / "gen").mkdir()
    a, res = one_embedding_pass(tmp_path / "emb", model_dir, corpus, "Raw",
                                "import numpy as np\n"
                                "class Raw:\n"
                                "    def __init__(self, settings, device):\n        pass\n"
                                "    def embed(self, texts):\n        return np.full((len(texts), 8), 2.5)\n")
    assert a.status == "error" and res["failure_kind"] == "not_honoured", (a.status, res.get("failure_kind"))
    assert "normalize = true, but 3 of 3 vectors the entry returned have an L2 norm outside 1 +/- 0.01 " \
           "(7.071 to 7.071); normalize them in embed(), or declare normalize = false" in res["error"], res["error"]
    a, res = one_embedding_pass(tmp_path / "gen", gen_model_dir, corpus, "Long",
                                "class Long:\n"
                                "    def __init__(self, settings, device):\n        pass\n"
                                "    def generate(self, prompts):\n        return [' sci' * 60 for _ in prompts]\n",
                                kind="generation")
    assert a.status == "error" and res["failure_kind"] == "not_honoured", (a.status, res.get("failure_kind"))
    assert "max_new_tokens = 16, but 3 of 3 outputs the entry returned are longer (up to 60 tokens" in res["error"]
    assert "stop generate() at settings['max_new_tokens']" in res["error"]
    (pred,) = (tmp_path / "gen" / "runs").glob(f"*/*/passes/{a.pass_id}/predictions.jsonl")
    lines = [json.loads(x) for x in pred.read_text().splitlines()]
    assert len(lines) == 3 and all(x["output_tokens"] > 18 for x in lines), lines


def test_vllm_beside_an_entry_is_refused_at_lock_in_one_line(tmp_path, model_dir):
    from lab.orchestration.protocol import ProtocolError, load_protocol

    corpus = cut_corpus(tmp_path / "corpus.jsonl", 1, 1, 0)
    f = campaign(tmp_path / "c", model_dir, corpus, "embedding", EMBEDDER, values=(1,))
    f.write_text(f.read_text().replace('factor = "batch_size"', 'factor = "batch_size"\nengine = "vllm"'))
    with pytest.raises(ProtocolError) as e:
        load_protocol(f)
    assert "\n" not in str(e.value) and 'but [task] entry runs every pass with your own code' in str(e.value)


def test_a_run_whose_code_changed_since_lock_is_still_read_from_its_folder(tmp_path, model_dir, runs_root):
    """A new user's trial: after editing the entry, `report` and `archive` of the campaign file were
    refused with 'restore it, or lock version 2' (which would leave the run behind); the refusal
    now names the run's campaign folder, which reads as before."""
    import shutil

    from lab.orchestration.orchestrator import campaign_dir_for
    from lab.orchestration.protocol import ProtocolError, load_protocol, lock
    from lab.service.campaigns import resolve_campaign_dir

    corpus = cut_corpus(tmp_path / "corpus.jsonl", 1, 1, 0)
    code = tmp_path / "c" / "mine.py"
    code.parent.mkdir()
    shutil.copyfile(EMBEDDER.rpartition(":")[0], code)
    f = campaign(tmp_path / "c", model_dir, corpus, "embedding", f"{code}:DemoEmbedder", values=(1,))
    proto = load_protocol(f)
    run_dir = campaign_dir_for(proto, lock(proto), runs_root)
    run_dir.mkdir(parents=True)
    (run_dir / "journal.sqlite").write_bytes(b"")  # a run made (only its journal's presence is read here)
    assert resolve_campaign_dir(f, "report") == run_dir.resolve()
    code.write_text(code.read_text() + "\n# edited after the run\n")
    with pytest.raises(ProtocolError) as e:
        resolve_campaign_dir(f, "report")
    msg = str(e.value)
    assert "task code" in msg and "changed since lock (version 1)" in msg and "\n" not in msg, msg
    assert msg.endswith(f"give its campaign folder: `{msg.split('`')[-2]}`") and msg.split("`")[-2].endswith(
        f"report {run_dir}"), msg
    assert resolve_campaign_dir(run_dir, "report") == run_dir.resolve()


def test_the_users_code_out_of_memory_is_an_oom_row_naming_the_batch_and_line(tmp_path, model_dir):
    """A new user's trial: torch's OutOfMemoryError raised in the entry's method became 'oom, 0 items
    (OutOfMemoryError: ...)', without the batch and the code's line every other failure of it names."""
    a, res = one_embedding_pass(
        tmp_path, model_dir, cut_corpus(tmp_path / "corpus.jsonl", 1, 1, 0), "Big",
        "import torch\n\n\nclass Big:\n"
        "    def __init__(self, settings, device):\n        pass\n\n"
        "    def embed(self, texts):\n        raise torch.OutOfMemoryError('CUDA out of memory (simulated)')\n")
    assert a.status == "oom", a.status
    assert ("embed ran out of memory on warm-up batch 1 (after 0 warm-up items): big.py, line 9, in embed: "
            "torch.OutOfMemoryError: CUDA out of memory (simulated)") in res["error"], res["error"]


def test_replay_finds_own_code_by_its_sha256_and_refuses_other_code(tmp_path, model_dir):
    """A new user's trial: `campaign replay` had --corpus and --model but nothing for the user's
    code, and never checked it (the archive holds only its sha256). The code is found at its
    recorded place or in --code DIR, by the archive's sha256; other code, or none, is refused in
    one line naming the role and both sha256 values, and nothing is left beside --out."""
    import hashlib
    import shutil

    from lab.evidence.replay import ReplayError, replay_archive
    from lab.orchestration.protocol import load_protocol

    code = tmp_path / "c" / "code"
    code.mkdir(parents=True)
    shutil.copy(REPO / "examples" / "custom_embedder.py", code / "custom_embedder.py")
    corpus = cut_corpus(tmp_path / "corpus.jsonl", 2, 1, 0)
    f = campaign(tmp_path / "c", model_dir, corpus, "embedding", "code/custom_embedder.py:DemoEmbedder",
                 values=(1,))
    _, archive = run(f)
    want = hashlib.sha256((code / "custom_embedder.py").read_bytes()).hexdigest()

    here = replay_archive(archive, tmp_path / "next" / "here.toml")  # still at its recorded place
    assert here.code == (("entry", (code / "custom_embedder.py").resolve()),)
    assert here.lock_entry["task_files_sha256"] == {"entry": want}

    moved = tmp_path / "moved"
    shutil.move(code, moved)
    with pytest.raises(ReplayError) as e:
        replay_archive(archive, tmp_path / "next" / "gone.toml")
    msg = str(e.value)
    assert "[task] entry code/custom_embedder.py: not found" in msg and "--code DIR" in msg and want in msg
    assert "\n" not in msg and not (tmp_path / "next" / "gone.toml").exists()

    there = replay_archive(archive, tmp_path / "next" / "there.toml", code=str(moved))
    assert there.code == (("entry", (moved / "custom_embedder.py").resolve()),)
    proto = load_protocol(there.campaign_file)
    assert proto.task_files() == {"entry": (moved / "custom_embedder.py").resolve()}
    assert there.lock_entry["task_files_sha256"] == {"entry": want}

    changed = tmp_path / "changed"
    changed.mkdir()
    (changed / "custom_embedder.py").write_text((moved / "custom_embedder.py").read_text() + "\n# edited\n")
    got = hashlib.sha256((changed / "custom_embedder.py").read_bytes()).hexdigest()
    with pytest.raises(ReplayError) as e:
        replay_archive(archive, tmp_path / "next" / "changed.toml", code=str(changed))
    msg = str(e.value)
    assert f"has sha256 {got}, the archive's code has sha256 {want}" in msg and "replay refuses other code" in msg
    assert not (tmp_path / "next" / "changed.toml").exists()
