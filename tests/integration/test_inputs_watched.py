"""Inputs cannot change under a running campaign (issue 23, part 2): the corpus rewritten during
pass 2 (ids and labels kept), the model's weights overwritten during pass 1, and a corpus edit
that restores its size and modification time are each found, and so is the user's own code (a
custom entry or a metric file edited during a pass): the campaign stops with one line naming the
file, and a pass that read changed inputs is never accepted. Real campaigns, the
real demo model (copied, so the shared one is never touched), real local passes; the test only
chooses the moment of the edit (the pass's first output line)."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest
from conftest import REPO, cut_corpus, write_campaign

from lab.facts.errors import ProtocolError
from lab.launchers.local import LocalLauncher
from lab.orchestration.orchestrator import Orchestrator
from lab.orchestration.protocol import load_protocol, lock
from lab.passes.events import PassStatus


class EditDuringPass(LocalLauncher):
    """A local launcher that runs ``edit()`` once, when pass number ``at`` (1-based) prints its
    first line: the pass process is running and may already have read its inputs."""

    def __init__(self, at: int, edit):
        super().__init__()
        self.at, self.edit, self.passes = at, edit, 0

    def launch(self, spec, pass_dir, on_line, should_stop):
        self.passes += 1
        fired = [self.passes != self.at]

        def line(text: str) -> None:
            if not fired[0]:
                fired[0] = True
                self.edit()
            on_line(text)
        return super().launch(spec, pass_dir, line, should_stop)


def campaign(tmp_path, model_dir, values):
    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    corpus = cut_corpus(tmp_path / "corpus.jsonl", 2, 1, 1)
    f = write_campaign(tmp_path, model, corpus, name="watched", values=values)
    lock(load_protocol(f))
    return f, model, corpus


def rewrite_texts(corpus) -> None:
    """Same ids and labels, other texts (what a bad sync or a second job would do)."""
    rows = [json.loads(x) for x in corpus.read_text(encoding="utf-8").splitlines()]
    corpus.write_text("".join(json.dumps({**r, "text": r["text"][::-1]}) + "\n" for r in rows), encoding="utf-8")


def accepted(orch) -> dict[str, bool]:
    return {a.pass_id: a.validation is not None and a.validation.corpus_accepted for a in orch.journal.attempts()}


def test_corpus_rewritten_during_pass_2_stops_the_campaign_naming_the_file(tmp_path, model_dir):
    f, _, corpus = campaign(tmp_path, model_dir, values=(1, 4, 8))
    original = corpus.read_bytes()
    orch = Orchestrator.prepare(f, tmp_path / "runs", EditDuringPass(2, lambda: rewrite_texts(corpus)))
    with pytest.raises(ProtocolError) as err:
        orch.run()
    line = str(err.value)
    assert type(err.value).__name__ == "InputsChanged"  # a ProtocolError: the CLI prints it as one line
    assert "\n" not in line and line.startswith(f"corpus {corpus} changed while the campaign ran")
    first, second = orch.journal.attempts()  # the third pass never started
    assert first.status == PassStatus.OK and second.status == PassStatus.INTERRUPTED
    assert "corpus" in second.notes and "during this pass" in second.notes
    assert accepted(orch) == {first.pass_id: True, second.pass_id: False}
    assert orch.journal.get_control("state") == "stopped" and orch.journal.get_control("inputs_changed") == line
    # restored, the campaign resumes: the slot runs again, the interrupted row stays unaccepted
    corpus.write_bytes(original)
    again = Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher())
    assert again.run() == "finished"
    rows = again.journal.attempts()
    assert len(rows) == 4 and accepted(again)[second.pass_id] is False
    assert sum(accepted(again).values()) == 3


def test_weights_overwritten_during_pass_1_stop_the_campaign(tmp_path, model_dir):
    from safetensors.torch import load_file, save_file

    f, model, _ = campaign(tmp_path, model_dir, values=(1, 4))
    weights = model / "model.safetensors"

    def overwrite():  # other weights of the same shapes: a pass loading them would classify otherwise
        tensors = load_file(str(weights))
        save_file({k: v * 0.5 for k, v in tensors.items()}, str(weights))

    orch = Orchestrator.prepare(f, tmp_path / "runs", EditDuringPass(1, overwrite))
    named = "^model file " + re.escape(str(weights)) + " changed while the campaign ran"
    with pytest.raises(ProtocolError, match=named):
        orch.run()
    [only] = orch.journal.attempts()
    assert only.status == PassStatus.INTERRUPTED and accepted(orch) == {only.pass_id: False}


def test_an_edit_that_restores_size_and_mtime_is_found_by_the_full_hash_after_the_last_pass(tmp_path, model_dir):
    f, _, corpus = campaign(tmp_path, model_dir, values=(1,))

    def same_size_same_mtime():
        st = os.stat(corpus)
        data = bytearray(corpus.read_bytes())
        i = data.index(b'"text": "') + 9
        data[i:i + 1] = b"X" if data[i:i + 1] != b"X" else b"Y"
        with open(corpus, "r+b") as fh:  # in place: same inode, same size
            fh.write(data)
        os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns))

    orch = Orchestrator.prepare(f, tmp_path / "runs", EditDuringPass(1, same_size_same_mtime))
    with pytest.raises(ProtocolError, match="found by the full hash after the last pass"):
        orch.run()
    [only] = orch.journal.attempts()
    assert only.status == PassStatus.INTERRUPTED and "found after the last pass" in only.notes
    assert accepted(orch) == {only.pass_id: False}
    assert orch.journal.get_control("state") == "stopped"


@pytest.mark.parametrize("role", ["entry", "metric"])
def test_the_users_code_edited_during_pass_1_stops_the_campaign(tmp_path, model_dir, role):
    """A custom entry (or the [quality] metric function's file) edited while a pass runs: one
    locked version would otherwise hold passes of two codes (a new user's trial: an entry that
    always answered 'alt.atheism' from pass 2 on, and the archive verified)."""
    entry = tmp_path / "my_entry.py"
    shutil.copy(REPO / "examples" / "custom_classifier.py", entry)
    metric = tmp_path / "my_metric.py"
    metric.write_text("def accuracy(predictions, references):\n"
                      "    return sum(p == r for p, r in zip(predictions, references)) / len(references)\n")
    corpus = cut_corpus(tmp_path / "corpus.jsonl", 2, 1, 1)
    f = write_campaign(tmp_path, model_dir, corpus, name="watched", values=(1, 4))
    f.write_text(f.read_text().replace('metric = "accuracy"', 'metric = "my_metric.py:accuracy"\ndirection = "higher"')
                 + '\n[task]\nkind = "custom"\nentry = "my_entry.py:DemoClassifier"\n')
    lock(load_protocol(f))
    edited = entry if role == "entry" else metric
    orch = Orchestrator.prepare(f, tmp_path / "runs",
                                EditDuringPass(1, lambda: edited.write_text(edited.read_text() + "\n# edited\n")))
    with pytest.raises(ProtocolError) as err:
        orch.run()
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"task file ({role}) {edited} changed while the campaign ran"), line
    [only] = orch.journal.attempts()  # the second pass never started
    assert only.status == PassStatus.INTERRUPTED and accepted(orch) == {only.pass_id: False}
    # a later run of the same version refuses before any pass: the lock names the code that changed
    with pytest.raises(ProtocolError, match=f"task code \\({re.escape(str(edited))}\\) changed since lock"):
        Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher()).run()
