"""Two wordings of the decision note: the agreement rule's share reads as a share for every kind
(lab.kinds.kind.differing_share: an embedding's default 0 was "at most 0 of the ids", a count), and
a campaign run by the user's own code ([task] entry) says so where it says what ran."""
from __future__ import annotations

from lab.kinds import task_kind
from lab.kinds.kind import differing_share
from lab.report.decision_note import agreement_rule_lines, decision_note, what_ran
from tests.unit.test_decision_note import CAMPAIGN, PRICING
from tests.unit.test_decision_note import variant as summary_of


def checked(share: float, cosine: float | None = None):
    return summary_of("v1", "batch 8", agreement_passes_checked=5, agreement_passes_beyond=0,
                      agreement_max_differing=share, agreement_min_cosine=cosine, agreement_ids=17,
                      agreement_differing_most=0)


def test_every_kind_words_its_share_of_differing_ids_the_same_way():
    assert differing_share(0.05) == "a share of at most 0.05 (5 %)"
    assert differing_share(0.0) == "a share of at most 0 (0 %)"
    embedding = task_kind("embedding").agreement_max_differing
    generation = task_kind("generation").agreement_max_differing
    [emb] = agreement_rule_lines([checked(embedding, 0.99)])
    [gen] = agreement_rule_lines([checked(generation)])
    assert f"{differing_share(embedding)} of the ids may differ from it (a vector differs below cosine 0.99)" in emb
    assert f"{differing_share(generation)} of the ids may differ from it," in gen
    assert "at most 0 of the ids" not in emb
    assert checked(embedding, 0.99).agreement_rule_text().startswith(
        "agreement rule (a share of at most 0 (0 %) of the ids differ from the reference pass; an id differs "
        "below cosine 0.99)")


def test_a_note_says_when_the_outputs_came_from_the_users_own_code():
    own = what_ran(task_kind("embedding", entry=True), "examples/my_embedder.py:Embedder")
    assert own.startswith("an embedding task run by your own code ([task] entry examples/my\\_embedder.py:"
                          "Embedder): the outputs judged, timed and priced below are that code's")
    custom = what_ran(task_kind("custom", entry=True), "e.py:E")
    assert custom.startswith("a custom task run by your own code ([task] entry e.py:E)")
    builtin = what_ran(task_kind("classification"), None)
    assert builtin == "a classification task run by the lab's own job on the [model] checkpoint."
    note = decision_note([summary_of("v1", "batch 8")], {**CAMPAIGN, "ran": own}, PRICING)
    lines = note.splitlines()
    ran = next(i for i, x in enumerate(lines) if x.startswith("- **What ran.** An embedding task run by your own"))
    assert lines[ran - 1].startswith("- **Question.**")  # said with the question, before the pricing rule
    assert "- **What ran.**" not in decision_note([summary_of("v1", "batch 8")], CAMPAIGN, PRICING)
