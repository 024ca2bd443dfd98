"""The rule that blocks a campaign on repeated identical failures (lab.orchestration.orchestrator
.SystematicFailures): only errors before any item, the same error, at least two variants."""

from lab.orchestration.orchestrator import SystematicFailures


def row(status="error", items=0, error="exit code 2, no result written"):
    return {"status": status, "items": items, "error": error}


def test_three_identical_errors_of_two_variants_block():
    s = SystematicFailures()
    assert s.add(row(), "a") == "" and s.add(row(), "b") == ""
    why = s.add(row(), "a")
    assert why.startswith("3 passes in a row, of 2 variants") and "exit code 2" in why


def test_one_variant_failing_alone_is_a_measurement_not_a_fault():
    s = SystematicFailures()
    assert [s.add(row(), "a") for _ in range(5)] == [""] * 5


def test_a_pass_that_did_items_an_oom_or_another_error_resets_the_streak():
    for breaker in (row(items=4), row(status="oom"), row(status="ok", error="")):
        s = SystematicFailures()
        s.add(row(), "a"), s.add(row(), "b")
        assert s.add(breaker, "a") == ""
        assert s.add(row(), "b") == ""  # a new streak of one
    s = SystematicFailures()
    s.add(row(), "a"), s.add(row(), "b")
    assert s.add(row(error="another error"), "a") == ""
