"""A load series' refusals before any generator starts (lab.engines.vllm_load.run_loads): no
vLLM is needed, each is one line saying what to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.engines.vllm_load import LoadRun, LoadSettings, Prompt, run_loads
from lab.engines.vllm_server import Started
from lab.facts.errors import UserError

STARTED = Started(url="http://127.0.0.1:1", port=1, pid=1, setup_s=1.0)


def run(out: Path, *ids: str) -> LoadRun:
    return LoadRun(prompts=tuple(Prompt(id=i, prompt="p", max_tokens=4) for i in ids),
                   settings=LoadSettings(rate=1.0, seed=0), out_dir=out)


@pytest.mark.parametrize(("runs", "says"), [
    (lambda t: [], "at least one run"),
    (lambda t: [run(t / "a", "x"), run(t / "a", "y")], "share an output folder"),
    (lambda t: [run(t / "a", "x"), run(t / "b")], "at least one prompt"),
    (lambda t: [run(t / "a", "x", "x")], "repeat an id"),
])
def test_a_series_that_cannot_run_is_refused_in_one_line_before_the_generator(tmp_path, runs, says):
    python = tmp_path / "no-python"  # never started: every refusal comes first
    with pytest.raises(UserError) as e:
        run_loads(STARTED, "tok", runs(tmp_path), tmp_path / "load.log", python=python)
    assert says in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "load.log").exists()
