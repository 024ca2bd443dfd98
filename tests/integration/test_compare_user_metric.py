"""`iteralab compare` of archives judged by the user's own metric ([quality] metric =
"file.py:function"), on real archives: two rentals of one campaign compare with `--metric-file`
(the file's sha256 checked against each archive's lock, the function run in a fresh process, as
`archive verify` does); another file is refused in one line before anything runs; an archive
whose lock holds another metric file is refused in one line naming it (the set is not one protocol,
whichever file is given); without the option the one line says how to opt in. The CLI and the
UI's service take the same option."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import REPO, WINDOW, another_metric_file


def cli_compare(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lab.cli", "compare", *map(str, args)], capture_output=True,
                          text=True, cwd=REPO, check=False, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_archives_judged_by_the_users_metric_compare_with_the_metric_file(metric_rentals, tmp_path):
    from lab.compare import compare_archives

    pair = [metric_rentals["rtx"], metric_rentals["b200"]]
    c = compare_archives(pair, 1000, metric_file=metric_rentals["file"], **WINDOW)
    assert sorted(a.name for a in c.archives) == sorted(p.name.removesuffix(".tar.gz") for p in pair)
    assert len(c.projections) == 2 and c.chosen is not None, c.path  # both measured, one chosen
    r = cli_compare(*pair, "--load", 1000, "--window-start", WINDOW["window_start"], "--deadline",
                    WINDOW["deadline"], "--allow-short", "--metric-file", metric_rentals["file"],
                    "--out", tmp_path / "o")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "o" / "decision.md").is_file()


def test_without_the_metric_file_one_line_says_how_to_opt_in(metric_rentals, tmp_path):
    from lab.compare import CompareError, compare_archives

    pair = [metric_rentals["rtx"], metric_rentals["b200"]]
    with pytest.raises(CompareError, match=r"its \[quality\] metric mymetric\.py:share_right is your own function.*"
                                           r"--metric-file FILE") as err:
        compare_archives(pair, 1000, **WINDOW)
    assert "\n" not in str(err.value) and str(err.value).startswith(metric_rentals["rtx"].name)
    # both archives need it: one subject for "its", the other named after it (not "A, B: its ...")
    assert str(err.value).endswith(f"; the same for {metric_rentals['b200'].name}"), str(err.value)
    r = cli_compare(*pair, "--load", 1000, "--out", tmp_path / "o")
    assert r.returncode == 2 and "--metric-file FILE" in r.stdout + r.stderr, r.stdout + r.stderr
    assert not (tmp_path / "o").exists()


def test_another_metric_file_is_refused_before_it_runs(metric_rentals, tmp_path):
    from lab.compare import CompareError, compare_archives

    other = another_metric_file(tmp_path)
    pair = [metric_rentals["rtx"], metric_rentals["b200"]]
    with pytest.raises(CompareError, match=r"^[^\n]+\.tar\.gz: --metric-file .*: sha256 [0-9a-f]{64} is not the"):
        compare_archives(pair, 1000, metric_file=other, **WINDOW)
    assert not (tmp_path / "ran").exists()


def test_an_archive_locked_with_another_metric_file_is_named(metric_rentals, tmp_path):
    from lab.compare import CompareError, compare_archives
    from lab.service.views import run_comparison

    # Two archives locked with different metric files are not one protocol: the whole set is refused,
    # naming the archive that differs, whichever file is given (each archive's own file would be refused
    # by the other archive: no advice to give one file per archive)
    changed = metric_rentals["changed"]
    own_file = metric_rentals["file"].parent.parent / "changed" / "mymetric.py"
    # only the metric's file differs (same [task] entry): named under [quality], never as the task's code
    differs = (r"^not comparable: \[quality\] metric file sha256 differs: [^;]* "
               rf"{changed.name.removesuffix('.tar.gz')} " r'has "[0-9a-f]{64}"; compare only')
    for option in (metric_rentals["file"], own_file, None):
        with pytest.raises(CompareError, match=differs):
            compare_archives([metric_rentals["rtx"], changed], 1000, metric_file=option, **WINDOW)
    fields = {"load": "1000", "deadline": WINDOW["deadline"], "window_start": WINDOW["window_start"],
              "allow_short": True}
    with pytest.raises(CompareError, match=differs):  # the UI's service: the same
        run_comparison([str(metric_rentals["rtx"]), str(changed)],
                       {**fields, "metric_file": str(metric_rentals["file"])}, tmp_path / "runs")
    out = run_comparison([str(metric_rentals["rtx"]), str(metric_rentals["b200"])],
                         {**fields, "metric_file": str(metric_rentals["file"])}, tmp_path / "runs")
    assert out.decision and out.files
