"""The draw of `corpus build` with and without labels (issue 35: `--no-labels --items 48` drew other
texts than the labelled draw of the same source). stratified_split alone: token counts given."""

from __future__ import annotations

from lab.inputs.corpus import BuildSpec, Item, stratified_split


def source(n: int = 60) -> tuple[list[Item], list[int]]:
    """n items over three labels and the three buckets (token counts 10, 100, 300 in turn)."""
    items = [Item(f"id{i}", f"text {i}", ("alpha", "beta", "gamma")[i % 3 if i % 7 else 0]) for i in range(n)]
    return items, [(10, 100, 300)[i % 3 if i % 5 else 1] for i in range(n)]


def unlabelled(items: list[Item]) -> tuple[list[Item], dict[str, str]]:
    """The items as load_items reads them with --no-labels: no label, the source's set aside."""
    return [Item(it.id, it.text, None) for it in items], {it.id: it.label for it in items if it.label}


def ids_texts(rows: list[dict]) -> list[tuple[str, str, str]]:
    return [(r["id"], r["text"], r["bucket"]) for r in rows]


def test_the_labels_set_aside_stratify_the_draw_as_the_labelled_build():
    items, n = source()
    spec = BuildSpec(items=24, tuning_size=6, seed=7)
    labelled = stratified_split(items, n, spec)
    bare, strata = unlabelled(items)
    without = stratified_split(bare, n, spec, strata)
    assert [ids_texts(x) for x in without] == [ids_texts(x) for x in labelled]
    assert all(r["label"] is None for part in without for r in part)
    assert stratified_split(bare, n, spec) != without  # by bucket alone it is another draw: the bug


def test_items_without_a_label_among_labelled_ones_are_a_stratum_of_their_own():
    items, n = source()
    bare, strata = unlabelled(items)
    del strata["id1"], strata["id2"]  # the source left these two unlabelled
    comparison, tuning = stratified_split(bare, n, BuildSpec(items=30, tuning_size=10, seed=3), strata)
    assert len(comparison) == 30 and len(tuning) == 10
    assert not {r["id"] for r in comparison} & {r["id"] for r in tuning}
