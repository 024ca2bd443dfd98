"""The manifest describes the environment the passes ran in (recorded by the orchestrator at
each start), not the one the report happens to be built in (lab.inputs.manifest.environment_section)."""
from __future__ import annotations

from lab.inputs.manifest import HOST_KEYS, environment_section


def facts(commit="a" * 40, torch="2.13.0+cpu", gpu="absent"):
    return {"lab": {"version": "0.1.0", "commit": commit, "uncommitted_changes": False}, "python": "3.11.7",
            "packages": {"torch": torch}, "os": {"system": "Linux"}, "cpu": {"name": "cpu", "logical_cores": 2},
            "ram_bytes": 2**34, "gpu": {"count": 0, "driver": gpu}, "environment": {}}


def test_the_passes_environment_wins_and_the_report_host_is_named_where_it_differs():
    ran = {"recorded_at": "2026-11-30T10:00:00+00:00", **facts()}
    m = environment_section([ran], facts(commit="b" * 40))
    assert m["lab"]["commit"] == "a" * 40  # where the passes ran, not where the report is built
    assert m["environment_recorded"].startswith("when the orchestrator started, 2026-11-30T10:00:00+00:00")
    assert m["report_environment"] == {"lab": facts(commit="b" * 40)["lab"]}
    assert m["environment_changes"] == []
    assert environment_section([ran], facts())["report_environment"] == {}
    assert set(HOST_KEYS) <= set(m)


def test_a_resume_in_another_environment_is_listed():
    first = {"recorded_at": "2026-11-30T10:00:00+00:00", **facts()}
    later = {"recorded_at": "2026-12-01T08:00:00+00:00", **facts(torch="2.14.0+cpu")}
    m = environment_section([first, later], facts(torch="2.14.0+cpu"))
    assert m["packages"]["torch"] == "2.13.0+cpu"
    assert m["environment_changes"] == [{"recorded_at": "2026-12-01T08:00:00+00:00",
                                          "packages": {"torch": "2.14.0+cpu"}}]
    assert "(2 start(s) recorded)" in m["environment_recorded"]


def test_without_a_recorded_snapshot_the_report_time_facts_say_so():
    m = environment_section(None, facts())
    assert m["environment_recorded"] == ("at report time, not when the passes ran: the journal predates "
                                         "run-time recording")
    failed = [{"recorded_at": "2026-11-30T10:00:00+00:00", "error": "host facts not recorded (TimeoutExpired)"}]
    m = environment_section(failed, facts())
    assert m["environment_recorded"].endswith("host facts not recorded (TimeoutExpired)")
    assert m["lab"]["commit"] == "a" * 40
