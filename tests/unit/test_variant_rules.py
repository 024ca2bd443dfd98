"""Variant rules that hold for every field, not one named field (issue 9, trial of
docs/architecture.md "Where to add -> A variant field"): a field added later keeps existing ids
while at its default, and every field's type is checked from its annotation, however the
Variant is built (constructor, from_json, pass.json read by the real runner process)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, fields, replace

import pytest
from conftest import REPO
from test_typed_variant import DEMO_IDS_BEFORE, spec_for

from lab.inputs.variants import ID_FIELDS, Variant, VariantError, server_config_label
from lab.orchestration.protocol import DEMO_CAMPAIGN, load_protocol
from lab.passes.spec import PassSpec

# The fields of Variant when ids were first defined (lab/inputs/variants.py at 8867912, "Engine core").
ORIGINAL_FIELDS = ("batch_size", "precision", "padding", "max_length", "bucketing", "device", "compile",
                   "attention", "quantization")


@dataclass(frozen=True)
class VariantWithNote(Variant):
    """What following the recipe literally gives: a new field, with a default, added to Variant."""

    note: str = ""


def test_a_default_variant_id_covers_exactly_the_original_fields():
    assert ID_FIELDS == ORIGINAL_FIELDS
    assert tuple(Variant().config()) == ORIGINAL_FIELDS
    assert tuple(Variant(batch_size=8, bucketing=True, series="s", name="s/x").config()) == ORIGINAL_FIELDS


def test_a_field_added_later_keeps_every_id_at_its_default_and_changes_it_away_from_it():
    demo = load_protocol(DEMO_CAMPAIGN).variants
    for v in demo:
        with_note = VariantWithNote(**{f.name: getattr(v, f.name) for f in fields(Variant)})
        assert with_note.variant_id == v.variant_id == DEMO_IDS_BEFORE[v.name]
        noted = replace(with_note, note="warm cache")
        assert noted.variant_id != v.variant_id
        assert noted.config()["note"] == "warm cache"
    # cards is the first such field: 1 (its default) leaves the id, 2 makes a new one
    assert Variant(batch_size=8, cards=1).variant_id == DEMO_IDS_BEFORE["batch/batch_size=8"]
    assert Variant(batch_size=8, cards=2).variant_id != DEMO_IDS_BEFORE["batch/batch_size=8"]
    # the type of the new field is checked too, from its annotation
    with pytest.raises(VariantError, match=r"variant field note = 3 has the wrong type; expected a string"):
        VariantWithNote(note=3)  # type: ignore[arg-type]


def test_an_original_field_at_its_default_still_enters_the_id():
    # the rule is not "drop whatever is at its default": that would have changed every id
    assert "attention" in Variant().config() and "compile" in Variant().config()


BAD_RECORDS = [
    ({"batch_size": True}, "variant field batch_size = True has the wrong type; expected an integer"),
    ({"bucketing": "yes"}, "variant field bucketing = 'yes' has the wrong type; expected true or false"),
    ({"device": 5}, "variant field device = 5 has the wrong type; expected a string"),
    ({"attention": None}, "variant field attention = None has the wrong type; expected a string"),
    ({"series": 3}, "variant field series = 3 has the wrong type; expected a string"),
    ({"max_length": 64.0}, "variant field max_length = 64.0 has the wrong type; expected an integer"),
    ({"compile": 0}, "variant field compile = 0 has the wrong type; expected true or false"),
    ({"cards": False}, "variant field cards = False has the wrong type; expected an integer"),
    ({"name": ["a"]}, "variant field name = ['a'] has the wrong type; expected a string"),
]


@pytest.mark.parametrize("edit, message", BAD_RECORDS)
def test_variant_from_json_refuses_a_wrong_type_in_one_line(edit, message):
    d = {k: x for k, x in Variant(batch_size=8).to_json().items() if k not in ("variant_id", "label")}
    with pytest.raises(VariantError) as e:
        Variant.from_json({**d, **edit})
    assert str(e.value) == message
    with pytest.raises(VariantError, match="wrong type"):
        Variant(**{**d, **edit})


@pytest.mark.parametrize("edit, message", BAD_RECORDS)
def test_the_runner_refuses_a_pass_json_with_a_wrong_type(tmp_path, edit, message):
    spec_for(tmp_path, Variant(batch_size=8)).write(tmp_path / "pass.json")
    d = json.loads((tmp_path / "pass.json").read_text())
    d["variant"].update(edit)
    (tmp_path / "pass.json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match="variant: " + message.replace("[", r"\[").replace("]", r"\]")):
        PassSpec.read(tmp_path / "pass.json")
    r = subprocess.run([sys.executable, "-m", "lab.passes.runner", str(tmp_path / "pass.json")],
                       capture_output=True, text=True, cwd=REPO, timeout=60, check=False)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    errors = [e for e in events if e.get("event", e.get("type")) == "error"]
    assert len(errors) == 1 and message in errors[0]["message"] and "\n" not in errors[0]["message"], r.stdout
    assert not (tmp_path / "out").exists()  # nothing ran


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_server_configuration_is_its_variants_label_without_the_rate(precision):
    """The serving Decision groups a rate series by this label: the same text for every rate of a
    configuration, the factors before the rate kept; the server's own settings named, batch size
    and padding not (the server batches and pads itself)."""
    served = Variant(batch_size=1, engine="vllm", request_rate=2.5, precision=precision, max_num_seqs=4)
    assert served.label == f"served, {precision}, max 256, vllm, max_num_seqs 4, 2.5 req/s"
    config = server_config_label(served.label, served.request_rate)
    assert config == f"served, {precision}, max 256, vllm, max_num_seqs 4"
    assert server_config_label(replace(served, request_rate=10.0).label, 10.0) == config
    other = replace(served, max_num_seqs=8)  # another configuration: another label
    assert server_config_label(other.label, other.request_rate) != config
    offline = replace(served, request_rate=None)
    assert server_config_label(offline.label, None) == offline.label == "batch 1, " + (
        f"{precision}, longest, max 256, vllm, max_num_seqs 4")


def test_every_vllm_option_set_is_in_the_label():
    v = Variant(engine="vllm", max_num_seqs=4, max_num_batched_tokens=1024, vllm_memory_fraction=0.5,
                prefix_caching=False)
    assert v.label == ("batch 1, fp32, longest, max 256, vllm, max_num_seqs 4, max_num_batched_tokens 1024, "
                       "memory 0.5, prefix caching off")
