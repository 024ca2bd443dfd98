"""scripts/string_keys.py: what counts as a string-key read, and the ceiling `make lint` holds."""

import ast
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import string_keys  # noqa: E402


def test_subscripts_and_get_calls_by_a_string_literal_count_and_nothing_else():
    src = 'a["x"]; b.get("y", 1); c[0]; d.get(k); e["z"] = 1; f.get("w"); g[h]; "i".join([])'
    assert string_keys.reads(ast.parse(src)) == 3  # a["x"], b.get("y"), f.get("w"); a store is no read


def test_the_ceiling_holds_and_a_planted_read_breaks_it(tmp_path, monkeypatch, capsys):
    assert string_keys.main([]) == 0, capsys.readouterr().err
    monkeypatch.setattr(string_keys, "CEILING", sum(string_keys.count().values()) - 1)
    assert string_keys.main([]) == 1
    assert "above the ceiling" in capsys.readouterr().err
