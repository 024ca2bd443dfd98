"""Argument checks shared by the benchmark scripts (bench.py, bench_peer.py, bench_validation.py).

Team rule: bad input gets a one-line error that says what is wrong and how to fix it (exit 2),
before any model load or long run, and nothing already written is lost. So:
- ``parser``: argparse with option descriptions and defaults in ``--help``, and argparse's own
  errors (``--items abc``) as one line instead of usage + error;
- ``require_at_least``: integer options with a lower bound (``--threads 0`` would otherwise be
  torch's RuntimeError, ``--rounds 0`` a KeyError at the end of the run);
- ``check_output_path``: the output file's folder is writable now, not after the whole run;
- ``check_model_folder`` / ``check_lengths_fit``: a local checkpoint folder and token lengths
  within its ``max_position_embeddings``, from config.json, without loading the model;
- ``write_json_atomic``: the result replaces the old file only once complete.

Stdlib only at import time (lab modules are imported inside the functions that need them, so
that bench_validation.py's child can still choose which checkout's ``lab`` it times); no
torch/transformers import, so the checks run in well under a second.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


class UsageError(Exception):
    """Bad arguments or a missing prerequisite: one line for the user (what is wrong, the fix), exit 2."""


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults after each option's description; the script's docstring kept as written."""


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line on stderr and exit 2 (no usage block)."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        self.exit(2, f"{self.prog}: {message}; see --help\n")


def parser(prog: str, doc: str) -> OneLineParser:
    """A parser named ``prog`` (the prefix of its error lines) whose ``--help`` shows ``doc``."""
    return OneLineParser(prog=prog, description=doc, formatter_class=_HelpFormatter)


def require_at_least(a: argparse.Namespace, minimum: int, *names: str) -> None:
    """Raise UsageError when an option among ``names`` (attribute names) is below ``minimum``."""
    for name in names:
        value = getattr(a, name)
        if value < minimum:
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} {value} must be an integer >= {minimum}; e.g. {flag} "
                             f"{minimum} or leave it out for the default")


def check_output_path(path: str | Path, flag: str = "--out") -> Path:
    """The output file ``path`` can be written: it is not a folder, and the nearest existing folder
    above it accepts a new file (probed by creating and removing one; its missing subfolders are
    created at write time). Raises UsageError naming the fix. Returns ``path`` as a Path."""
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{flag} {path} is a folder; give a file path, e.g. {flag} {p / 'result.json'}")
    if p.exists() and not p.is_file():
        raise UsageError(f"{flag} {path} is not a regular file; give a file path in a writable folder")
    folder = p.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise UsageError(f"{flag} {path}: {folder} is a file, not a folder; give a path in a writable folder")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-probe-"):
            pass
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot write in {folder} ({e.strerror or type(e).__name__}); "
                         "give a path in a writable folder") from None
    return p


def check_model_folder(path: str | Path, flag: str = "--model") -> dict:
    """config.json of the checkpoint folder ``path`` (lab.inputs.models.local_checkpoint_config), or
    UsageError with the fix."""
    from lab.inputs.models import ModelFolderError, local_checkpoint_config

    try:
        return local_checkpoint_config(path)
    except ModelFolderError as e:
        raise UsageError(f"{flag} {e}") from None


def check_lengths_fit(config: dict, lengths: list[int], flag: str) -> None:
    """Raise UsageError when a token length exceeds the model's ``max_position_embeddings``
    (config.json; the position table has that many rows, a longer input fails in the forward)."""
    limit = config.get("max_position_embeddings")
    if isinstance(limit, int) and limit > 0:
        over = [n for n in lengths if n > limit]
        if over:
            raise UsageError(f"{flag} {over[0]} exceeds the model's max_position_embeddings {limit} "
                             f"(its config.json); use {limit} tokens or fewer")


def check_variant_and_files(a: argparse.Namespace, **fields):
    """The lab's own rule for a variant of ``a.batch`` items and ``a.max_length`` tokens (plus
    ``fields``), then ``a.model`` and ``a.out``: sets ``a.model_config`` and ``a.out`` (a Path)
    and returns the Variant. Raises UsageError (one line, the variant's message with the
    script's flags)."""
    from lab.inputs.variants import Variant, VariantError

    try:
        variant = Variant(batch_size=a.batch, max_length=a.max_length, **fields)
    except VariantError as e:
        msg = str(e).replace("max_length ", "--max-length ", 1).replace("batch_size ", "--batch ", 1)
        raise UsageError(msg) from None
    a.model_config = check_model_folder(a.model)
    check_lengths_fit(a.model_config, [a.max_length], "--max-length")
    a.out = check_output_path(a.out)
    return variant


def write_json_atomic(path: Path, obj) -> Path:
    """Write ``obj`` as indented JSON to ``path`` (folders created) through a temporary file and a
    rename: the previous file stays whole until the new one is complete. Raises OSError
    (lab.facts.diskfull.DiskFull when the disk is full)."""
    from lab.facts.diskfull import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, json.dumps(obj, indent=1) + "\n")


def run(prog: str, parse, measure) -> int:
    """A benchmark's main: ``parse()`` (UsageError: one line on stderr, exit 2), then
    ``measure(args, tmp)`` with a temporary folder removed afterwards; returns its status."""
    try:
        a = parse()
    except UsageError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix=prog.replace("-", "_") + "_") as d:
        return measure(a, Path(d))
