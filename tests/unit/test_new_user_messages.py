"""Messages and hints a new user found wrong (issue 20's story): each case as the user met it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from lab.evidence.format import skipped_missing
from lab.evidence.rederive import check_row
from lab.facts.host import iteralab_command
from lab.orchestration.config import ConfigError, TaskSection, parse_section
from lab.orchestration.orchestrator import pass_line
from lab.orchestration.preflight import repo_hint
from lab.orchestration.protocol import DEMO_CAMPAIGN, ProtocolError, load_protocol, refusal_name
from lab.passes.events import PassStatus
from lab.passes.records import Validation
from lab.report.raw_row import raw_row


def _validation(accepted: bool, reasons: list[str]) -> Validation:
    return Validation(expected_ids=40, observed_ids=40, duplicate_ids=0, missing_ids=0, extra_ids=0, ids_match=True,
                      format_ok=True, coverage={}, coverage_ok=True, metric_name="nn_accuracy", metric=0.35,
                      metric_by_bucket={}, threshold=0.5, threshold_ok=accepted, reference_metric=None,
                      gap_to_reference=None, agreement_with_reference=None, tolerance=0.02, tolerance_ok=None,
                      corpus_accepted=accepted, reasons=reasons)


def test_an_ok_pass_rejected_on_quality_says_so_in_the_status_lines_words():
    v = _validation(False, ["nn_accuracy 0.3500 < threshold 0.5"])
    line = pass_line("pass 1/3 p001", PassStatus.OK, 40, 3.91, v, [])
    assert line == "pass 1/3 p001: ok, 40 items, measured window 3.91 s, rejected: nn_accuracy 0.3500 < threshold 0.5"
    assert line.endswith(v.verdict())  # the wording `campaign status` prints (Attempt.verdict)
    accepted = pass_line("pass 2/3 p002", PassStatus.OK, 40, None, _validation(True, []), [])
    assert accepted == "pass 2/3 p002: ok, 40 items, accepted (nn_accuracy 0.3500)"


def test_a_failed_pass_line_carries_its_notes_not_a_verdict():
    v = _validation(False, ["pass status error", "40 ids missing"])
    line = pass_line("pass 1/3 p001", PassStatus.ERROR, 0, None, v, ["crashed: exit code 1, no result written"])
    assert line == "pass 1/3 p001: error, 0 items (crashed: exit code 1, no result written)"


def test_next_step_names_an_executable_that_works_from_any_folder(tmp_path):
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "iteralab").write_text("")
    # started as .venv/bin/iteralab from the bundle, none on PATH: the absolute path

    here = Path.cwd()
    os.chdir(tmp_path)
    try:
        shown = iteralab_command(".venv/bin/iteralab", on_path="")
    finally:
        os.chdir(here)
    assert shown == str((venv_bin / "iteralab").resolve()) and Path(shown).is_absolute()
    # the one on PATH is the one running: its plain name
    assert iteralab_command(str(venv_bin / "iteralab"), on_path=str(venv_bin / "iteralab")) == "iteralab"
    # run as python -m lab.cli with none on PATH: this interpreter, absolute (a venv's link to the
    # base interpreter kept: resolved, it lacks the venv's packages), and -m lab.cli
    assert iteralab_command("-m", on_path="") == f"{os.path.abspath(sys.executable)} -m lab.cli"


def test_every_next_step_hint_names_the_executable_that_works_from_here(tmp_path, monkeypatch):
    """Hints of preflight, doctor, the orchestrator, the service and the archive once printed a
    bare `iteralab ...`, which a user who ran .venv/bin/iteralab (none on PATH) cannot paste: each
    names lab.facts.host.iteralab_command(), as replay, status and resume hints did."""
    import ast
    import shutil as shutil_module

    from lab.facts.host import toolkit_fix
    from lab.orchestration.preflight import check_card

    monkeypatch.setattr(shutil_module, "which", lambda name: None)  # none on PATH
    monkeypatch.setattr(sys, "argv", [str(tmp_path / ".venv" / "bin" / "iteralab")])
    shown = iteralab_command()
    assert shown == str(tmp_path / ".venv" / "bin" / "iteralab")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("")
    missing_card = check_card(tmp_path / "card.json", corpus)
    assert f"rebuild it with `{shown} corpus build --source YOUR.jsonl --out {tmp_path}` or remove [corpus] card" \
        in missing_card  # the folder the card is declared in: the command runs as printed
    assert toolkit_fix().endswith(f"then run `{shown} doctor` again")
    # no other message spells the command itself; a pass process (lab/passes) is not on the user's host
    lab = Path(__file__).resolve().parents[2] / "lab"
    bare = []
    for p in sorted(lab.rglob("*.py")):
        if p.relative_to(lab).parts[0] == "passes":
            continue
        tree = ast.parse(p.read_text())
        docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
        bare += [f"{p.relative_to(lab)}:{n.lineno}" for n in ast.walk(tree) if isinstance(n, ast.Constant)
                 and isinstance(n.value, str) and id(n) not in docs and "`iteralab " in n.value]
    assert bare == []


def test_no_printed_next_step_names_the_bundle_relative_executable():
    lab = Path(__file__).resolve().parents[2] / "lab"
    hits = [f"{p}" for p in lab.rglob("*.py") if ".venv/bin/iteralab" in p.read_text()
            and p.name != "host.py"]  # host.py's docstring says why it is never printed
    assert hits == []


def test_a_missing_member_is_named_missing_once_and_never_malformed():
    pid = "p001"
    preds = "\n".join(json.dumps({"id": f"i{k}", "row": k}) for k in range(3)) + "\n"
    result = {"predictions_path": "predictions.jsonl", "vectors_sha256": "ab" * 32, "vectors_path": "vectors.npy"}

    class Scan:  # what verify's one forward pass keeps (lab.evidence.verify._Scan), vectors.npy deleted
        kept = {f"passes/{pid}/result.json": json.dumps(result).encode(),
                f"passes/{pid}/predictions.jsonl": preds.encode()}
        sha = {rel: "x" for rel in kept}
        too_large: list[str] = []

    Scan.sha[f"passes/{pid}/predictions.jsonl"] = "cd" * 32
    row = raw_row({"pass_id": pid, "predictions_path": f"passes/{pid}/predictions.jsonl",
                   "predictions_sha256": "cd" * 32, "metric_name": "nn_accuracy", "metric": "0.35",
                   "corpus_accepted": "True", "status": "ok", "threshold": "0.5"})
    problems: list[str] = []
    gold = {f"i{k}": ("a", "short") for k in range(3)}
    check_row(row, Scan(), gold, 0.5, problems)
    vec = f"passes/{pid}/vectors.npy"
    assert problems == [skipped_missing(f"pass {pid}", "vectors sha256 check", vec),
                        skipped_missing(f"pass {pid}", "metric check", vec)]
    assert all("malformed" not in p and p.endswith(f"{vec} is missing") for p in problems)


def test_an_unknown_task_key_lists_the_declared_kinds_keys_only():
    with pytest.raises(ConfigError) as exc:
        parse_section(TaskSection, {"kind": "generation", "prompt": "{text}", "max_new_tokens": 4,
                                    "temperature": 0.7}, "task")
    msg = str(exc.value)
    assert msg.startswith("[task] unknown key 'temperature'; valid keys for kind = \"generation\": ")
    listed = set(msg.split(": ", 1)[1].split(", "))
    assert listed == {"kind", "prompt", "max_new_tokens", "stop", "max_text_tokens", "decoding", "normalisation",
                      "entry", "files"}  # the user's own code may run a generation
    with pytest.raises(ConfigError, match="did you mean 'pooling'"):
        parse_section(TaskSection, {"kind": "embedding", "poling": "mean"}, "task")
    # another kind's key keeps its own refusal (it applies to that kind only)
    with pytest.raises(ConfigError, match='applies to kind = "embedding" only'):
        parse_section(TaskSection, {"kind": "classification", "pooling": "mean"}, "task")


def test_a_campaign_file_is_named_by_its_full_path_in_every_refusal(tmp_path):
    bad = tmp_path / "g4.toml"
    bad.write_text("[campaign\n")
    with pytest.raises(ProtocolError) as exc:
        load_protocol(bad)
    assert str(exc.value).startswith(f"{refusal_name(bad)}: ") and refusal_name(bad) == str(bad.resolve())
    lock_refusals = (Path(__file__).resolve().parents[2] / "lab" / "orchestration" / "protocol.py").read_text()
    assert "{proto.path.name}: " not in lock_refusals and 'f"{path}: ' not in lock_refusals


def test_an_entry_found_under_the_bundle_gets_the_repo_prefix_hint(tmp_path):
    written = "examples/custom_classifier.py"
    assert repo_hint(written, tmp_path / written) == 'did you mean "@repo/examples/custom_classifier.py"?'
    assert repo_hint("examples/no_such.py", tmp_path / "examples/no_such.py") == ""
    assert repo_hint("@repo/examples/x.py", tmp_path / "x.py") == ""


def test_status_of_the_demo_file_finds_the_copy_the_demo_ran(tmp_path, monkeypatch):
    from lab.service import campaigns

    monkeypatch.setenv("ITERALAB_RUNS", str(tmp_path))
    with pytest.raises(campaigns.CampaignError) as exc:  # not run yet: where the demo campaign lives
        campaigns.resolve_campaign_dir(DEMO_CAMPAIGN)
    assert str(campaigns.demo_copy()) in str(exc.value) and "protocol not locked" not in str(exc.value)
    ran = tmp_path / "demo-20newsgroups" / "v1-0a1b2c3d"
    ran.mkdir(parents=True)
    (ran / "journal.sqlite").write_bytes(b"")
    monkeypatch.setattr(campaigns, "campaign_dir_of",
                        lambda f: ran if Path(f) == campaigns.demo_copy() else None)
    assert campaigns._demo_target(DEMO_CAMPAIGN) == campaigns.demo_copy()


def test_a_bare_target_command_says_what_to_pass(tmp_path, monkeypatch, capsys):
    from lab.cli import main

    monkeypatch.setenv("ITERALAB_RUNS", str(tmp_path))
    ran = tmp_path / "demo-20newsgroups" / "v1-0a1b2c3d"
    ran.mkdir(parents=True)
    (ran / "journal.sqlite").write_bytes(b"")
    assert main(["campaign", "status"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "required" not in err
    assert "campaign status: give a campaign file or campaign folder" in err and str(ran) in err


def test_the_not_locked_refusal_names_the_running_executable(tmp_path, monkeypatch):
    from lab.orchestration.protocol import locked_version

    copy = tmp_path / "demo.toml"
    copy.write_text(DEMO_CAMPAIGN.read_text())
    monkeypatch.setattr(sys, "argv", [str(tmp_path / "venv" / "bin" / "iteralab")])
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # none on PATH: the absolute path is the only one that works
    with pytest.raises(ProtocolError) as exc:
        locked_version(load_protocol(copy))
    assert f"run `{tmp_path / 'venv' / 'bin' / 'iteralab'} protocol lock {copy.resolve()}`" in str(exc.value)


def test_a_printed_command_names_what_it_acts_on():
    """A hint that prints a command runs as printed (issue 35 item 5, and the new user's trial of
    2026-12-04: `archive --partial` and `campaign run` were printed without their campaign): no
    f-string of lab/ ends a command that needs a target (a campaign file or folder, an archive)
    right after its verb."""
    import re

    needs_target = re.compile(r"\{iteralab_command\(\)\} (campaign run|campaign status|archive verify|"
                              r"archive --partial|archive|corpus build|protocol lock)`")
    lab = Path(__file__).resolve().parents[2] / "lab"
    bare = [f"{p.relative_to(lab)}:{n}" for p in sorted(lab.rglob("*.py"))
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if needs_target.search(line)]
    assert bare == []


def test_a_long_failure_note_is_cut_between_words_and_says_so():
    """A new user's trial: the live line of a failed pass ended '... every batch the same)', cut
    inside its sentence with nothing saying so (lab.facts.errors.clip)."""
    note = ("EntryFailed: embed returned a non-finite value in row 2 on warm-up batch 1; it must return a "
            "2-D array of finite numbers, one row per text, every batch the same width")
    line = pass_line("pass 1/1 p001", PassStatus.ERROR, 0, None, _validation(False, []), [note])
    inner = line[line.index("(") + 1:-1]
    assert len(inner) <= 160 and inner.endswith(" …") and note.startswith(inner[:-2]), line
    assert note[len(inner) - 2] == " ", line  # cut where a word ends


def test_a_misspelt_campaign_file_is_said_missing_with_the_nearest_name(tmp_path, monkeypatch):
    """A user trial typed `iteralab report campain.toml` and read "neither a campaign file nor a
    campaign folder", which does not say that nothing is there."""
    from lab.service.campaigns import CampaignError, resolve_campaign_dir

    (tmp_path / "campaign.toml").write_text("[campaign]\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CampaignError) as e:
        resolve_campaign_dir("campain.toml", "report")
    assert str(e.value) == ("campain.toml: no such file or folder; give a campaign file or its campaign folder "
                            "(did you mean campaign.toml?)")
    with pytest.raises(CampaignError, match=r"^elsewhere/x\.toml: no such file or folder; give a campaign file "
                                            r"or its campaign folder$"):
        resolve_campaign_dir("elsewhere/x.toml")
    (tmp_path / "notes").mkdir()
    with pytest.raises(CampaignError, match="neither a campaign file nor a campaign folder"):
        resolve_campaign_dir("notes")  # there, but not a campaign


def test_a_missing_corpus_names_the_path_key_and_the_build_command(tmp_path):
    from lab.orchestration.protocol import lock

    text = DEMO_CAMPAIGN.read_text().replace('path = "@repo/demo/corpus/comparison.jsonl"',
                                             'path = "comparision.jsonl"').replace(
        'card = "@repo/demo/corpus/corpus_card.json"\n', "")
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(ProtocolError) as e:
        lock(load_protocol(f))
    assert "comparision.jsonl not found; check [corpus] path (a relative path is read from the campaign file's " \
           f"folder) or build the corpus first (`{iteralab_command()} corpus build --source TEXTS.jsonl --out " \
           f"{tmp_path}`)" in str(e.value)


def test_a_server_pass_line_says_whether_it_held_the_latency_objective():
    """A new user's trial: a server pass's line said 'ok, 59 items, ... rejected: ...' and never
    whether the objective held; the next skipped row was the first hint."""
    from test_serving_figures import RECORDS

    from lab.engines.serving_figures import Bound, Objective, figures, plain, verdict
    from lab.passes.tasks.server_job import ServingRecord

    def serving(bound_s: float) -> dict:
        objective = Objective(bounds=(Bound("ttft", 99.0, bound_s),), share=0.5)
        return plain(ServingRecord(figures=figures(RECORDS, 2.0, 2.0, objective), verdict=verdict(RECORDS, objective),
                                   requests=4, answered=3, generator_cpu_s=0.1, generator_wall_s=2.0,
                                   schedule_note=""))

    v = _validation(True, [])
    held = pass_line("pass 2/8 p002", PassStatus.OK, 4, 2.0, v, [], serving(1.0))
    assert held == "pass 2/8 p002: ok, 4 items, measured window 2.00 s, latency objective held, " + v.verdict()
    missed = pass_line("pass 2/8 p002", PassStatus.OK, 4, 2.0, v, [], serving(0.01))
    assert ", latency objective not held (ttft p99 0.3960 s > 0.01 s; " in missed, missed
    assert pass_line("pass 1/3 p001", PassStatus.OK, 40, None, v, []) == f"pass 1/3 p001: ok, 40 items, {v.verdict()}"
