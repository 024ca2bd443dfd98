"""The evidence archive's format version (lab.evidence.format.ARCHIVE_FORMAT): written into
ARCHIVE.json by the packer, and checked first, by one function (check_format), by every reader:
an archive of no format or another one is refused in one line saying what it is and how to fix
it, before any other check. The format is never a trust signal: an archive that claims it is
still checked member by member (tests/integration/test_archive_evidence.py)."""

from __future__ import annotations

import ast
import json
import tarfile

import pytest
from conftest import engine_trees, read_members, write_members

from lab.evidence.format import (
    ARCHIVE_FORMAT,
    ARCHIVE_INFO,
    FORMAT_KEY,
    ArchiveFormatError,
    check_format,
)

WRITER_AND_CHECK = {"lab/evidence/format.py", "lab/evidence/archive.py"}


def info(**over) -> bytes:
    return json.dumps({FORMAT_KEY: ARCHIVE_FORMAT, "partial": False, **over}).encode()


def refusal(blob: bytes | None) -> str:
    with pytest.raises(ArchiveFormatError) as exc:
        check_format("rental-a.tar.gz", blob)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("rental-a.tar.gz: evidence archive format "), msg
    assert f"this lab reads format {ARCHIVE_FORMAT}" in msg and " archive CAMPAIGN_FOLDER` using this lab" in msg, msg
    assert "the lab version that made it" in msg, msg
    return msg


def test_the_current_format_is_read_as_the_archive_info():
    assert check_format("a.tar.gz", info(partial=True)) == {FORMAT_KEY: ARCHIVE_FORMAT, "partial": True}


def test_an_archive_made_before_formats_were_recorded_is_refused_in_one_line():
    no_format = json.dumps({"partial": False, "lab_sources_sha256": "0" * 64}).encode()
    assert "format none: made before formats were recorded, this lab reads" in refusal(no_format)


@pytest.mark.parametrize(("value", "shown"), [
    (ARCHIVE_FORMAT + 1, f"format {ARCHIVE_FORMAT + 1},"),
    (0, "format 0,"),
    (str(ARCHIVE_FORMAT), f'format "{ARCHIVE_FORMAT}",'),  # a string is not the integer
    (True, "format true,"),  # nor is a boolean, though True == 1
    (float(ARCHIVE_FORMAT), f"format {float(ARCHIVE_FORMAT)},"),
])
def test_another_format_is_refused_naming_it(value, shown):
    assert shown in refusal(info(**{FORMAT_KEY: value}))


@pytest.mark.parametrize(("blob", "shown"), [
    (None, f"format unknown (no {ARCHIVE_INFO})"),
    (b"[]", f"format unknown ({ARCHIVE_INFO} is not a JSON object)"),
    (b"{not json", f"format unknown ({ARCHIVE_INFO} is not a JSON object)"),
    (b"\xff\xfe", f"format unknown ({ARCHIVE_INFO} is not a JSON object)"),
])
def test_no_readable_archive_info_is_refused_as_of_unknown_format(blob, shown):
    assert shown in refusal(blob)


def test_a_hostile_format_value_stays_one_short_line():
    msg = refusal(info(**{FORMAT_KEY: "x\n" * 500}))
    assert len(msg) < 400, len(msg)


def packed(tmp_path, edit=None):
    """A real archive of a folder with one file (lab.evidence.archive.pack), its ARCHIVE.json
    rewritten by ``edit`` (SHA256SUMS left as packed)."""
    from lab.evidence.archive import pack

    folder = tmp_path / "camp"
    folder.mkdir()
    (folder / "campaign.toml").write_text("[campaign]\nname = 'x'\n")
    path = pack(folder, tmp_path / "camp-a.tar.gz", ["campaign.toml"])
    if edit is None:
        return path
    files = read_members(path)
    name = next(n for n in files if n.endswith("/" + ARCHIVE_INFO))
    files[name] = edit(files[name])
    return write_members(tmp_path / "edited.tar.gz", files, resum=False)


def test_the_packer_writes_the_format_this_lab_reads(tmp_path):
    with tarfile.open(packed(tmp_path)) as t:
        doc = json.loads(t.extractfile(next(m for m in t.getmembers() if m.name.endswith(ARCHIVE_INFO))).read())
    assert doc[FORMAT_KEY] == ARCHIVE_FORMAT and check_format("x", json.dumps(doc).encode()) == doc


@pytest.mark.parametrize("edit", [
    lambda b: json.dumps({k: v for k, v in json.loads(b).items() if k != FORMAT_KEY}).encode(),
    lambda b: json.dumps({**json.loads(b), FORMAT_KEY: ARCHIVE_FORMAT + 1}).encode(),
], ids=["no format", "another format"])
def test_verify_checks_the_format_before_anything_else(tmp_path, edit):
    """An archive of the current format but no report verifies into problem lines; the same
    archive of no format or another one is refused by the format line alone."""
    from lab.evidence.archive import verify

    v = verify(packed(tmp_path))
    assert v.problems and any("raw_table.csv missing" in p for p in v.problems), v.problems
    (tmp_path / "b").mkdir()
    with pytest.raises(ArchiveFormatError) as exc:
        verify(packed(tmp_path / "b", edit))
    assert str(exc.value).startswith("edited.tar.gz: evidence archive format "), exc.value


def test_only_the_packer_and_the_check_name_the_format():
    """Every reader goes through check_format (no second reading of ARCHIVE.json's format)."""
    found = [f"{rel}:{node.lineno}" for rel, _text, tree in engine_trees() if rel not in WRITER_AND_CHECK
             for node in ast.walk(tree)
             if (node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else "")
             in ("ARCHIVE_FORMAT", "FORMAT_KEY")]
    assert not found, f"the archive format read outside lab.evidence.format.check_format: {found}"


LAYOUTS = {1: "92d8f56f9efaaa67c098818361ebf76674ad59d0694ae43e96d44054967f9e6f",
           2: "36f857265ea18b38d8591d25a4e87646f8017bd266509640eaadefb4990e7707",
           3: "3f16641096353fe5776146b582a3646dbc45b969765df1cab96cc5f9f1e37a3c"}
"""{format: sha256 of the raw table's columns and the summary's fields, in order}: what an archive
of that format holds, which verify requires whole."""


def test_a_new_column_or_summary_field_comes_with_a_new_format():
    """Verify requires every raw-table column and summary field of the current format, so a change
    to them without a new ARCHIVE_FORMAT would fail every archive packed before it: raise the format
    (an archive of the one before is then refused in one line, with how to re-pack it) and pin the
    new layout here."""
    import dataclasses
    import hashlib

    from lab.report.raw_table import COLUMNS
    from lab.report.summary import VariantSummary

    layout = {"raw_table.csv": list(COLUMNS), "summary.json": [f.name for f in dataclasses.fields(VariantSummary)]}
    digest = hashlib.sha256(json.dumps(layout).encode()).hexdigest()
    assert LAYOUTS.get(ARCHIVE_FORMAT) == digest, (
        f"the raw table's columns or the summary's fields changed: raise ARCHIVE_FORMAT in lab/evidence/format.py "
        f"to {ARCHIVE_FORMAT + 1} and pin LAYOUTS[{ARCHIVE_FORMAT + 1}] = {digest!r} here")
