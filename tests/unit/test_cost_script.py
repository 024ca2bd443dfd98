"""calcul_forfaits.py copied alone with its catalog into an empty folder (seed usage)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
PY310 = Path.home() / ".pyenv/versions/3.10.13/bin/python3"


@pytest.fixture()
def folder(tmp_path):
    """An empty folder holding only copies (symlinks dereferenced) of the two files."""
    for name in ("calcul_forfaits.py", "tarifs-forfaits.csv"):
        shutil.copy(SCRIPTS / name, tmp_path / name)  # follows the symlink, like cp/scp
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calcul_forfaits.py",
                                                           "tarifs-forfaits.csv"]
    assert not any(p.is_symlink() for p in tmp_path.iterdir())
    return tmp_path


def run(folder, *args, python=sys.executable):
    # -I: isolated (no PYTHONPATH, no user site, script dir not on sys.path); -S: no site
    # module, so not even the venv's site-packages: the script can only use the standard library.
    env = {"PATH": os.environ.get("PATH", ""), "LC_ALL": "C.UTF-8"}
    return subprocess.run([str(python), "-I", "-S", "calcul_forfaits.py", *args], cwd=folder,
                          capture_output=True, text=True, env=env, timeout=60)


def test_scripts_are_symlinks_to_the_one_implementation():
    assert os.readlink(SCRIPTS / "calcul_forfaits.py") == "../lab/cost/forfaits.py"
    assert os.readlink(SCRIPTS / "tarifs-forfaits.csv") == "../lab/cost/tarifs-forfaits.csv"


def test_symlinked_script_in_the_checkout_finds_the_catalog_beside_it(tmp_path):
    # The default catalog is found next to __file__ without resolving the symlink;
    # the working folder (tmp_path) is empty.
    r = subprocess.run([sys.executable, "-I", str(SCRIPTS / "calcul_forfaits.py"), "--gpu",
                        "b200", "--json"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["catalog"] == str(SCRIPTS / "tarifs-forfaits.csv")


def test_seed_command_prints_220_usd_for_two_gpus(folder):
    r = run(folder, "--gpu", "rtx-4090", "--days", "7", "--lots", "2")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for expected in ("220.00 USD", "Price per lot:      110.00 USD", "Lots:               2",
                     "Cards per lot:      1", "Total cards:        2 GPUs",
                     "catalog version 2026-09-24"):
        assert expected in out
    assert "per validated corpus" not in out  # no --accepted-results: no per-result figure


def test_b200_lot_is_2071_usd_for_two_gpus(folder):
    r = run(folder, "--gpu", "b200", "--days", "7", "--lots", "1")
    assert r.returncode == 0, r.stderr
    assert "Total (committed budget): 2071.00 USD" in r.stdout
    assert "Total cards:        2 GPUs" in r.stdout


@pytest.mark.skipif(not PY310.exists(), reason=f"no Python 3.10 at {PY310}")
def test_runs_with_python_3_10(folder):
    r = run(folder, "--gpu", "rtx-4090", "--days", "7", "--lots", "2", "--window-start",
            "2026-10-23 09:00", "--window-end", "2026-10-30 09:00", "--tz", "Europe/Rome",
            python=PY310)
    assert r.returncode == 0, r.stderr
    assert "220.00 USD" in r.stdout and "= 169 h" in r.stdout


def test_accepted_results_adds_cost_per_validated_corpus(folder):
    r = run(folder, "--gpu", "rtx-4090", "--days", "7", "--lots", "2", "--accepted-results", "4")
    assert "Cost per validated corpus: 55.00 USD" in r.stdout


def test_listing_shows_3_7_30_days_with_not_in_catalog(folder):
    r = run(folder, "--gpu", "rtx-4090")
    lines = r.stdout.splitlines()
    assert lines[1] == "   3 days ( 72 h): not in catalog"
    assert lines[2].startswith("   7 days (168 h): 110.00 USD per lot of 1 card(s)")
    assert lines[3] == "  30 days (720 h): not in catalog"


def test_monday_to_friday_window_is_covered_by_7_days_not_3(folder):
    r = run(folder, "--gpu", "b200", "--window-start", "2026-09-28T09:00+02:00",
            "--window-end", "2026-10-02T09:00+02:00")
    assert r.returncode == 0, r.stderr
    assert "= 96 h" in r.stdout
    assert "exceeds the 3-day package (72 h): needs 2 periods" in r.stdout
    assert "covered by one 7-day package (168 h)" in r.stdout


def test_json_quote_with_dst_window(folder):
    r = run(folder, "--gpu", "rtx-4090", "--days", "7", "--lots", "2", "--json",
            "--window-start", "2026-10-23T09:00", "--window-end", "2026-10-30T09:00",
            "--tz", "Europe/Rome", "--accepted-results", "1")
    data = json.loads(r.stdout)
    assert data["quote"]["committed_budget"] == "220.00"
    assert data["quote"]["cost_per_validated_corpus"] == "220.00"
    assert data["quote"]["catalog_version"] == "2026-09-24"
    assert data["window"]["window_seconds"] == 169 * 3600
    assert (data["coverage"]["extra_periods"], data["coverage"]["extra_cost"]) == (1, "220.00")
    assert data["catalog"] == str(folder / "tarifs-forfaits.csv")


def test_json_listing_marks_missing_packages(folder):
    data = json.loads(run(folder, "--gpu", "b200", "--json").stdout)
    assert [(p["days"], p["in_catalog"], p["price_per_lot"]) for p in data["packages"]] == \
        [(3, False, None), (7, True, "2071.00"), (30, False, None)]


@pytest.mark.parametrize("args,message", [
    (["--gpu", "h100", "--days", "7"], "unknown GPU 'h100': known GPUs are b200, rtx-4090"),
    (["--gpu", "b200", "--days", "5"], "days 5 not offered"),
    (["--gpu", "b200", "--days", "3"], "b200 3 days: not in catalog"),
    (["--gpu", "b200", "--days", "7", "--lots", "0"], "--lots must be an integer >= 1"),
    (["--gpu", "b200", "--days", "7", "--lots", "two"], "--lots must be an integer >= 1"),
    (["--gpu", "b200", "--days", "7", "--accepted-results", "0"],
     "--accepted-results must be an integer >= 1"),
    (["--gpu", "b200", "--days", "7", "--accepted-results", "1.5"],
     "--accepted-results must be an integer >= 1"),
    (["--window-start", "2026-10-02T09:00+02:00", "--window-end", "2026-10-01T09:00+02:00"],
     "is not after window start"),
    (["--window-start", "2026-10-02T09:00+02:00"], "give both --window-start and --window-end"),
    (["--days", "7"], "--days needs --gpu"),
    (["--catalog", "missing.csv"], "cannot read catalog missing.csv"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_bad_input_is_one_line_and_exit_2(folder, args, message):
    r = run(folder, *args)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1 and message in r.stderr


@pytest.mark.parametrize("extra,message", [
    ("b200,NVIDIA B200,2,7,2071.00,USD,2026-09-24\n", "line 4: duplicate row for b200 7 days"),
    ("h100,NVIDIA H100,1,7,99.00,EUR,2026-09-24\n", "line 4: mixed currencies USD"),
    ("h100,NVIDIA H100,1,7,ninety,USD,2026-09-24\n", "line 4: malformed row: price_per_lot"),
])
def test_bad_catalog_beside_the_script_exits_2(folder, extra, message):
    with open(folder / "tarifs-forfaits.csv", "a") as fh:
        fh.write(extra)
    r = run(folder, "--gpu", "b200", "--days", "7")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and message in r.stderr


def test_catalog_option_takes_a_fuller_catalog(folder):
    fuller = folder / "fuller.csv"
    fuller.write_text((folder / "tarifs-forfaits.csv").read_text()
                      + "rtx-4090,NVIDIA GeForce RTX 4090,1,30,400.00,USD,2026-09-24\n")
    r = run(folder, "--catalog", "fuller.csv", "--gpu", "rtx-4090", "--days", "30", "--lots", "2")
    assert r.returncode == 0 and "Total (committed budget): 800.00 USD" in r.stdout


@pytest.mark.parametrize("lots", ["1" + "0" * 24, "9" * 5000, "1000001", "1e3", "1_000", "-2"])
def test_absurd_lots_are_one_line_exit_2(folder, lots):
    r = run(folder, "--gpu", "rtx-4090", "--days", "7", "--lots", lots)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "--lots" in r.stderr and len(r.stderr) < 300, r.stderr


def test_huge_accepted_results_is_one_line_exit_2(folder):
    r = run(folder, "--gpu", "rtx-4090", "--days", "7", "--accepted-results", "7" * 5000)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and len(r.stderr) < 300


@pytest.mark.parametrize("price", ["1E+30", "1_000.00", "1E+3", "+110.00", "110.001", "Infinity", " 1e2"])
def test_catalog_prices_in_plain_digits_only(folder, price):
    cat = folder / "tarifs-forfaits.csv"
    lines = cat.read_text(encoding="utf-8").splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("rtx-4090") and ",7," in line)
    cells = lines[row].split(",")
    cells[4] = price
    lines[row] = ",".join(cells)
    cat.write_text("\n".join(lines) + "\n", encoding="utf-8")
    r = run(folder, "--gpu", "rtx-4090", "--days", "7")
    assert r.returncode == 2 and r.stdout == "", r.stdout
    assert len(r.stderr.strip().splitlines()) == 1 and f"line {row + 1}: malformed row" in r.stderr
    assert "plain digits" in r.stderr
