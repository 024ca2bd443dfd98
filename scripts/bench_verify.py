"""`archive verify` memory and time against the bare floor, measured side by side in one run.

Builds one tar.gz with a member of ``--mib`` MiB of zeros (about 1 MiB compressed: the shape
of archive that made the old verify hold every member in memory), then runs, each in a fresh
process, alternating order:
- bare: gunzip the stream and sha256 it in 1 MiB chunks (the least any verify must do);
- lab:  lab.evidence.archive.verify on the same file.
Prints each round's peak resident memory (VmHWM) and duration, the medians, and the ratios
lab / bare (goal: memory ratio near 1, i.e. independent of the member's size).

    .venv/bin/python scripts/bench_verify.py [--mib 512] [--rounds 3]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HWM = "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]; print(int(hwm) * 1024)"
BARE = ("import gzip, hashlib, sys; h = hashlib.sha256(); f = gzip.open(sys.argv[1]); "
        "[h.update(c) for c in iter(lambda: f.read(1 << 20), b'')]; " + HWM)
LAB = "import sys; from pathlib import Path; from lab.evidence.archive import verify; verify(Path(sys.argv[1])); " + HWM


class Zeros(io.RawIOBase):
    def __init__(self, n: int):
        self.left = n

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        self.left -= n
        return bytes(n)


def build(path: Path, size: int) -> None:
    import json

    sys.path.insert(0, str(REPO))
    from lab.evidence.format import ARCHIVE_FORMAT, ARCHIVE_INFO, FORMAT_KEY  # the format verify reads first

    digest = hashlib.sha256()
    for _ in range(size // 2**20):
        digest.update(bytes(2**20))
    info = json.dumps({FORMAT_KEY: ARCHIVE_FORMAT}).encode()
    sums = (f"{digest.hexdigest()}  passes/p1/log.txt\n"
            f"{hashlib.sha256(info).hexdigest()}  {ARCHIVE_INFO}\n").encode()
    with tarfile.open(path, "w:gz", compresslevel=1) as t:
        for name, n, data in (("x/SHA256SUMS", len(sums), io.BytesIO(sums)),
                              ("x/passes/p1/log.txt", size, Zeros(size)),
                              (f"x/{ARCHIVE_INFO}", len(info), io.BytesIO(info))):
            info = tarfile.TarInfo(name)
            info.size = n
            t.addfile(info, data)


def run(code: str, path: Path) -> tuple[int, float]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    return int(out.stdout.split()[-1]), time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=512, help="size of the zero-filled member (MiB)")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bomb.tar.gz"
        build(path, a.mib * 2**20)
        print(f"archive: {path.stat().st_size:,} bytes compressed, member {a.mib} MiB")
        res: dict[str, list[tuple[int, float]]] = {"bare": [], "lab": []}
        for r in range(a.rounds):
            order = ("bare", "lab") if r % 2 == 0 else ("lab", "bare")
            for name in order:
                res[name].append(run(BARE if name == "bare" else LAB, path))
                mem, dur = res[name][-1]
                print(f"round {r + 1} {name:<4} peak {mem / 2**20:8.1f} MiB  {dur:6.2f} s")
    med = {k: (statistics.median(m for m, _ in v), statistics.median(t for _, t in v)) for k, v in res.items()}
    for k, (m, t) in med.items():
        print(f"median {k:<4} peak {m / 2**20:8.1f} MiB  {t:6.2f} s")
    print(f"ratio lab/bare: memory {med['lab'][0] / med['bare'][0]:.2f}, time {med['lab'][1] / med['bare'][1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
