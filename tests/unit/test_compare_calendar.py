"""compare's calendar and its "no decision" line, without archives: a deadline before the window
start asks for an earlier window start or a later deadline (never a later window start, which
only widens the inversion); the exclusions are counted per kind from each configuration's own
exclusion records (lab.report.exclusions.exclusion_counts)."""
from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

import pytest

from lab.compare.decision import calendar
from lab.compare.evidence import CompareError
from lab.compare.projection import Projection
from lab.report.exclusions import exclusion_counts, exclusion_kind


def test_a_deadline_before_the_window_start_asks_for_an_earlier_start_or_a_later_deadline():
    with pytest.raises(CompareError) as e:
        calendar("2026-12-07T09:00+01:00", "2026-12-09T09:00+01:00")
    msg = str(e.value)
    assert msg == ("deadline 2026-12-07T09:00:00+01:00 is not after the window start 2026-12-09T09:00:00+01:00; "
                   "give an earlier --window-start or a later --deadline")
    with pytest.raises(CompareError, match="give an earlier --window-start or a later --deadline"):
        calendar("2026-12-07T09:00+01:00", "2026-12-07T09:00+01:00")  # an empty window: the same fix


def test_without_a_window_start_the_line_says_the_window_starts_now():
    now = datetime(2026, 12, 8, 12, 30, 5, 123, tzinfo=timezone.utc)
    with pytest.raises(CompareError) as e:
        calendar("2026-12-07T09:00+01:00", None, now=now)
    assert str(e.value).startswith("deadline 2026-12-07T09:00:00+01:00 is not after now (2026-12-08T12:30:05+00:00; "
                                   "no --window-start given, the window starts now)")
    assert str(e.value).endswith("give an earlier --window-start or a later --deadline")


def test_the_calendar_counts_real_hours_and_no_deadline_is_none():
    start, dl, hours = calendar("2026-03-30T09:00+02:00", "2026-03-28T09:00+01:00")  # DST change in between
    assert (start.isoformat(), dl and dl.isoformat(), hours) == \
        ("2026-03-28T09:00:00+01:00", "2026-03-30T09:00:00+02:00", 47.0)
    now = datetime(2026, 12, 1, 8, 0, 0, 999, tzinfo=timezone.utc)
    assert calendar(None, None, now=now) == (now.replace(microsecond=0), None, None)


def _projection(*exclusions: str) -> Projection:
    fields = {f.name: None for f in dataclasses.fields(Projection) if f.default is dataclasses.MISSING
              and f.default_factory is dataclasses.MISSING}
    return Projection(**{**fields, "durations_s": (), "exclusions": exclusions})


def test_exclusions_are_counted_per_kind_from_the_records():
    rejected = "quality: rejected: nn_accuracy 0.3500 < threshold 0.5"
    six = [_projection(rejected) for _ in range(6)]
    assert exclusion_counts(six) == "6 of 6 excluded: quality 6"
    mixed = [_projection(rejected) for _ in range(4)] + \
        [_projection("price: no package declared in [cost]", "too short to project: 1 accepted pass(es) ...")] * 2 + \
        [_projection()]
    assert exclusion_counts(mixed) == "6 of 7 excluded: quality 4, price 2, too short to project 2"
    twice = _projection("calendar: even 8 lot(s) ...", "calendar: again")  # one configuration counts once per kind
    assert exclusion_counts([twice]) == "1 of 1 excluded: calendar 1"
    assert exclusion_counts([_projection()]) == "0 of 1 excluded"
    assert exclusion_kind(rejected) == "quality"
