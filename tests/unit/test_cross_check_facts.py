"""How lab.evidence.cross_check names a fact two members state differently (issue 34 part 1)."""

from __future__ import annotations

from lab.evidence.cross_check import differences, disagree, pass_spec
from lab.orchestration.identity import identity_sha256
from lab.orchestration.protocol import protocol_digest


def test_differences_name_each_leaf_as_a_campaign_file_does():
    a = {"cost": {"gpu": "b200", "days": 7}, "series": [{"values": [1, 4]}], "campaign": {"name": "x"}}
    b = {"cost": {"gpu": "rtx-4090", "days": 7}, "series": [{"values": [1, 8]}], "campaign": {"name": "x"}}
    assert differences(a, b) == [("[cost] gpu", "b200", "rtx-4090"), ("[series] 1 values 2", 4, 8)]
    assert differences(a, a) == []


def test_a_value_of_another_type_or_a_missing_key_is_a_difference():
    assert differences({"timing": {"seed": 1}}, {"timing": {"seed": 1.0}}) == [("[timing] seed", 1, 1.0)]
    assert differences({"quality": {"tolerance": 0.05}}, {"quality": {}}) == [("[quality] tolerance", 0.05, None)]
    assert differences({"x": True}, {"x": 1}) == [("[x]", True, 1)]


def test_the_line_names_the_fact_and_both_members():
    line = disagree("[cost] gpu", "b200", "campaign.toml", "rtx-4090", "campaign.lock.json (version 1)")
    assert line == ("[cost] gpu: 'b200' in campaign.toml, 'rtx-4090' in campaign.lock.json (version 1) "
                    "(the members disagree)")
    assert "absent in report/manifest.json" in disagree("seed", None, "report/manifest.json", 0, "campaign.toml")
    sha = "a" * 64
    assert sha in disagree("catalog sha256", sha, "report/manifest.json", "b" * 64, "report/catalog.csv")


def test_the_lock_copy_of_a_protocol_re_hashes_to_its_digest():
    import datetime
    import json

    raw = {"campaign": {"name": "é", "deadline": datetime.datetime(2026, 12, 1, 9, tzinfo=datetime.UTC)}}
    locked = json.loads(json.dumps(raw, default=str))  # as campaign.lock.json holds it
    assert protocol_digest(locked) == protocol_digest(raw)
    parts = {"protocol_sha256": "1" * 64, "corpus_sha256": "2" * 64, "model_sha256": "3" * 64}
    assert identity_sha256(parts) != identity_sha256({**parts, "task_sha256": "4" * 64})


def test_only_a_pass_folders_own_spec_is_a_pass_spec():
    assert pass_spec("passes/p001/pass.json")
    assert not pass_spec("passes/p001/cards/pass.json") and not pass_spec("report/pass.json")
