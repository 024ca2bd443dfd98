"""scripts/bench_validation.py run for real on the demo corpus (moved out of the unit tier: each
run validates hundreds of items in a subprocess): a size other than the goal's is not judged, and
a validation that rejects stops the benchmark loudly, with no timing reported.
Its bad-input checks stay in tests/unit/test_bench_inputs.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VALIDATION = REPO / "scripts" / "bench_validation.py"


def run(script: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *args], check=False, capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "400"}, timeout=timeout)


def test_bench_validation_does_not_judge_the_goal_for_another_size():
    r = run(VALIDATION, "--items", "200", "--rounds", "1", timeout=120)
    assert r.returncode == 0, r.stderr
    assert "goal not judged: 200 items, the goal is for 1,000,000" in r.stdout
    rows = [ln for ln in r.stdout.split("median of", 1)[1].splitlines() if ln.startswith("this ")]
    assert len(rows) == 2 and all(ln.endswith(" not judged") for ln in rows), rows


def test_bench_validation_fails_loudly_when_a_validation_rejects(tmp_path):
    """A checkout whose validate_pass rejects every pass, timed as --baseline: no timing is reported."""
    shutil.copytree(REPO / "lab", tmp_path / "lab", ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "lab" / "orchestration" / "validate.py", "a", encoding="utf-8") as fh:
        fh.write("\n\n_real_validate_pass = validate_pass\n\n\ndef validate_pass(*a, **k):\n"
                 "    import msgspec\n    v = _real_validate_pass(*a, **k)\n"
                 "    return msgspec.structs.replace(v, corpus_accepted=False,\n"
                 "                               reasons=['forced rejection for the test'])\n")
    r = run(VALIDATION, "--items", "100", "--rounds", "1", "--baseline", str(tmp_path), timeout=120)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and "REJECTED" in r.stderr and "forced rejection for the test" in r.stderr
    assert "median of" not in r.stdout and "Traceback" not in r.stderr
