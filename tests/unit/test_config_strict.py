"""Issue 11 part 1 / issue 9 part 3: the campaign file is strict (typed sections, no silent drop).

Parsing only: no model is loaded. Each case is a one-line ProtocolError naming the key and the fix.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from lab.inputs.variants import Variant
from lab.orchestration.config import VARIANT_KEYS, check_defaults
from lab.orchestration.protocol import DEMO_CAMPAIGN, ProtocolError, load_protocol

REPO = Path(__file__).resolve().parents[2]
BASE = DEMO_CAMPAIGN.read_text()


def campaign(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "c.toml"
    f.write_text(text)
    return f


def edited(tmp_path, old, new):
    assert old in BASE, old
    return campaign(tmp_path, BASE.replace(old, new, 1))


@pytest.mark.parametrize("old, new, message", [
    # misspelt keys, with the nearest valid key (today silently dropped: batch 1 / fp32)
    ('precision = "fp32"', 'precison = "bf16"', r"\[defaults\] unknown key 'precison'; did you mean 'precision'\?"),
    ('padding = "longest"', 'batch_sise = 8', r"\[defaults\] unknown key 'batch_sise'; did you mean 'batch_size'\?"),
    ("repetitions = 5", "repetitons = 5", r"\[timing\] unknown key 'repetitons'; did you mean 'repetitions'\?"),
    ('metric = "accuracy"', 'metric = "accuracy"\nthreshhold = 0.5', "did you mean 'threshold'"),
    ("lots = 1", "lost = 1", r"\[cost\] unknown key 'lost'; did you mean 'lots'\?"),
    ('factor = "batch_size"', 'factor = "batch_size"\nprecison = "fp16"', r"\[\[series\]\] #1 unknown key 'precison'"),
    ("[corpus]", "[corpsu]\npath='x'\n[corpus]", "top level: unknown key 'corpsu'; did you mean 'corpus'"),
    # wrong types (bool is not int)
    ('padding = "longest"', "batch_size = true",
     r"\[defaults\] batch_size = true has the wrong type; expected an integer"),
    ("bucketing = false", 'bucketing = "yes"',
     r'\[defaults\] bucketing = "yes" has the wrong type; expected true or false'),
    ("threads = 2 ", 'threads = "2" ', r'\[timing\] threads = "2" has the wrong type; expected an integer'),
    ("values = [1, 4, 8]", 'values = [1, "4", 8]', 'values item = "4" has the wrong type'),
    ("threshold = 0.55", "threshold = true", "threshold = true has the wrong type"),
    # keys accepted but never read: implemented values only
    ('rotation = "cyclic"', 'rotation = "random"', "rotation 'random' is not implemented; use 'cyclic'"),
    ('subgroups = "buckets"', 'subgroups = "labels"', "subgroups 'labels' is not implemented"),
    # [cost], deadline, deliverables, window checked now, not at archive time
    ("days = 7", "days = 5", "days 5 not offered: packages are 3, 7 or 30 days"),
    ('gpu = "rtx-4090"', 'gpu = "h100"', "unknown GPU 'h100'"),
    ("lots = 1", "lots = 0", r"\[cost\] lots = 0; must be an integer >= 1"),
    ("# deadline = \"2026-12-04T09:00:00+01:00\"", 'deadline = "tomorrow"',
     "deadline 'tomorrow' is not an ISO date-time"),
    ("# deadline = \"2026-12-04T09:00:00+01:00\"", 'deadline = "2026-12-04T09:00:00"', "has no time zone"),
    ("deliverables = 1 ", "deliverables = 0 ", "deliverables = 0; must be >= 1"),
    ("# window_start = \"2026-11-30T09:00:00+01:00\"", 'window_start = "2026-11-30T09:00:00+01:00"',
     "give both window_start and window_end"),
    ("# window_start = \"2026-11-30T09:00:00+01:00\"\n# window_end = \"2026-12-04T09:00:00+01:00\"",
     'window_start = "2026-12-30T09:00:00+01:00"\nwindow_end = "2026-12-04T09:00:00+01:00"',
     "is not after window start"),
    # the campaign name is a folder name
    ('name = "demo-20newsgroups"', 'name = "../../x"', "used as a folder name"),
    ('name = "demo-20newsgroups"', 'name = "a/b"', "used as a folder name"),
    ('name = "demo-20newsgroups"', 'name = ".."', "used as a folder name"),
    ("[timing]", "[timing]\nstall_s = 0", "stall_s = 0; must be seconds"),
])
def test_campaign_file_refusals(tmp_path, old, new, message):
    f = edited(tmp_path, old, new)
    with pytest.raises(ProtocolError, match=message) as e:
        load_protocol(f)
    assert "\n" not in str(e.value)


def test_demo_campaign_parses_with_defaults_once():
    p = load_protocol(DEMO_CAMPAIGN)
    assert p.timing["stall_s"] == 900.0 and p.timing["pass_timeout_s"] == 21600.0
    assert p.cost.gpu == "rtx-4090" and p.cost.days == 7


def test_no_cost_section_means_no_package(tmp_path):
    start = BASE.index("[cost]")
    p = load_protocol(campaign(tmp_path, BASE[:start]))
    assert p.cost is None


def test_variant_fields_extend_the_accepted_keys():
    # the accepted [defaults]/series keys are derived from Variant itself
    assert set(VARIANT_KEYS) == {f.name for f in dataclasses.fields(Variant)} - {"series", "name"}
    # a field added to Variant later (here a hypothetical "nodes") is accepted with no list to edit
    Extended = dataclasses.make_dataclass("Extended", [("nodes", int, dataclasses.field(default=1))], bases=(Variant,),
                                          frozen=True)
    import lab.orchestration.config as config

    keys = tuple(f.name for f in dataclasses.fields(Extended) if f.name not in ("series", "name"))
    assert "nodes" in keys and "nodes" not in VARIANT_KEYS
    with pytest.raises(Exception, match="unknown key 'nodes'"):
        check_defaults({"nodes": 2})
    assert config.nearest("node", keys) == "did you mean 'nodes'?"
    # cards (issue 14) is a real Variant field: accepted in [defaults] with no edit to lab.orchestration.config
    assert "cards" in VARIANT_KEYS
    check_defaults({"cards": 2})


def test_cli_lock_prints_one_line_exit_2(tmp_path):
    f = edited(tmp_path, 'precision = "fp32"', 'precison = "bf16"')
    r = subprocess.run([sys.executable, "-m", "lab.cli", "protocol", "lock", str(f)], capture_output=True,
                       text=True, cwd=REPO)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "did you mean 'precision'" in r.stderr
