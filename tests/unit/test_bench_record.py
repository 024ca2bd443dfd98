"""scripts/bench_record.py: the bench scripts' readings, kept with their origin, and the
benchmark page's figures written from them (issue 37 part 4)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import conftest

SCRIPT = conftest.TESTS.parent / "scripts" / "bench_record.py"
spec = importlib.util.spec_from_file_location("bench_record", SCRIPT)
bench_record = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_record)


def test_a_reading_keeps_what_the_command_printed_its_exit_and_where_it_ran():
    r = bench_record.run("t", [sys.executable, "-c", "import sys; print('ratio 1.02'); sys.exit(3)"])
    assert r["output"] == "ratio 1.02\n" and r["exit"] == 3 and r["name"] == "t"
    assert r["command"].startswith("python -c ") and sys.executable not in r["command"]
    assert len(r["commit"]) >= 7 and isinstance(r["dirty"], bool) and r["date"].endswith("+00:00")
    assert r["machine"]["cores"] >= 1 and r["wall_s"] >= 0 and r["load_start"] >= 0


def test_a_block_is_written_from_its_reading_and_a_stale_or_orphan_block_is_named():
    reading = {"name": "bench-x", "command": "python scripts/x.py", "commit": "abc1234", "dirty": False,
               "date": "2026-12-04T11:00:00+00:00", "wall_s": 12.0,
               "machine": {"cpu": "Test CPU", "cores": 2, "memory_gib": 23.4, "python": "3.11.7"},
               "load_start": 0.5, "load_end": 1.5, "exit": 0, "output": "lab_over_bare 1.01\n"}
    page = ("# Notes\n\n<!-- reading:bench-x -->\nhand-typed 9.99\n<!-- /reading:bench-x -->\n\n"
            "<!-- reading:gone -->\nold\n<!-- /reading:gone -->\n")
    new, problems = bench_record.page_with_readings(page, {"bench-x": reading})
    assert "hand-typed" not in new and "lab_over_bare 1.01" in new
    assert "commit abc1234" in new and "`python scripts/x.py`" in new and "2026-12-04T11:00:00+00:00" in new
    assert "load average 0.50 at the start and 1.50 at the end" in new
    assert "<!-- reading:gone -->\nold\n" in new and problems == [
        "benchmarks.md: block reading:gone has no docs/bench-readings/gone.json"]
    assert bench_record.page_with_readings(new, {"bench-x": reading}) == (new, problems)  # idempotent
    failed = bench_record.render({**reading, "exit": 1, "dirty": True})
    assert "plus uncommitted changes" in failed and "it exited 1" in failed


def test_every_page_matches_its_kept_readings():
    """Every reading block of README.md and docs/*.md is its docs/bench-readings/ file's rendering,
    and every kept reading has a block somewhere."""
    kept = bench_record.readings()
    blocks: set[str] = set()
    for page in bench_record.pages():
        text = page.read_text(encoding="utf-8")
        new, problems = bench_record.page_with_readings(text, kept, page)
        assert problems == [] and new == text, (page.name, problems or "stale block: run "
                                                "`python scripts/bench_record.py --render`")
        blocks |= {m["name"] for m in bench_record.BLOCK.finditer(text)}
    assert set(kept) <= blocks, f"readings without a block in any page: {sorted(set(kept) - blocks)}"
    assert bench_record.PAGE in bench_record.pages()


def test_a_gpu_block_is_written_from_the_files_that_came_back(tmp_path):
    """A GPU reading: its origin from NAME.json, the verdict line and one row per pass from the raw
    table as the device wrote them (bytes as MB, utilization as a percentage); a missing file
    names the block instead of leaving a hand-typed one unnoticed."""
    (tmp_path / "g.json").write_text('{"command": "bash scripts/gpu_check.sh", "commit": "abc1234", '
                                     '"date": "2026-12-04", "device": "one test GPU", "environment": "test env"}')
    (tmp_path / "g-gpu_check.log").write_text("gpu_check: PASS: test\n")
    (tmp_path / "g-demo-raw_table.csv").write_text(
        "variant_label,status,corpus_accepted,measured_s,peak_allocated_bytes,peak_reserved_bytes,"
        "device_used_bytes,utilization\nbatch 8,ok,True,1.164133,160658944,197132288,1562247168,0.0922\n"
        "batch 1,oom,False,,,,,\n")
    block = bench_record.render_gpu("g", tmp_path)
    assert "`bash scripts/gpu_check.sh` at commit abc1234 on 2026-12-04, one test GPU; test env" in block
    assert "gpu_check: PASS: test\n" in block
    assert "| batch 8 | ok | True | 1.16 | 160.7 | 197.1 | 1,562.2 | 9.2% |" in block
    assert "| batch 1 | oom | False |  |  |  |  |  |" in block
    page = "<!-- gpu:missing -->\nhand-typed\n<!-- /gpu:missing -->\n"
    new, problems = bench_record.page_with_readings(page, {})
    assert new == page and problems and problems[0].startswith("benchmarks.md: block gpu:missing cannot be written")


def test_every_gpu_reading_has_its_block():
    text = bench_record.PAGE.read_text(encoding="utf-8")
    kept = {p.stem for p in Path(bench_record.GPU).glob("*.json")}
    blocks = {m["name"] for m in bench_record.GPU_BLOCK.finditer(text)}
    assert kept and kept <= blocks, f"GPU readings without a block in benchmarks.md: {sorted(kept - blocks)}"
