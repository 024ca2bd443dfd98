"""The typed pass records, the failure kinds, and the journal's read-only open and schema version."""

from __future__ import annotations

import sqlite3

import msgspec
import pytest

from lab.facts.diskfull import DiskFull
from lab.facts.errors import FailureKind, PassFailure
from lab.inputs.variants import Variant
from lab.orchestration.journal import SCHEMA_VERSION, Journal, JournalVersion
from lab.orchestration.schedule import pass_id_for
from lab.passes.failures import failure_kind, failure_status
from lab.passes.inference import DeviceUnavailable, NonFiniteLogits, WeightsNotLoaded
from lab.passes.observed import NotHonoured
from lab.passes.records import PassResult, Validation, build, decode_result, write_record
from lab.passes.worker import WorkerStopped

RESULT = {"pass_id": "p001-r1-v", "campaign": "c", "variant": {"batch_size": 8}, "start_time": "t0",
          "end_time": "t1", "status": "ok", "error": "", "phases_s": {"measured": 1.5}, "items_total": 4,
          "items_completed": 4, "predictions_path": "predictions.jsonl", "exit_code": 0}


def test_a_result_round_trips_with_its_field_names_and_decodes_strictly(tmp_path):
    r = build(PassResult, {**RESULT, "observed": {"batch_size": 8, "dtype": "float32"}})
    write_record(tmp_path / "result.json", r)
    text = (tmp_path / "result.json").read_text()
    assert '"phases_s"' in text and '"items_completed": 4' in text and '"error": ""' in text
    assert '"self_accuracy"' not in text  # a figure not measured is left out, as before
    back = decode_result(text)
    assert back == r and back.observed is not None and back.observed.batch_size == 8
    assert back.phases_s.measured == 1.5 and back.phases_s.warmup is None
    with pytest.raises(msgspec.ValidationError, match="items_completed"):
        decode_result(text.replace('"items_completed": 4', '"items_completed": "4"'))
    with pytest.raises(TypeError, match=r"no field.*itmes_total"):
        build(PassResult, {**RESULT, "itmes_total": 4})  # a misspelt figure is never dropped unseen
    with pytest.raises(AttributeError):
        r.status = "error"  # type: ignore[misc]


def test_pass_failures_carry_their_kind_and_keep_their_old_base():
    cases = [(NonFiniteLogits(["a"], 3), RuntimeError, FailureKind.NON_FINITE),
             (DeviceUnavailable("no GPU"), RuntimeError, FailureKind.DEVICE_UNAVAILABLE),
             (WeightsNotLoaded("missing"), ValueError, FailureKind.WEIGHTS_NOT_LOADED),
             (NotHonoured("declared"), RuntimeError, FailureKind.NOT_HONOURED),
             (DiskFull("/x"), RuntimeError, FailureKind.DISK_FULL),
             (WorkerStopped("signal"), PassFailure, FailureKind.INTERRUPTED)]
    for exc, base, kind in cases:
        assert isinstance(exc, PassFailure) and isinstance(exc, base) and failure_kind(exc) == kind
    assert NonFiniteLogits(["a"], 3).items_done == 3
    assert failure_kind(KeyboardInterrupt()) == FailureKind.INTERRUPTED
    assert failure_kind(MemoryError()) == FailureKind.OOM
    assert failure_kind(RuntimeError("CUDA out of memory. Tried to allocate")) == FailureKind.OOM
    assert failure_kind(TimeoutError()) == FailureKind.TIMEOUT
    assert failure_kind(ValueError("other")) == FailureKind.ERROR
    assert failure_status(FailureKind.OOM) == ("oom", 3)
    assert failure_status(FailureKind.INTERRUPTED) == ("interrupted", 4)
    assert failure_status(FailureKind.DEVICE_UNAVAILABLE) == ("error", 4)


def test_verdict_wording_is_one_function_of_the_validation():
    v = msgspec.convert({"expected_ids": 1, "observed_ids": 1, "duplicate_ids": 0, "missing_ids": 0,
                         "extra_ids": 0, "ids_match": True, "format_ok": True, "coverage": {},
                         "coverage_ok": True, "metric_name": "accuracy", "metric": 0.5, "metric_by_bucket": {},
                         "threshold": 0.55, "threshold_ok": False, "reference_metric": None,
                         "gap_to_reference": None, "agreement_with_reference": None, "tolerance": 0.02,
                         "tolerance_ok": None, "corpus_accepted": False,
                         "reasons": ["accuracy 0.5000 below threshold 0.55", "second"]}, Validation)
    assert v.verdict() == "rejected: accuracy 0.5000 below threshold 0.55; second"
    assert v.replace(corpus_accepted=True, reasons=[]).verdict() == "accepted (accuracy 0.5000)"


def test_the_short_verdict_names_the_failed_checks_from_the_typed_record():
    """The Runs screen's status cell (Validation.verdict_short): "accepted", or the one rejection
    wording of the checks failed, read from the booleans, in the rule's order."""
    fields = {"expected_ids": 4, "observed_ids": 4, "duplicate_ids": 0, "missing_ids": 0, "extra_ids": 0,
              "ids_match": True, "format_ok": True, "coverage": {}, "coverage_ok": True,
              "metric_name": "nn_accuracy", "metric": 0.35, "metric_by_bucket": {}, "threshold": 0.5,
              "threshold_ok": False, "reference_metric": 0.36, "gap_to_reference": -0.01,
              "agreement_with_reference": 0.9, "tolerance": 0.02, "tolerance_ok": True,
              "corpus_accepted": False, "reasons": ["nn_accuracy 0.3500 < threshold 0.5"]}
    v = msgspec.convert(fields, Validation)
    assert v.failed_checks() == ["nn_accuracy"] and v.verdict_short() == "rejected: nn_accuracy"
    assert v.verdict() == "rejected: nn_accuracy 0.3500 < threshold 0.5"  # the full words stay the CLI's
    assert v.replace(tolerance_ok=False).verdict_short() == "rejected: nn_accuracy; reference"
    no_ref = v.replace(threshold_ok=True, tolerance_ok=None, gap_to_reference=None)
    assert no_ref.verdict_short() == "rejected: reference"  # no reference pass yet: gap not computed
    ids = v.replace(ids_match=False, coverage_ok=False, metric=None, threshold_ok=None, tolerance_ok=None)
    assert ids.verdict_short() == "rejected: ids; coverage"  # a metric never computed is not a second failure
    assert v.replace(format_ok=False, metric=None, threshold_ok=None, tolerance_ok=None).failed_checks() == ["format"]
    accepted = v.replace(threshold_ok=True, corpus_accepted=True, reasons=[], metric=0.8)
    assert accepted.failed_checks() == [] and accepted.verdict_short() == "accepted"
    # a rejection no named check explains (a status that was not ok): the full words
    odd = v.replace(threshold_ok=True, reasons=["pass status oom"])
    assert odd.verdict_short() == odd.verdict() == "rejected: pass status oom"


def test_pass_id_format_is_written_once():
    assert pass_id_for(7, 2, "v-1") == "p007-r2-v-1"
    assert pass_id_for(7, 2, "v-1", attempt=3) == "p007-r2-v-1-a3"


def test_the_journal_has_a_schema_version_and_a_read_only_open(tmp_path):
    path = tmp_path / "journal.sqlite"
    with pytest.raises(sqlite3.OperationalError):
        Journal.open_read_only(path)  # nothing there: nothing created
    assert not path.exists()
    j = Journal(path)
    j.start_attempt("p001", 1, 1, 1, 1, Variant(), "t0", "local", 4)
    j.close()
    ro = Journal.open_read_only(path)
    try:
        assert ro.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        [a] = ro.attempts()
        assert a.pass_id == "p001" and a.status == "running" and a.result is None
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            ro.set_control("stop", True)
    finally:
        ro.close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    db.close()
    for opener in (Journal, Journal.open_read_only):
        with pytest.raises(JournalVersion, match=f"schema version {SCHEMA_VERSION + 1}, this lab reads up to"):
            opener(path)


def test_a_native_crash_is_out_of_memory_only_with_an_allocation_failure_as_last_words():
    """lab.passes.failures.native_oom_line: the signal and the log's words both decide."""
    import signal

    from lab.passes.failures import native_oom_line

    rust = "thread 'main' ...\nmemory allocation of 4294967296 bytes failed\n"
    cpp = "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc\n"
    assert native_oom_line(-signal.SIGABRT, rust) == "memory allocation of 4294967296 bytes failed"
    assert native_oom_line(-signal.SIGABRT, cpp) == "what(): std::bad_alloc"  # clipped: spaces folded
    assert native_oom_line(-signal.SIGSEGV, "Cannot allocate memory") == "Cannot allocate memory"
    assert native_oom_line(-signal.SIGABRT, "Fatal Python error: Aborted\n") == ""  # no allocation failure
    assert native_oom_line(-signal.SIGKILL, rust) == ""  # killed from outside: the launcher's to say why
    assert native_oom_line(1, rust) == "" and native_oom_line(None, rust) == ""


def test_onednn_failing_to_create_a_primitive_is_oom_only_under_an_address_space_limit():
    """A CI run met `RuntimeError: could not create a primitive` (oneDNN) for an embedding batch of
    8 long items under the local launcher's address-space limit, and recorded an error where the
    pass had run out of the memory it was given. Without a limit the words may mean an
    unsupported shape: an error stays an error."""
    import subprocess
    import sys

    from lab.facts.errors import FailureKind
    from lab.passes.failures import address_space_limit, failure_kind

    assert address_space_limit() is None  # the unit tier runs without one
    assert failure_kind(RuntimeError("could not create a primitive")) == FailureKind.ERROR
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (8 * 2**30, resource.RLIM_INFINITY)); "
            "from lab.passes.failures import failure_kind, address_space_limit; "
            "print(address_space_limit(), failure_kind(RuntimeError('could not create a primitive')), "
            "failure_kind(RuntimeError('could not create a primitive for an unknown reason of int4')), "
            "failure_kind(RuntimeError('shape mismatch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(8 * 2**30), "oom", "oom", "error"], out


def test_a_card_and_a_pass_record_declare_what_they_share_once():
    """PassFacts holds the fields result.json and a card's record share; each record declares only
    its own. The two fields both declare differ in type (a pass's ``threads`` may read "card 0: 2;
    ...", a card's ``exit_code`` may be absent): a field added to both is added to PassFacts."""
    from lab.passes.records import CardRecord, PassFacts

    base = set(PassFacts.__struct_fields__)
    own_pass = set(PassResult.__struct_fields__) - base
    own_card = set(CardRecord.__struct_fields__) - base
    assert issubclass(PassResult, PassFacts) and issubclass(CardRecord, PassFacts)
    assert own_pass & own_card == {"threads", "exit_code"}
    assert {"status", "phases_s", "observed", "vectors_sha256", "generation", "entry"} <= base
