"""A pass's variant stays a typed Variant from the campaign file to the pass process
(issue 9, typed configuration): expand_series takes the typed sections, PassSpec holds a
Variant, and pass.json is the one place it is JSON. No model is built or loaded."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from dataclasses import fields

import pytest
from conftest import REPO

from lab.inputs.variants import Variant, VariantError, expand_series
from lab.orchestration.config import SeriesSection, parse_config
from lab.orchestration.protocol import DEMO_CAMPAIGN, load_protocol
from lab.passes.spec import PassSpec

# Computed with the code BEFORE PassSpec.variant became a Variant and expand_series took the
# typed sections (main at 45a3b0a, `load_protocol(DEMO_CAMPAIGN).variants`). Ids are derived
# from content; a change here would orphan every journal, lock and archive made before.
DEMO_IDS_BEFORE = {"batch/batch_size=1": "v-0f499dff33", "batch/batch_size=4": "v-8a39383628",
                   "batch/batch_size=8": "v-f578b09267", "bucketing/bucketing=True": "v-339a34327a"}


def spec_for(tmp_path, variant) -> PassSpec:
    return PassSpec(campaign="t", pass_id="p001-r1-x", variant=variant, corpus_path=str(tmp_path / "c.jsonl"),
                    model_ref=str(tmp_path / "model"), out_dir=str(tmp_path / "out"), threads=2,
                    extra={"pad_token": "[PAD]"})


def test_demo_variant_ids_are_the_ones_computed_before_the_change():
    got = {v.name: v.variant_id for v in load_protocol(DEMO_CAMPAIGN).variants}
    assert got == DEMO_IDS_BEFORE
    assert got["batch/batch_size=8"] == "v-f578b09267"
    # batch 8 unbucketed belongs to both demo series and runs once
    assert [v.series for v in load_protocol(DEMO_CAMPAIGN).variants][2] == "batch+bucketing"


def test_expand_series_takes_the_typed_sections():
    cfg = parse_config(tomllib.loads(DEMO_CAMPAIGN.read_text()))
    assert isinstance(cfg.defaults, Variant)
    assert all(isinstance(s, SeriesSection) for s in cfg.series)
    assert not hasattr(SeriesSection, "to_table")  # no dict round trip left between config and variants
    vs = expand_series(cfg.defaults, cfg.series)
    assert {v.name: v.variant_id for v in vs} == DEMO_IDS_BEFORE
    # a fixed field of a series overrides [defaults]; the factor overrides both
    vs = expand_series(Variant(max_length=128, precision="bf16"),
                       [SeriesSection("s", "batch_size", (2, 4), (("max_length", 64),))])
    assert [(v.batch_size, v.max_length, v.precision, v.name) for v in vs] == [
        (2, 64, "bf16", "s/batch_size=2"), (4, 64, "bf16", "s/batch_size=4")]
    with pytest.raises(VariantError, match="needs name, factor"):
        expand_series(Variant(), [SeriesSection("s", "batchsize", (1,))])


def test_pass_spec_round_trip_keeps_a_variant(tmp_path):
    v = Variant(batch_size=8, bucketing=True, max_length=128, series="batch+bucketing", name="bucketing/bucketing=True")
    spec = spec_for(tmp_path, v)
    spec.write(tmp_path / "pass.json")
    on_disk = json.loads((tmp_path / "pass.json").read_text())
    assert on_disk["variant"] == v.to_json()  # the record keeps its format: fields, id and label
    assert on_disk["variant"]["variant_id"] == v.variant_id and on_disk["variant"]["label"] == v.label
    back = PassSpec.read(tmp_path / "pass.json")
    assert isinstance(back.variant, Variant) and back.variant == v and back == spec
    assert Variant.from_json(v.to_json()) == v


def test_pass_spec_refuses_a_dict_variant(tmp_path):
    with pytest.raises(TypeError, match=r"must be a lab\.inputs\.variants\.Variant"):
        spec_for(tmp_path, Variant(batch_size=8).to_json())


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["variant"].update(batchsize=8),
     "variant: unknown variant field 'batchsize' (did you mean 'batch_size'?)"),
    (lambda d: d["variant"].update(batch_size=4),
     "variant: variant_id 'v-f578b09267' does not match its fields (v-8a39383628)"),
    (lambda d: d["variant"].update(batch_size="8"),
     "variant: variant field batch_size = '8' has the wrong type; expected an integer"),
    (lambda d: d.update(variant=[8]), "variant: a variant must be a JSON object"),
    (lambda d: d.update(warmup_item=4), "unknown key 'warmup_item' (did you mean 'warmup_items'?)"),
    (lambda d: d.pop("out_dir"), "missing key(s) out_dir"),
    (lambda d: d.update(threads="2"), "threads must be a JSON integer"),
])
def test_a_bad_pass_json_is_one_line_not_a_traceback(tmp_path, edit, message):
    spec_for(tmp_path, Variant(batch_size=8)).write(tmp_path / "pass.json")
    d = json.loads((tmp_path / "pass.json").read_text())
    edit(d)
    (tmp_path / "pass.json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match=re.escape(message)) as e:
        PassSpec.read(tmp_path / "pass.json")
    assert "\n" not in str(e.value)
    # the real runner process: exit 2 (EXIT_BAD_SPEC), the reason as an error event, no traceback
    r = subprocess.run([sys.executable, "-m", "lab.passes.runner", str(tmp_path / "pass.json")],
                       capture_output=True, text=True, cwd=REPO, timeout=60, check=False)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert any(e.get("event", e.get("type")) == "error" and message in e["message"] for e in events), r.stdout
    assert not (tmp_path / "out").exists()  # nothing ran


def test_variant_from_json_accepts_a_record_older_than_a_field():
    old = {k: x for k, x in Variant(batch_size=4).to_json().items() if k != "cards"}
    assert Variant.from_json(old) == Variant(batch_size=4)
    assert {f.name for f in fields(Variant)} >= {"cards", "batch_size"}


def test_variant_short_reads_a_variant_and_its_record_alike():
    from lab.inputs.variants import variant_short

    v = Variant(batch_size=8, series="batch", name="batch/batch_size=8")
    assert variant_short(v) == variant_short(v.to_json()) == "batch_size=8"
    unnamed = Variant(batch_size=4)
    assert variant_short(unnamed) == unnamed.label
    assert variant_short(None) == "?"
