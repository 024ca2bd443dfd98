"""The archive member bound at its real size (lab.evidence.format.MAX_MEMBERS, 50,000), through
the command line in a child process under limits (moved out of the unit tier: writing and
reading 50,010 tar headers takes seconds; the bound's logic at a small size stays in
tests/unit/test_hostile_archives.py)."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
import tarfile

from test_hostile_archives import REPO, _limits  # the child's file-size and address-space limits

from lab.evidence.format import MAX_MEMBERS


def header(name: str, kind: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type, info.mode = 0, kind, 0o644
    return info.tobuf(format=tarfile.PAX_FORMAT)


def test_more_members_than_the_bound_are_refused_in_one_line(tmp_path):
    archive = tmp_path / "many.tar.gz"
    body = io.BytesIO()
    body.write(header("camp", kind=tarfile.DIRTYPE))
    for i in range(MAX_MEMBERS + 10):
        body.write(header(f"camp/f{i}"))
    body.write(b"\0" * 1024)
    archive.write_bytes(gzip.compress(body.getvalue(), compresslevel=1))
    r = subprocess.run([sys.executable, "-m", "lab.cli", "archive", "verify", str(archive)], capture_output=True,
                       text=True, cwd=REPO, env={**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(REPO)},
                       timeout=120, preexec_fn=_limits)
    out = (r.stdout + r.stderr).strip()
    assert r.returncode == 2, (r.returncode, out[-2000:])
    assert len(out.splitlines()) == 1 and "Traceback" not in out, out[-2000:]
    assert f"more than {MAX_MEMBERS:,} members" in out, out
