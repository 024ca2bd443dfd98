"""A new user's slip of a value's type anywhere in the campaign file (an array where a string goes,
a table, a list holding a number) is refused when the file is read, in one line naming the key and
the type expected: never a Python traceback at lock, never a pass that fails later (the trial's
`kind = ["embedding"]` and `stop = [1]`). The cases are every field of every section, generated
from the sections' own declarations, so a key added later is covered too."""

from __future__ import annotations

import copy
import typing
from dataclasses import fields

import pytest
from conftest import cut_corpus, write_campaign

from lab.facts.typecheck import type_name
from lab.kinds import KINDS
from lab.orchestration.config import SECTIONS, ConfigError, parse_config, variant_hints

BASE = {
    "campaign": {"name": "t", "question": "Which configuration is cheapest?"},
    "corpus": {"path": "c.jsonl"},
    "model": {"path": "/m"},
    "quality": {"metric": "accuracy", "threshold": 0.5, "tolerance": 0.05, "reference_variant": "batch/batch_size=1"},
    "timing": {"warmup_items": 2, "warmup_passes": 1},
    "cost": {"gpu": "rtx-4090", "days": 7},
    "defaults": {},
    "series": [{"name": "batch", "factor": "batch_size", "values": [1, 8]}],
}
KIND_OF_KEY = {key: kind.name for kind in KINDS.values() for key in kind.keys}


def is_list(hint) -> bool:
    return typing.get_origin(hint) in (tuple, list)


def wrong_values(hint) -> list:
    """Values of the wrong type for a field declared ``hint``: a table always; an array for a
    scalar; for a list, one holding a number and one holding an array beside a string."""
    return [{"a": 1}, *([[1], ["ok", ["x"]]] if is_list(hint) else [["x"]])]


def cases():
    for section, cls in SECTIONS.items():
        hints = typing.get_type_hints(cls)
        for f in fields(cls):
            for value in wrong_values(hints[f.name]):
                yield pytest.param(section, f.name, value, f"[{section}] {f.name} = ", hints[f.name],
                                   id=f"{section}.{f.name}={value!r}")
    for key, hint in variant_hints().items():
        for value in wrong_values(hint):
            yield pytest.param("defaults", key, value, f"[defaults] {key} = ", hint, id=f"defaults.{key}={value!r}")
            yield pytest.param("series", key, value, f"[[series]] 'batch' {key} = ", hint,
                               id=f"series.{key}={value!r}")
    yield pytest.param("series", "values", [["x"]], "[[series]] 'batch' values item = ", int, id="series.values item")


def campaign_with(section: str, key: str, value) -> dict:
    raw = copy.deepcopy(BASE)
    if section == "series":
        if key == "batch_size":  # the base series' factor: vary another one
            raw["series"][0].update(factor="max_length", values=[128])
        raw["series"][0][key] = value
    elif section == "task":  # set under the kind that reads the key (another kind refuses it as unknown)
        raw["task"] = {"kind": KIND_OF_KEY.get(key, "classification"), key: value}
    else:
        raw.setdefault(section, {})[key] = value
    return raw


@pytest.mark.parametrize("section, key, value, where, hint", list(cases()))
def test_a_value_of_the_wrong_type_is_one_line_naming_the_key_and_the_type(section, key, value, where, hint):
    with pytest.raises(ConfigError) as e:
        parse_config(campaign_with(section, key, value))
    message = str(e.value)
    assert message.startswith(where) and message.endswith(f"has the wrong type; expected {type_name(hint)}"), message
    assert "\n" not in message


def test_the_trial_kind_as_an_array_is_refused_like_a_number(tmp_path, capsys):
    """`kind = ["embedding"]` at `iteralab protocol lock`: one line, exit 2, as `kind = 3` is."""
    from lab.cli import main

    f = write_campaign(tmp_path, tmp_path / "no-model-needed", cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    text = f.read_text()
    lines = []
    for value in ('["embedding"]', "{a = 1}", "3"):
        f.write_text(f"{text}\n[task]\nkind = {value}\n")
        assert main(["protocol", "lock", str(f)]) == 2
        lines += capsys.readouterr().err.splitlines()
    assert lines == [f"iteralab: error: {f.resolve()}: [task] kind = {shown} has the wrong type; expected a string"
                     for shown in ('["embedding"]', '{"a": 1}', "3")]


def test_a_list_names_the_type_of_its_elements():
    assert type_name(tuple[str, ...]) == "a list of strings" and type_name(list[int]) == "a list of integers"
