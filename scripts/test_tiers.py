"""Run the test tiers (docs/testing.md) one after another and say what each cost.

    python scripts/test_tiers.py [TIER ...]      # no tier: every tier, cheapest first

Each tier is one or two pytest runs (its parallel part under pytest-xdist, then its ``serial``
tests alone); every run writes a JUnit XML file under ``runs/test-tiers/``. A failing run does
not stop the next: at the end the script prints each run's wall time and exit status, the 25
slowest tests of all runs (setup, call and teardown together, as JUnit's ``time``), then one
closing line ``tests: N passed, N failed, N skipped``. Exit status 0 when every run passed
(pytest's 5, "no test selected", counts as passed: a tier may have no serial test), else 1;
2 for an unknown tier.
"""

from __future__ import annotations

import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "runs" / "test-tiers"
PARALLEL = ["-n", "auto", "--dist", "loadgroup"]

#: tier -> its pytest runs (name, arguments); the order of `make test`, cheapest first. The
#: serial tests (tests/conftest.py SERIAL_MODULES) run in a process of their own, alone.
TIERS: dict[str, list[tuple[str, list[str]]]] = {
    "unit": [("unit", ["-n", "auto", "tests/unit"])],
    "integration": [("integration", [*PARALLEL, "-m", "not serial", "tests/integration"]),
                    ("integration-serial", ["-m", "serial", "tests/integration"])],
    "ui": [("ui", [*PARALLEL, "-m", "not serial", "tests/ui"]),
           ("ui-serial", ["-m", "serial", "tests/ui"])],
    # Docker: containers and their passes on every CPU, one module per worker (docker_client
    # removes only its own process's containers). vLLM: each worker pinned to its own CPUs
    # (--pin-workers): its engines bind the first CPUs they may run on, and two engines bound
    # to one core would only take turns (402 s one after another, 273 s pinned side by side,
    # measured 2026-12-04 on the 2-core machine, docs/testing.md).
    "docker": [("docker", [*PARALLEL, "tests/docker"])],
    "vllm": [("vllm", [*PARALLEL, "--pin-workers", "tests/vllm"])],
}
NO_TESTS = 5  # pytest's exit status when the selection is empty
SLOWEST = 25


def run(name: str, args: list[str]) -> tuple[float, int]:
    """Run pytest with ``args`` (JUnit XML to OUT/<name>.xml); (wall seconds, exit status)."""
    xml = OUT / f"{name}.xml"
    xml.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-q", f"--junitxml={xml}", *args]
    print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
    start = time.monotonic()
    rc = subprocess.call(cmd, cwd=REPO)
    wall = time.monotonic() - start
    print(f"== {name}: exit {rc} in {wall:.0f} s", flush=True)
    return wall, rc


def cases(name: str) -> list[tuple[float, str, str]]:
    """(seconds, outcome, test id) of every test case in OUT/<name>.xml; [] when it is absent."""
    xml = OUT / f"{name}.xml"
    if not xml.is_file():
        return []
    out = []
    for case in ET.parse(xml).iter("testcase"):
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        test_id = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        out.append((float(case.get("time") or 0.0), outcome, test_id))
    return out


def main(argv: list[str]) -> int:
    tiers = argv or list(TIERS)
    unknown = [t for t in tiers if t not in TIERS]
    if unknown:
        print(f"test_tiers: unknown tier {', '.join(unknown)}; tiers are {', '.join(TIERS)}", file=sys.stderr)
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    results = [(name, *run(name, args)) for tier in tiers for name, args in TIERS[tier]]
    print("\n== tiers (wall seconds, exit status)")
    for name, wall, rc in results:
        print(f"   {name:<20} {wall:7.0f} s   exit {rc}")
    print(f"   {'all':<20} {sum(w for _, w, _ in results):7.0f} s")
    every = [c for name, _, _ in results for c in cases(name)]
    print(f"\n== the {SLOWEST} slowest tests (setup + call + teardown)")
    for seconds, outcome, test_id in sorted(every, reverse=True)[:SLOWEST]:
        print(f"   {seconds:7.1f} s  {outcome:<7} {test_id}")
    counts = {k: sum(1 for c in every if c[1] == k) for k in ("passed", "failure", "error", "skipped")}
    failed = counts["failure"] + counts["error"]
    ok = all(rc in (0, NO_TESTS) for _, _, rc in results)
    print(f"\ntests: {counts['passed']} passed, {failed} failed, {counts['skipped']} skipped")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
