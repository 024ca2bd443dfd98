"""Issue 35 item 7: the demo-model build inside `make up` printed nothing for minutes (a new
user stopped it). It says what it builds before it starts, and again when done."""

from __future__ import annotations

from types import SimpleNamespace


def test_the_demo_model_build_says_what_it_builds_first(monkeypatch, capsys, tmp_path):
    import lab.demo.model
    from lab.cli import cmd_model_build_demo

    printed_before = []

    def build(tuning, out):
        printed_before.append(capsys.readouterr().out)  # what the user saw while it ran
        return {"labels": ["a", "b"], "tuning_accuracy": 0.9}

    monkeypatch.setattr(lab.demo.model, "build_demo_model", build)
    a = SimpleNamespace(tuning="demo/corpus/tuning.jsonl", out=str(tmp_path / "m"))
    assert cmd_model_build_demo(a) == 0
    assert printed_before[0].startswith(f"demo model: building {tmp_path / 'm'} (MiniLM-L6 encoder")
    assert capsys.readouterr().out.startswith(f"demo model -> {tmp_path / 'm'} (2 labels")
