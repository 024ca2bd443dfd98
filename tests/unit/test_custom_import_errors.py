"""A user's entry that cannot be imported is named by its own file and line, never by Python's
importer frames (lab.passes.tasks.custom.last_traceback_line; fixmsg item 6)."""

from __future__ import annotations

import pytest

from lab.passes.tasks.custom import EntryNotLoadable, load_entry


@pytest.mark.parametrize("source, line, error", [
    ("import os\n\nclass Tiny(:\n    pass\n", 3, "SyntaxError"),
    ("x = 1\nraise RuntimeError('boom')\n", 2, "RuntimeError: boom"),
])
def test_an_entry_that_cannot_be_imported_names_the_users_file_and_line(tmp_path, source, line, error):
    f = tmp_path / "syntax_entry.py"
    f.write_text(source)
    with pytest.raises(EntryNotLoadable) as e:
        load_entry(f"{f}:Tiny")
    msg = str(e.value)
    assert f"syntax_entry.py, line {line}" in msg and error in msg, msg
    assert "frozen" not in msg and "\n" not in msg, msg
