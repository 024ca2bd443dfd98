"""A mistyped verb, choice or option of the CLI gets one line with "did you mean ...?", as a
mistyped campaign-file key does (lab.cli.OneLineParser, lab.facts.errors.did_you_mean)."""

from __future__ import annotations

import pytest

from lab.cli import parser


def refusal(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exc:
        parser().parse_args(list(argv))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(("argv", "expected"), [
    (("campain", "run", "x.toml"),
     "iteralab: error: argument cmd: invalid choice: 'campain'; did you mean 'campaign'?"),
    (("campaign", "rn", "x.toml"),
     "iteralab campaign: error: argument verb: invalid choice: 'rn'; did you mean 'run'?"),
    (("compare", "a.tar.gz", "b.tar.gz", "--load", "1", "--catalgo", "c.toml"),
     "iteralab compare: error: unrecognized arguments: --catalgo (did you mean '--catalog'?) c.toml"),
])
def test_a_typo_is_answered_with_the_closest_name_of_that_command(capsys, argv, expected):
    err = refusal(capsys, *argv)
    assert err.startswith(expected), err
    assert err.rstrip().endswith("--help`)"), err


def test_nothing_close_names_the_choices_or_says_it_is_no_option(capsys):
    err = refusal(capsys, "zzz")
    assert "invalid choice: 'zzz'; choose from 'corpus', 'model'" in err, err
    err = refusal(capsys, "campaign", "status", "--qqqq", "x.toml")
    assert "unrecognized arguments: --qqqq (not an option here)" in err, err
    assert err.startswith("iteralab campaign status: error:"), err  # the verb's own parser, its help
