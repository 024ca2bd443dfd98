"""Issue 23 part 3: hostile or odd archives and catalogs stay bounded.

Each hostile file is made here the way an attacker would (a gzip stream of concatenated
members, so 4 GiB of zeros fit in a few MB) and given to the real command line in a child
process under limits (file size, address space): where the product has no bound, the child
dies of the limit or answers with the wrong line instead of refusing in one line.
"""

from __future__ import annotations

import gzip
import io
import os
import resource
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import cut_corpus, write_campaign

from lab.evidence.format import MAX_JOURNAL_BYTES, MAX_TRAILER_BYTES

REPO = Path(__file__).resolve().parents[2]
FSIZE_LIMIT = 64 * 2**20   # no file the child writes may pass 64 MiB
AS_LIMIT = 2 * 2**30       # nor its address space 2 GiB


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_LIMIT, FSIZE_LIMIT))
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def iteralab(*args: str, tmp: Path, timeout: int = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "lab.cli", *args], capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=timeout, preexec_fn=_limits)


def zeros_gzip(n_bytes: int) -> bytes:
    """``n_bytes`` zero bytes as concatenated gzip members (1 MiB each, compressed once)."""
    mib = gzip.compress(b"\0" * 2**20, compresslevel=9)
    full, rest = divmod(n_bytes, 2**20)
    return mib * full + (gzip.compress(b"\0" * rest) if rest else b"")


def header(name: str, size: int = 0, kind: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type, info.mode = size, kind, 0o644
    return info.tobuf(format=tarfile.PAX_FORMAT)


def one_line_refusal(r: subprocess.CompletedProcess) -> str:
    out = (r.stdout + r.stderr).strip()
    assert r.returncode == 2, (r.returncode, out[-2000:])
    assert len(out.splitlines()) == 1 and "Traceback" not in out, out[-2000:]
    return out


def tmp_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_a_4_gib_journal_member_is_refused_before_a_byte_is_written(tmp_path):
    size = 4 * 2**30
    archive = tmp_path / "bomb.tar.gz"
    with open(archive, "wb") as fh:
        fh.write(gzip.compress(header("camp/journal.sqlite", size)))
        fh.write(zeros_gzip(size))
        fh.write(gzip.compress(b"\0" * 1024))  # the tar's end blocks
    assert archive.stat().st_size < 20 * 2**20
    work = tmp_path / "tmp"
    work.mkdir()
    out = one_line_refusal(iteralab("archive", "verify", str(archive), tmp=work))
    assert f"declares {size:,} bytes" in out and f"{MAX_JOURNAL_BYTES:,}" in out, out
    assert tmp_bytes(work) == 0


def test_a_member_beyond_the_member_bound_is_refused_from_its_header(tmp_path):
    archive = tmp_path / "big.tar.gz"
    size = 2**30 + 1
    with open(archive, "wb") as fh:
        fh.write(gzip.compress(header("camp/passes/p1/predictions.jsonl", size)))
        fh.write(zeros_gzip(2**20))  # cut short: the refusal must come from the header alone
    out = one_line_refusal(iteralab("archive", "verify", str(archive), tmp=tmp_path))
    assert f"declares {size:,} bytes" in out, out


def test_more_members_than_the_bound_are_refused_in_one_line(tmp_path, monkeypatch):
    """The member bound, in-process with a bound of 20 (the real 50,000 through the CLI:
    tests/integration/test_archive_member_bound.py)."""
    import lab.evidence.format
    from lab.evidence.archive import verify
    from lab.facts.errors import UserError

    monkeypatch.setattr(lab.evidence.format, "MAX_MEMBERS", 20)
    archive = tmp_path / "many.tar.gz"
    body = io.BytesIO()
    body.write(header("camp", kind=tarfile.DIRTYPE))
    for i in range(30):
        body.write(header(f"camp/f{i}"))
    body.write(b"\0" * 1024)
    archive.write_bytes(gzip.compress(body.getvalue(), compresslevel=1))
    with pytest.raises(UserError) as e:
        verify(archive)
    assert str(e.value) == ("many.tar.gz: more than 20 members; an evidence archive holds a few files per pass, "
                            "so this is not one (refused before reading further)")


def test_a_long_gzip_tail_after_the_end_of_the_tar_is_refused(tmp_path):
    """A gzip stream that goes on after the tar's end (read to check the gzip trailer)."""
    archive = tmp_path / "tail.tar.gz"
    body = io.BytesIO()
    with tarfile.open(fileobj=body, mode="w") as tar:
        info = tarfile.TarInfo("camp/SHA256SUMS")
        tar.addfile(info, io.BytesIO(b""))
    with open(archive, "wb") as fh:
        fh.write(gzip.compress(body.getvalue()))
        fh.write(zeros_gzip(256 * 2**20))
    out = one_line_refusal(iteralab("archive", "verify", str(archive), tmp=tmp_path))
    assert f"more than {MAX_TRAILER_BYTES:,} bytes after the end of the tar" in out, out


def _tar(members: dict[str, bytes]) -> bytes:
    body = io.BytesIO()
    with tarfile.open(fileobj=body, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return body.getvalue()


@pytest.mark.parametrize("how", ["same gzip member", "second gzip member"])
def test_a_tar_hidden_after_the_end_of_the_tar_is_refused(tmp_path, how):
    """Bytes after the tar's end-of-archive blocks that are not zeros: `tar --ignore-zeros`
    unpacks a member hidden there, which verify would never have checked (issue 35)."""
    archive = tmp_path / "hidden.tar.gz"
    first = _tar({"camp/SHA256SUMS": b""})
    hidden = _tar({"camp/passes/p1/predictions.jsonl": b'{"id": "a", "pred": "forged"}\n'})
    archive.write_bytes(gzip.compress(first + hidden) if how == "same gzip member"
                        else gzip.compress(first) + gzip.compress(hidden))
    if subprocess.run(["tar", "--version"], capture_output=True).returncode == 0:  # what a standard tool does
        out = tmp_path / "out"
        out.mkdir()
        subprocess.run(["tar", "--ignore-zeros", "-xzf", str(archive), "-C", str(out)], check=True)
        assert (out / "camp/passes/p1/predictions.jsonl").read_text().endswith('"forged"}\n')
    out = one_line_refusal(iteralab("archive", "verify", str(archive), tmp=tmp_path))
    assert "bytes other than zeros after the end of the tar" in out and "--ignore-zeros" in out, out


def test_a_catalog_without_newlines_fails_fast_in_the_pricing_script(tmp_path):
    script = subprocess.run([sys.executable, "-I", str(REPO / "scripts" / "calcul_forfaits.py"),
                             "--catalog", "/dev/zero"], capture_output=True, text=True, timeout=120,
                            preexec_fn=_limits)
    out = one_line_refusal(script)
    assert "/dev/zero" in out and "not a catalog" in out, out


def test_a_campaign_whose_cost_catalog_is_dev_zero_is_refused_at_lock(tmp_path):
    f = write_campaign(tmp_path, Path("/nonexistent/model"), cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    f.write_text(f.read_text() + '\n[cost]\ngpu = "b200"\ndays = 7\ncatalog = "/dev/zero"\n')
    out = one_line_refusal(iteralab("protocol", "lock", str(f), tmp=tmp_path))
    assert "/dev/zero" in out and "not a catalog" in out, out


def test_compare_refuses_max_lots_beyond_its_bound(tmp_path):
    from lab.compare.decision import MAX_LOTS

    out = one_line_refusal(iteralab("compare", str(tmp_path / "a.tar.gz"), "--load", "10",
                                    "--max-lots", "10000000", tmp=tmp_path))
    assert f"--max-lots must be an integer from 1 to {MAX_LOTS}" in out, out


def test_a_mismatch_names_the_leaf_that_differs_not_two_cut_objects():
    """A forged nested field (the trial's generation.stopped_by edit) is named by its path, each side
    its own value; a key one side lacks reads as absent."""
    from lab.evidence.table_checks import first_difference

    a = {"rule": {"prompt": "x" * 300}, "stopped_by": {"stop": 40}}
    b = {"rule": {"prompt": "x" * 300}, "stopped_by": {"entry": 40}}
    assert first_difference(a, b, "generation") == ("generation.stopped_by.entry", "absent", 40)
    assert first_difference([1, {"k": 2}], [1, {"k": 3}], "x") == ("x[1].k", 2, 3)
    assert first_difference([1], [1, 2], "x") == ("x", [1], [1, 2])
