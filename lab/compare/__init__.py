"""Several evidence archives of one protocol -> one decision (SPEC 5: compare/).

comparability (same corpus, model files, quality and timing rules), projection to the
user's load (hours, package, lots), decision (lowest committed budget, break-even loads)
and tables (decision.md, compare.csv, report.html). The CLI (`iteralab compare`) and the
UI's Compare screen both call :func:`compare_to_folder`.
"""
from __future__ import annotations

from pathlib import Path

from lab.compare.decision import Comparison, compare_archives
from lab.compare.evidence import CompareError
from lab.facts.diskfull import staged_files


def compare_to_folder(archives: list, load_items: int | None, out_dir: str | Path,
                      **options) -> tuple[Comparison, dict]:
    """compare_archives(archives, load_items, **options), then write decision.md, compare.csv
    and report.html under ``out_dir`` (only once the comparison succeeded: a refused
    comparison writes nothing). The files are written in a temporary folder inside ``out_dir``
    and renamed into place once all three are complete, so a failure (a full disk: DiskFull
    naming ``out_dir``) leaves the previous report whole and no partial file. Returns
    (comparison, {"decision", "csv", "html": Path}, and "serving_csv" for server archives; a
    serving.csv left there by an earlier comparison is removed otherwise). Raises CompareError for an ``out_dir``
    that is a file or cannot be created."""
    from lab.compare.tables import write_comparison

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise CompareError(f"--out {out}: exists and is not a folder; give a folder path (it holds decision.md, "
                           "compare.csv and report.html)")
    c = compare_archives(archives, load_items, **options)
    def refuse(exc: OSError) -> CompareError:
        return CompareError(f"--out {out}: cannot create the folder there ({exc.strerror or exc}); give a folder "
                            "you can write to")

    with staged_files(out, ".compare-", "creating the comparison folder",
                      "writing the comparison; the files there before are unchanged", refuse) as tmp:
        paths = {key: out / p.name for key, p in write_comparison(c, tmp).items()}
    if "serving_csv" not in paths:  # an earlier server comparison's table there is not this comparison's
        (out / "serving.csv").unlink(missing_ok=True)
    return c, paths


def list_archives(root: str | Path) -> list[Path]:
    """Evidence archives (*.tar.gz) under ``root`` (e.g. runs/), newest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p for p in root.rglob("*.tar.gz") if p.is_file()]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


__all__ = ["CompareError", "Comparison", "compare_archives", "compare_to_folder", "list_archives"]
