import pytest

from lab.inputs.variants import Variant, VariantError, expand_series
from lab.orchestration.config import SeriesSection
from lab.orchestration.schedule import rotated_schedule


def test_rotation_148_481_814():
    vs = expand_series(Variant(precision="fp32"), [SeriesSection("batch", "batch_size", (1, 4, 8))])
    sched = rotated_schedule(vs, 5)
    orders = [[p.variant.batch_size for p in sched if p.repetition == r] for r in range(1, 6)]
    assert orders == [[1, 4, 8], [4, 8, 1], [8, 1, 4], [1, 4, 8], [4, 8, 1]]
    assert len({p.pass_id for p in sched}) == 15
    firsts = {o[0] for o in orders}
    assert firsts == {1, 4, 8}


def test_variant_id_is_content_derived():
    a = Variant(batch_size=4)
    b = Variant(batch_size=4, series="other", name="x")
    assert a.variant_id == b.variant_id
    assert a.variant_id != Variant(batch_size=4, bucketing=True).variant_id


def test_series_vary_one_factor_and_dedupe():
    vs = expand_series(Variant(), [SeriesSection("batch", "batch_size", (1, 8)),
                                   SeriesSection("bucket", "bucketing", (False, True), (("batch_size", 8),))])
    assert [v.name for v in vs] == ["batch/batch_size=1", "batch/batch_size=8", "bucket/bucketing=True"]
    # batch 8 unbucketed is the bucketing series' baseline too: it runs once, in both series
    assert [v.series for v in vs] == ["batch", "batch+bucket", "bucket"]
    with pytest.raises(VariantError, match="cannot hold '\\+'"):
        expand_series(Variant(), [SeriesSection("a+b", "batch_size", (1,))])
    with pytest.raises(VariantError, match="factor 'batch_size' is also fixed"):
        expand_series(Variant(), [SeriesSection("s", "batch_size", (1,), (("batch_size", 2),))])
    with pytest.raises(VariantError, match="precision 'int4' unknown"):
        Variant(precision="int4")


def test_a_value_a_series_lists_twice_is_refused_never_dropped():
    """Two values of one series making one variant (a repeat, or 2 and 2.0 for a rate) would run
    once while the campaign file says twice: refused, naming the values."""
    with pytest.raises(VariantError, match=r"^series 'batch': values lists 4 twice; remove the repeat$"):
        expand_series(Variant(), [SeriesSection("batch", "batch_size", (1, 4, 4))])
    rates = SeriesSection("rate", "request_rate", (2, 2.0, 4))
    with pytest.raises(VariantError, match=r"^series 'rate': values 2 and 2.0 make one variant; remove the repeat$"):
        expand_series(Variant(engine="vllm", batch_size=1), [rates])


def test_compile_variant_runs_on_one_card_only():
    assert Variant(compile=True).label.endswith(", compiled")
    with pytest.raises(VariantError, match="compile = true runs on one card only"):
        Variant(compile=True, cards=2)  # lab.passes.multicard's workers do not compile
    with pytest.raises(VariantError, match="variant field compile = 'yes' has the wrong type; expected true or false"):
        Variant(compile="yes")
