"""[scenario] (issue 36): a campaign without it is today's offline campaign, ids unchanged; a server
scenario declares its objective before timing and its rates as a variant factor; every way to
declare it wrongly is one line with the fix. Parsing only: no model is loaded."""

from __future__ import annotations

import re

import pytest

from lab.inputs.variants import Variant, VariantError
from lab.orchestration.protocol import DEMO_CAMPAIGN, ProtocolError, load_protocol

BASE = DEMO_CAMPAIGN.read_text()
GENERATION = ('\n[task]\nkind = "generation"\nprompt = "{text}\\nNewsgroup:"\nmax_text_tokens = 64\n'
              'max_new_tokens = 16\nstop = ["\\n"]\n')
SERVED = '[[series]]\nname = "served"\nfactor = "request_rate"\nvalues = [1, 2.5, 4]\nengine = "vllm"\n\n'
SERVER = '\n[scenario]\nkind = "server"\nttft_s = 1.0\ntpot_s = 0.25\n'


def server_campaign(tmp_path, scenario=SERVER, task=GENERATION, series=SERVED, reference="batch/batch_size=1",
                    metric="exact_match"):
    text = BASE.replace("[[series]]", series + "[[series]]", 1)
    text = text.replace('reference_variant = "batch/batch_size=1"', f'reference_variant = "{reference}"')
    if task:
        text = text.replace('metric = "accuracy"', f'metric = "{metric}"')
    f = tmp_path / "c.toml"
    f.write_text(text + task + scenario)
    return f


def test_no_scenario_is_the_offline_campaign_with_its_ids():
    proto = load_protocol(DEMO_CAMPAIGN)
    assert proto.config.scenario.kind == "offline" and proto.config.scenario.extra() == {}
    assert all(v.request_rate is None for v in proto.variants)
    # a field added after the ids were defined enters an id only when set (lab.inputs.variants)
    assert Variant(batch_size=8).variant_id == Variant(batch_size=8, request_rate=None).variant_id


def test_a_server_scenario_makes_one_server_variant_per_rate_and_locks_its_objective(tmp_path):
    proto = load_protocol(server_campaign(tmp_path))
    served = [v for v in proto.variants if v.request_rate is not None]
    assert [v.request_rate for v in served] == [1.0, 2.5, 4.0] and all(v.engine == "vllm" for v in served)
    assert served[0].label.endswith("vllm, 1 req/s")
    sc = proto.config.scenario
    assert sc.bounds() == [("ttft", 99.0, 1.0), ("tpot", 99.0, 0.25)] and sc.share == 0.9
    assert sc.extra() == {"scenario": {**sc.extra()["scenario"], "kind": "server", "ttft_s": 1.0}}
    assert proto.reference.request_rate is None  # the offline reference the served outputs are judged by


def test_a_classification_or_embedding_server_bounds_its_end_to_end_latency(tmp_path):
    """A pooled answer comes whole: its objective is an end-to-end latency bound, and the kind names
    the endpoint the server pass loads (lab.kinds: served_endpoint)."""
    from lab.kinds import task_kind

    for kind, endpoint in (("classification", "/classify"), ("embedding", "/v1/embeddings")):
        d = tmp_path / kind
        d.mkdir()
        proto = load_protocol(server_campaign(d, task=f'\n[task]\nkind = "{kind}"\n' if kind != "classification"
                                              else "", scenario='\n[scenario]\nkind = "server"\ne2el_s = 0.5\n',
                                              metric="nn_accuracy"))
        assert proto.config.scenario.bounds() == [("e2el", 99.0, 0.5)]
        assert task_kind(kind).served_endpoint == endpoint and not task_kind(kind).streams
    assert task_kind("generation").streams and task_kind("custom").served_endpoint is None


def test_the_demo_serving_campaign_loads_with_its_objective_and_an_offline_reference():
    proto = load_protocol(DEMO_CAMPAIGN.parents[2] / "demo" / "campaign-serving.toml")
    assert sorted(v.request_rate for v in proto.variants if v.request_rate is not None) == [4.0, 8.0, 16.0]
    assert proto.reference.request_rate is None and proto.reference.batch_size == 8
    sc = proto.config.scenario
    assert sc.server and sc.bounds() == [("ttft", 99.0, 0.5), ("tpot", 99.0, 0.1)] and sc.peak_rate == 50 and sc.search
    assert proto.config.timing.repetitions == 5


def test_an_integer_rate_and_its_float_are_one_variant():
    assert Variant(engine="vllm", request_rate=2).variant_id == Variant(engine="vllm", request_rate=2.0).variant_id
    assert Variant(engine="vllm", request_rate=2).request_rate == 2.0


@pytest.mark.parametrize("edit, words", [
    (dict(scenario='\n[scenario]\nkind = "server"\n'), "a server scenario needs a latency objective"),
    (dict(scenario='\n[scenario]\nkind = "serve"\nttft_s = 1.0\n'), "[scenario] kind 'serve' unknown; use "
                                                                      "'offline' or 'server'"),
    (dict(scenario='\n[scenario]\nttft_s = 1.0\n'), "[scenario] ttft_s applies to kind = \"server\" only"),
    (dict(scenario=SERVER + "share = 1.5\n"), "[scenario] share 1.5 must be in (0, 1]"),
    (dict(scenario=SERVER + "ttft_percentile = 100\n"), "[scenario] ttft_percentile 100.0 must be in (0, 100)"),
    (dict(scenario=SERVER + "max_concurrency = 0\n"), "[scenario] max_concurrency 0 must be >= 1"),
    (dict(scenario=SERVER + "ttft_bound = 1\n"), "[scenario] unknown key 'ttft_bound'"),
    (dict(scenario=SERVER + "peak_rate = 2\naverage_rate = 5\n"), "[scenario] average_rate 5 is above peak_rate 2"),
    (dict(scenario=SERVER + "peak_rate = 0\n"), "[scenario] peak_rate 0 must be requests per second > 0"),
    (dict(scenario=""), "variant served/request_rate=1 declares request_rate, a server pass's factor; declare "
                        "[scenario] kind = \"server\""),
    (dict(task=""), "[scenario] ttft_s bounds a streamed answer, and a classification answer comes whole: bound "
                    "its end-to-end latency with e2el_s instead"),
    (dict(task='\n[task]\nkind = "embedding"\n', scenario=SERVER.replace("ttft_s = 1.0\n", ""), metric="nn_accuracy"),
     "[scenario] tpot_s bounds a streamed answer, and a embedding answer comes whole"),
    (dict(task='\n[task]\nkind = "custom"\nentry = "x.py:run"\n', metric="accuracy"),
     "[scenario] kind = \"server\" does not serve custom tasks (the user's own code is not a server)"),
    (dict(series=""), "no variant declares request_rate"),
    (dict(reference="served/request_rate=1"), "reference_variant 'served/request_rate=1' is a server pass"),
    (dict(series=SERVED.replace('engine = "vllm"\n', "")), "request_rate is a server pass's factor and the "
                                                            "server is vLLM's, but engine = 'transformers'"),
    (dict(series=SERVED.replace("[1, 2.5, 4]", "[0]")), "request_rate 0 must be a finite number > 0"),
    (dict(series=SERVED.replace('engine = "vllm"', 'engine = "vllm"\nbatch_size = 8')),
     "batch_size = 8 with request_rate: a server pass sends one request per item"),
])
def test_a_wrong_scenario_is_one_line_with_the_fix(tmp_path, edit, words):
    with pytest.raises(ProtocolError) as e:
        load_protocol(server_campaign(tmp_path, **edit))
    message = str(e.value)
    assert "\n" not in message and words in message, message


def test_a_rate_is_refused_before_the_variant_exists():
    with pytest.raises(VariantError, match=re.escape("request_rate -1.0 must be a finite number > 0")):
        Variant(engine="vllm", request_rate=-1.0)


def test_compare_refuses_server_archives_beside_offline_ones_and_another_objective(tmp_path):
    """A server campaign's archive compares only with archives of the same server campaign: beside an
    offline one it is refused in one line naming both; another latency objective is a difference of
    the scenario rule, named like the other rules'."""
    from types import SimpleNamespace

    from lab.compare.comparability import _differ, refuse_mixed_scenarios, scenario_rule
    from lab.compare.evidence import CompareError

    offline = SimpleNamespace(name="offline-a", config=load_protocol(DEMO_CAMPAIGN).config)
    served = SimpleNamespace(name="served-b", config=load_protocol(server_campaign(tmp_path)).config)
    refuse_mixed_scenarios([offline, offline])  # nothing to say
    refuse_mixed_scenarios([served, served])
    with pytest.raises(CompareError) as e:
        refuse_mixed_scenarios([offline, served])
    assert "\n" not in str(e.value)
    assert str(e.value).startswith("not comparable: served-b is a server campaign ([scenario] kind = \"server\"), "
                                   "offline-a is an offline one")
    stricter = tmp_path / "stricter"
    stricter.mkdir()
    f = server_campaign(stricter)
    f.write_text(f.read_text().replace("ttft_s = 1.0", "ttft_s = 0.5"))
    other = SimpleNamespace(name="served-c", config=load_protocol(f).config)
    assert scenario_rule(offline) == '{"kind": "offline"}'
    clause = _differ("scenario rule", served, scenario_rule(served), other, scenario_rule(other))
    assert clause == "[scenario] ttft_s differs: served-b has 1.0, served-c has 0.5", clause


def test_a_rate_whose_pass_lasts_hours_is_named_at_lock(tmp_path):
    """A new user's trial: values = [0.001, 2, 4] locked with no word that 0.001 req/s makes each
    pass's arrivals last 16 hours (lab.orchestration.preflight.check_server_rates: a warning)."""
    from lab.orchestration.preflight import check_server_rates

    series = SERVED.replace("values = [1, 2.5, 4]", "values = [0.001, 4]")
    slow = load_protocol(server_campaign(tmp_path, series=series))
    [check] = check_server_rates(slow, items=59)
    reps = slow.config.timing.repetitions
    assert check.ok is None and check.detail.startswith(
        f"warning: at 0.001 req/s a pass's 59 requests arrive over 16.4 h ({reps} repetition(s): "
        f"{reps * 59 / 0.001 / 3600:.1f} h)")
    assert "4 req/s" not in check.detail  # 59 requests at 4 req/s: 15 s
    assert check_server_rates(load_protocol(server_campaign(tmp_path)), items=59) == []
    assert check_server_rates(load_protocol(DEMO_CAMPAIGN), items=59) == []  # offline: no rate
