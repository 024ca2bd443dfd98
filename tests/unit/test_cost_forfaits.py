"""The pricing rule (seed: "Calcolare il costo impegnato") through the library API."""
from __future__ import annotations

import json
from decimal import Decimal

import pytest

from lab.cost import forfaits as f

HEADER = "gpu,gpu_name,cards_per_lot,days,price_per_lot,currency,catalog_version\n"
RTX = "rtx-4090,NVIDIA GeForce RTX 4090,1,7,110.00,USD,2026-09-24\n"
B200 = "b200,NVIDIA B200,2,7,2071.00,USD,2026-09-24\n"


@pytest.fixture()
def catalog():
    return f.load_catalog()


def write(tmp_path, text):
    path = tmp_path / "cat.csv"
    path.write_text(text)
    return str(path)


def test_shipped_catalog_holds_only_the_seed_rows(catalog):
    assert [(r.gpu, r.cards_per_lot, r.days, r.price_per_lot, r.currency, r.catalog_version)
            for r in catalog.rows] == [
        ("rtx-4090", 1, 7, Decimal("110.00"), "USD", "2026-09-24"),
        ("b200", 2, 7, Decimal("2071.00"), "USD", "2026-09-24")]


def test_two_rtx_4090_lots_for_7_days_cost_220_usd_for_two_gpus(catalog):
    q = f.quote(catalog, "rtx-4090", 7, 2)
    assert (q.committed_budget, q.total_cards, q.price_per_lot, q.lots) == \
        (Decimal("220.00"), 2, Decimal("110.00"), 2)
    assert f.money(q.committed_budget, q.currency) == "220.00 USD"
    assert q.cost_per_validated_corpus is None and q.accepted_results is None


def test_one_b200_lot_holds_two_cards_counted_once(catalog):
    q = f.quote(catalog, "B200", "7", "1")
    assert (q.committed_budget, q.cards_per_lot, q.total_cards) == (Decimal("2071.00"), 2, 2)
    assert f.quote(catalog, "b200", 7, 3).total_cards == 6


def test_cost_per_validated_corpus_divides_the_whole_budget(catalog):
    q = f.quote(catalog, "rtx-4090", 7, 2, accepted_results=3)
    assert f.money(q.cost_per_validated_corpus, "USD") == "73.33 USD"
    assert f.quote(catalog, "b200", 7, 1, accepted_results=1).cost_per_validated_corpus == \
        Decimal("2071.00")


def test_cost_per_corpus_is_undefined_not_zero_at_zero_accepted():
    assert f.cost_per_validated_corpus(Decimal("220.00"), 0) is None
    assert f.cost_per_validated_corpus(Decimal("220.00"), 2) == Decimal("110.00")
    with pytest.raises(f.PricingError):
        f.cost_per_validated_corpus(Decimal("220.00"), -1)


def test_missing_package_is_not_in_catalog_never_a_price(catalog):
    assert catalog.row("rtx-4090", 3) is None and catalog.row("b200", 30) is None
    with pytest.raises(f.PricingError, match="not in catalog"):
        f.quote(catalog, "rtx-4090", 3, 1)
    assert f.money(None, "USD") == "not in catalog"


@pytest.mark.parametrize("gpu,days,lots,accepted,pattern", [
    ("h100", 7, 1, None, r"unknown GPU 'h100': known GPUs are b200, rtx-4090"),
    ("b200", 5, 1, None, r"days 5 not offered"),
    ("b200", 7, 0, None, r"--lots must be an integer >= 1"),
    ("b200", 7, "1.5", None, r"--lots must be an integer >= 1"),
    ("b200", 7, 1, 0, r"--accepted-results must be an integer >= 1"),
    ("b200", 7, 1, "2.0", r"--accepted-results must be an integer >= 1"),
])
def test_bad_quote_inputs_raise_one_line(catalog, gpu, days, lots, accepted, pattern):
    with pytest.raises(f.PricingError, match=pattern) as err:
        f.quote(catalog, gpu, days, lots, accepted)
    assert "\n" not in str(err.value)


def test_monday_to_friday_is_96_hours_beyond_3_days_within_7():
    w = f.parse_window("2026-09-28T09:00+02:00", "2026-10-02T09:00+02:00")
    assert w.window_hours == 96
    three, seven, thirty = (f.coverage(w, d) for d in (3, 7, 30))
    assert (three.covers, three.periods_needed, three.extra_periods) == (False, 2, 1)
    assert (seven.covers, seven.extra_periods) == (True, 0)
    assert thirty.covers and three.extra_cost is None  # no price given: never invented


def test_dst_week_in_rome_is_169_real_hours_so_7_days_do_not_cover_it():
    # Clocks go back on Sunday 25 October 2026 in Europe/Rome: the week has 169 h.
    w = f.parse_window("2026-10-23T09:00", "2026-10-30T09:00", tz="Europe/Rome")
    assert w.window_seconds == 169 * 3600
    c = f.coverage(w, 7, Decimal("110.00"), lots=2)
    assert (c.covers, c.periods_needed, c.extra_periods, c.extra_cost) == \
        (False, 2, 1, Decimal("220.00"))
    # The same instants written with offsets give the same real elapsed time.
    w2 = f.parse_window("2026-10-23T09:00+02:00", "2026-10-30T09:00+01:00")
    assert w2.window_seconds == w.window_seconds


def test_spring_forward_week_in_rome_is_167_hours():
    w = f.parse_window("2026-03-27T09:00", "2026-04-03T09:00", tz="Europe/Rome")
    assert w.window_hours == 167 and f.coverage(w, 7).covers


def test_200_hour_window_needs_2_periods_of_7_days_one_stated_as_extra(catalog):
    w = f.parse_window("2026-09-28T09:00+02:00", "2026-10-06T17:00+02:00")
    assert w.window_hours == 200
    c = f.coverage(w, 7, catalog.row("b200", 7).price_per_lot, lots=1)
    assert (c.periods_needed, c.extra_periods, c.extra_cost) == (2, 1, Decimal("2071.00"))
    text = f.render_quote(f.quote(catalog, "b200", 7, 1), w)
    assert "needs 2 periods, i.e. 1 extra period(s) (2071.00 USD for 1 lot(s)), not included" in text
    assert "Total (committed budget): 2071.00 USD" in text  # no automatic extension


def test_window_exactly_one_package_is_covered():
    w = f.parse_window("2026-09-28T09:00+00:00", "2026-10-05T09:00+00:00")
    assert (f.coverage(w, 7).covers, f.coverage(w, 7).periods_needed) == (True, 1)


@pytest.mark.parametrize("start,end,tz,pattern", [
    ("2026-10-02T09:00+02:00", "2026-10-01T09:00+02:00", None, "is not after window start"),
    ("2026-10-02T09:00+02:00", "2026-10-02T09:00+02:00", None, "is not after window start"),
    ("2026-10-02T09:00", "2026-10-03T09:00", None, "has no time zone"),
    ("2026-10-02T09:00", "2026-10-03T09:00", "Mars/Olympus", "unknown time zone"),
    ("yesterday", "2026-10-03T09:00+00:00", None, "is not an ISO date-time"),
    ("2026-10-25T02:30", "2026-10-26T09:00", "Europe/Rome", "occurs twice"),
    ("2026-03-29T02:30", "2026-03-30T09:00", "Europe/Rome", "does not exist"),
])
def test_bad_windows_raise(start, end, tz, pattern):
    with pytest.raises(f.PricingError, match=pattern):
        f.parse_window(start, end, tz)


@pytest.mark.parametrize("body,pattern", [
    (RTX + "b200,NVIDIA B200,two,7,2071.00,USD,2026-09-24\n", r"line 3: malformed row: cards_per_lot"),
    (RTX + "b200,NVIDIA B200,2,7,abc,USD,2026-09-24\n", r"line 3: malformed row: price_per_lot"),
    (RTX + "b200,NVIDIA B200,2,7,-5,USD,2026-09-24\n", r"line 3: malformed row: price_per_lot"),
    (RTX + "b200,NVIDIA B200,2,7,2071.001,USD,2026-09-24\n", r"line 3: malformed row: price_per_lot"),
    (RTX + "b200,NVIDIA B200,2,14,2071.00,USD,2026-09-24\n", r"line 3: malformed row: days 14"),
    (RTX + "b200,NVIDIA B200,2,7,2071.00\n", r"line 3: malformed row: expected 7 cells"),
    (RTX + "b200,NVIDIA B200,2,7,2071.00,USD,2026-09-24,extra\n", r"line 3: malformed row"),
    (RTX + "b200,NVIDIA B200,2,7,2071.00,usd,2026-09-24\n", r"line 3: malformed row: currency"),
    (RTX + "b200,NVIDIA B200,2,7,2071.00,USD,24/09/2026\n", r"line 3: malformed row: catalog_version"),
    (RTX + B200 + RTX, r"line 4: duplicate row for rtx-4090 7 days \(first at line 2\)"),
    (RTX + "b200,NVIDIA B200,2,7,1900.00,EUR,2026-09-24\n", r"line 3: mixed currencies USD"),
    ("", r"no package rows"),
])
def test_bad_catalogs_raise_with_line_numbers(tmp_path, body, pattern):
    with pytest.raises(f.PricingError, match=pattern) as err:
        f.load_catalog(write(tmp_path, HEADER + body))
    assert "\n" not in str(err.value)


def test_catalog_without_a_required_column(tmp_path):
    with pytest.raises(f.PricingError, match=r"line 1: missing column\(s\) currency"):
        f.load_catalog(write(tmp_path, HEADER.replace(",currency", "") + "x,X,1,7,1.00,2026-09-24\n"))


def test_catalog_saved_by_a_spreadsheet_with_bom_or_latin1(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + (HEADER + RTX).encode())
    assert f.load_catalog(str(path)).rows[0].price_per_lot == Decimal("110.00")
    path.write_bytes((HEADER + "rtx-4090,GeForce \u00e9,1,7,110.00,USD,2026-09-24\n").encode("latin-1"))
    with pytest.raises(f.PricingError, match="not a UTF-8 CSV catalog"):
        f.load_catalog(str(path))


def test_a_fuller_catalog_is_used_as_given(tmp_path):
    path = write(tmp_path, HEADER + RTX + "rtx-4090,NVIDIA GeForce RTX 4090,1,3,55.50,USD,2026-09-24\n")
    q = f.quote(f.load_catalog(path), "rtx-4090", 3, 3)
    assert (q.committed_budget, q.package_hours) == (Decimal("166.50"), 72)


def test_main_returns_2_and_prints_one_line(capsys):
    assert f.main(["--gpu", "h100", "--days", "7"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "known GPUs are b200, rtx-4090" in err


def test_main_json_quote(capsys):
    assert f.main(["--gpu", "rtx-4090", "--days", "7", "--lots", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["quote"]["committed_budget"] == "220.00"
    assert data["quote"]["total_cards"] == 2
    assert "cost_per_validated_corpus" not in data["quote"]
