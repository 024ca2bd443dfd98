"""Move lab/'s flat modules into one folder per layer and rewrite every reference to them
(issue 18 part 4; docs/architecture.md, "Layers and what each may import").

    .venv/bin/python scripts/layers_move.py            # move and rewrite (git mv), then a report
    .venv/bin/python scripts/layers_move.py --dry-run  # the same report, nothing written

Run from anywhere inside the repository, on a clean tree (refused otherwise: the moves are
git renames and the rewrites are to be reviewed with `git diff`). The tool is deterministic
and idempotent: the map below is explicit, and a second run moves nothing and rewrites
nothing ("0 moved, 0 references rewritten").

What it does, in order:

1. Creates each layer folder's ``__init__.py`` (a docstring saying what the layer is and what
   it may import), unless one is there.
2. ``git mv lab/<old>.py lab/<folder>/<new>.py`` for each entry of ``MOVES`` whose source
   exists. Folders and modules that are not in the map stay where they are: packages
   (``lab/passes/``, ``lab/passes/tasks/``, ``lab/engines/``...) and everything inside them; a flat
   module ``lab/<name>.py`` that is neither in ``MOVES`` nor in ``STAYS`` is reported ("not
   in the map: place it by hand"), never moved.
3. Rewrites the references in every tracked text file (and untracked, not ignored ones):
   dotted names (``import lab.x``, ``from lab.x import``, ``"lab.x.f"`` in monkeypatch and
   mock.patch targets, ``python -m lab.x``, importlib strings), ``from lab import x[, y]``
   (split per folder, ``as x`` kept when the leaf is renamed), regex-escaped names
   (``lab\\.x``), file paths (``lab/x.py``, ``"lab" / "x.py"``), all with word boundaries and
   longest names first, in one pass per file, so a rewritten name is never rewritten again. In
   a module moved by this run, ``Path(__file__)...parent`` gets one level more. Data files
   (``demo/corpus/``) and UI snapshots (``tests/ui/__snapshots__/``: regenerate them) are left alone.
4. Replaces the import-linter contracts that kept hand lists of module names (``REPLACED``,
   by name) with the folder contracts (``CONTRACTS``) in pyproject.toml; contracts with
   other names (the UI's layers, any added since) are kept as they are, rewritten like any
   text.

One entry, ``lab/evidence.py`` -> ``lab/evidence/assemble.py``, has an old dotted name that is
a package after the move (``lab.evidence``): its references are rewritten only in the run
that moves it (its source still exists), so a second run leaves ``lab.evidence.verify`` and
``from lab.evidence import ...`` alone.

The report: ``created``, ``moved``, ``rewrote FILE: N references`` per file, the import-linter
contracts kept beside the new ones, then ``by hand?`` lines for what a regex cannot settle: a
moved module's file name left bare (no folder) in prose, another use of ``__file__`` in a moved
module, a line the rewrite made longer than ruff's limit; ``not in the map`` for a flat module
the map does not name. Imports are re-sorted with ruff when the project selects isort ("I").

Exit status: 0 done (or nothing to do), 1 a conflict (a module present at both its old and
its new path, or the tree is not clean), with one line saying which and how to fix it.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# ---- the map ---------------------------------------------------------------------------------

#: Each layer folder and its package docstring (what the layer is and what it may import).
FOLDERS: dict[str, str] = {
    "service": (
        "Service layer: what the CLI and the terminal UI call (a campaign's start, stop, archive and\n"
        "replay in ``campaigns``; the screens' computed views in ``views``).\n\n"
        "May import every engine layer below it; never ``lab.cli``, ``tui`` or textual."
    ),
    "evidence": (
        "Evidence: a campaign's archive, packed (``archive``, ``assemble``), its names and member checks\n"
        "(``format``), verified by re-deriving the metrics and tables from the archived journal\n"
        "(``verify``, ``rederive``, ``tables``), and replayed as a new campaign (``replay``).\n\n"
        "May import the report, the orchestration layer (journal, protocol, validation) and what sits\n"
        "below it; never the service layer, the CLI or ``lab.compare`` (compare reads archives)."
    ),
    "orchestration": (
        "Orchestration: a campaign from its file to its journal: the typed campaign file (``config``),\n"
        "the locked protocol (``protocol``, ``preflight``, ``identity``), the plan (``schedule``), the\n"
        "orchestrator that runs the plan's passes through a launcher, the journal (the only state),\n"
        "the campaign's status, the validation of predictions, and ``doctor``.\n\n"
        "May import the launchers, the passes, memory, the inputs and the facts; never the report,\n"
        "compare, evidence, the service layer or the CLI."
    ),
    "inputs": (
        "Inputs of a pass: the corpus, the model folders, the typed ``Variant`` (what a pass runs) and\n"
        "the environment record (``manifest``).\n\n"
        "May import the facts only."
    ),
    "facts": (
        "Facts: the repository's files and sha256, the host (image pins, GPU vendor, device nodes,\n"
        "NVML), the cards a host gives a pass, the defaults, the full-disk error, the error\n"
        "hierarchy and the type check of a declared field.\n\n"
        "May import the standard library and each other only (``host`` loads pynvml and torch\n"
        "inside functions); never another lab package."
    ),
}

#: Flat module (``lab/<old>.py``) -> its new dotted path under ``lab``.
MOVES: dict[str, str] = {
    # service layer
    "campaigns": "service.campaigns",
    "views": "service.views",
    # orchestration and what sits beside it
    "orchestrator": "orchestration.orchestrator",
    "journal": "orchestration.journal",
    "status": "orchestration.status",
    "validate": "orchestration.validate",
    "schedule": "orchestration.schedule",
    "protocol": "orchestration.protocol",
    "preflight": "orchestration.preflight",
    "config": "orchestration.config",
    "identity": "orchestration.identity",
    "doctor": "orchestration.doctor",
    # evidence (the archive); names inside the folder drop the "archive_" prefix
    "archive": "evidence.archive",
    "archive_format": "evidence.format",
    "archive_rederive": "evidence.rederive",
    "archive_tables": "evidence.tables",
    "archive_verify": "evidence.verify",
    "evidence": "evidence.assemble",
    "replay": "evidence.replay",
    # inputs of a pass
    "corpus": "inputs.corpus",
    "models": "inputs.models",
    "variants": "inputs.variants",
    "manifest": "inputs.manifest",
    # facts
    "files": "facts.files",
    "host": "facts.host",
    "host_cards": "facts.host_cards",
    "constants": "facts.constants",
    "diskfull": "facts.diskfull",
    "errors": "facts.errors",
    "typecheck": "facts.typecheck",
}

#: Flat modules that stay at the top of lab/ (the CLI is its own layer).
STAYS = {"__init__", "cli"}

#: Contracts (by name) whose hand-kept module lists the folder contracts replace.
REPLACED = {
    "The engine below the service layer imports neither it nor the CLI",
    "Facts (files, host, host_cards, constants, diskfull, cost, errors, typecheck) import no other lab module",
    "Launchers import passes and facts, never the orchestrator layer or what sits beside it",
    "Engine layers: service layer > orchestrator > launchers > passes",
    "The pass runner loads neither textual nor docker",
    "UI and CLI above the engine: lab never imports tui",
    # the names after the error-hierarchy branch's single layers contract (issue 18 part 3-5)
    "UI and CLI above the engine: lab never imports tui or textual",
    "Engine layers: CLI > service layer > ... > passes > facts",
    "Facts load none of the heavy libraries",
}

LAYERS_CONTRACT = "Engine layers, one folder each (docs/architecture.md)"

CONTRACTS = f'''[[tool.importlinter.contracts]]
# One folder (or the CLI module) per layer, top to bottom; a layer imports only the layers below
# it, imports inside functions and under TYPE_CHECKING included. `|`: independent siblings.
# exhaustive: a new top-level module or package of lab/ must be placed here (lint fails).
name = "{LAYERS_CONTRACT}"
type = "layers"
containers = ["lab"]
layers = [
  "cli",
  "service",
  "compare",
  "evidence",
  "report",
  "orchestration | demo",
  "launchers",
  "passes | engines",
  "memory",
  "inputs | cost",
  "facts",
]
exhaustive = true

[[tool.importlinter.contracts]]
name = "The engine never imports the UI or textual"
type = "forbidden"
source_modules = ["lab"]
forbidden_modules = ["tui", "textual"]

[[tool.importlinter.contracts]]
name = "The passes (what runs in a pass process or container) load neither textual, docker nor the UI"
type = "forbidden"
source_modules = ["lab.passes"]
forbidden_modules = ["textual", "docker", "tui"]

[[tool.importlinter.contracts]]
name = "Facts load none of docker, pandas, transformers, matplotlib"
type = "forbidden"
source_modules = ["lab.facts"]
forbidden_modules = ["docker", "pandas", "transformers", "matplotlib"]
'''

assert not REPLACED & set(re.findall(r'^name = "([^"]*)"', CONTRACTS, re.MULTILINE)), "a new name reused"

#: Tracked files never rewritten: data, not references. A UI snapshot is regenerated from the
#: screen (``pytest tests/ui/test_tui_snapshots.py --snapshot-update``), never edited: a longer name
#: on a screen changes its layout, not only its text.
SKIP_PARTS = ("demo/corpus/", "tests/ui/__snapshots__/")
#: The tool and its test name the old paths on purpose.
SELF = {"scripts/layers_move.py", "tests/unit/test_layers_move.py"}
MAX_BYTES = 2_000_000


# ---- moving ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Move:
    old: str   # "archive_verify"
    new: str   # "evidence.verify"

    @property
    def old_dotted(self) -> str:
        return f"lab.{self.old}"

    @property
    def new_dotted(self) -> str:
        return f"lab.{self.new}"

    @property
    def old_path(self) -> str:
        return f"lab/{self.old}.py"

    @property
    def new_path(self) -> str:
        return "lab/" + self.new.replace(".", "/") + ".py"


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def repo_root() -> Path:
    out = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit("layers_move: not inside a git repository; run it from the lab's checkout")
    return Path(out.stdout.strip())


def plan_moves(root: Path) -> tuple[list[Move], list[Move], list[str]]:
    """(to move now, to rewrite references for, conflicts). A module present at both paths is a conflict."""
    pending: list[Move] = []
    rewrite: list[Move] = []
    conflicts: list[str] = []
    new_packages = {f"lab.{f}" for f in FOLDERS}
    for old, new in MOVES.items():
        m = Move(old, new)
        src, dst = (root / m.old_path).is_file(), (root / m.new_path).is_file()
        if src and dst:
            conflicts.append(f"{m.old_path} and {m.new_path} both exist: keep one (merge the two by hand), "
                             "then run again")
        elif src:
            pending.append(m)
            rewrite.append(m)
        elif m.old_dotted not in new_packages:
            # Moved already (or absent on this branch): its old name cannot be meant as anything
            # else, so references merged in since are still rewritten.
            rewrite.append(m)
    return pending, rewrite, conflicts


def unknown_flat_modules(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "lab").glob("*.py") if p.stem not in STAYS and p.stem not in MOVES)


def ensure_folders(root: Path, dry_run: bool) -> list[str]:
    made = []
    for folder, doc in FOLDERS.items():
        init = root / "lab" / folder / "__init__.py"
        if init.is_file():
            continue
        made.append(str(init.relative_to(root)))
        if not dry_run:
            init.parent.mkdir(parents=True, exist_ok=True)
            init.write_text(f'"""{doc}\n"""\n', encoding="utf-8")
            git(root, "add", str(init.relative_to(root)))
    return made


# ---- rewriting -------------------------------------------------------------------------------

Rules = tuple[re.Pattern[str], dict[str, str], re.Pattern[str] | None, dict[str, str], re.Pattern[str] | None,
              dict[str, str]]


def build_rules(moves: list[Move]) -> Rules:
    """One alternation per kind of reference, longest name first."""
    moves = sorted(moves, key=lambda m: -len(m.old))
    dotted = {m.old_dotted: m.new_dotted for m in moves}
    paths = {m.old_path: m.new_path for m in moves}
    joins = {m.old: m.new for m in moves}
    if not moves:
        never = re.compile(r"(?!x)x")
        return never, {}, None, {}, None, {}
    escaped = {k.replace(".", "\\."): v.replace(".", "\\.") for k, v in dotted.items()}
    dotted.update(escaped)
    dotted = dict(sorted(dotted.items(), key=lambda kv: -len(kv[0])))
    # Not inside a longer dotted name; a regex's \b before the name is fine.
    dotted_re = re.compile(r"(?:(?<![\w.])|(?<=\\b))(" + "|".join(re.escape(k) for k in dotted) + r")(?!\w)")
    path_re = re.compile(r"(?<![\w.-])(" + "|".join(re.escape(k) for k in paths) + r")(?![\w])")
    # "lab" / "validate.py" (pathlib joins in tests and scripts)
    join_re = re.compile(r"""(["'])lab\1(\s*/\s*)(["'])(""" + "|".join(re.escape(k) for k in joins) + r""")\.py\3""")
    return dotted_re, dotted, path_re, paths, join_re, joins


FROM_LAB = re.compile(r"^(?P<indent>[ \t]*)from lab import (?P<names>\([^)]*\)|[^\n#]*?)(?P<tail>[ \t]*(#[^\n]*)?)$",
                      re.MULTILINE)


def rewrite_from_lab(text: str, joins: dict[str, str]) -> tuple[str, int]:
    """``from lab import a, b as c`` -> one line per destination package; unmoved names stay."""
    count = 0

    def one(match: re.Match[str]) -> str:
        nonlocal count
        raw = match["names"].strip().strip("()")
        items = [i.strip() for i in raw.replace("\n", " ").split(",") if i.strip()]
        groups: dict[str, list[str]] = {}
        changed = False
        for item in items:
            name, _, alias = (p.strip() for p in item.partition(" as "))
            if name in joins:
                package, _, leaf = ("lab." + joins[name]).rpartition(".")
                bound = alias or name
                groups.setdefault(package, []).append(leaf if leaf == bound else f"{leaf} as {bound}")
                changed = True
            else:
                groups.setdefault("lab", []).append(item)
        if not changed:
            return match.group(0)
        count += 1
        indent = match["indent"]
        lines = [f"{indent}from {package} import {', '.join(names)}" for package, names in sorted(groups.items())]
        return "\n".join(lines) + match["tail"]

    return FROM_LAB.sub(one, text), count


def rewrite_text(text: str, rules: Rules) -> tuple[str, int]:
    dotted_re, dotted, path_re, paths, join_re, joins = rules
    total = 0
    # Dotted names first: the lines `from lab import x` gives (`from lab.evidence import archive`)
    # must not be read again as the old module lab.evidence.
    text, n = dotted_re.subn(lambda m: dotted[m.group(1)], text)
    total += n
    text, n = rewrite_from_lab(text, joins)
    total += n
    if path_re is not None:
        text, n = path_re.subn(lambda m: paths[m.group(1)], text)
        total += n
    if join_re is not None:
        def join(m: re.Match[str]) -> str:
            q, sep, q2, old = m.group(1), m.group(2), m.group(3), m.group(4)
            parts = ["lab", *joins[old].split(".")]
            parts[-1] += ".py"
            return sep.join(f"{q2 if i else q}{p}{q2 if i else q}" for i, p in enumerate(parts))
        text, n = join_re.subn(join, text)
        total += n
    return text, total


def text_files(root: Path) -> list[Path]:
    listed = git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    out = []
    for rel in sorted(set(filter(None, listed))):
        p = root / rel
        if not p.is_file() or any(rel.startswith(s) for s in SKIP_PARTS) or p.stat().st_size > MAX_BYTES:
            continue
        data = p.read_bytes()
        if b"\0" in data:
            continue
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        out.append(p)
    return out


def line_length(root: Path) -> int:
    """ruff's line-length from pyproject.toml (88, ruff's default, without one)."""
    import tomllib

    try:
        return int(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["ruff"]["line-length"])
    except (OSError, KeyError, ValueError, tomllib.TOMLDecodeError):
        return 88


def sort_imports(root: Path, rewritten: list[str]) -> str:
    """Re-sort the rewritten files' imports when the project's ruff selects isort ("I"); else nothing."""
    import tomllib

    ruff = Path(sys.executable).parent / "ruff"
    try:
        select = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]["select"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return ""
    if not rewritten or "I" not in select or not ruff.is_file():
        return ""
    subprocess.run([str(ruff), "check", "--select", "I", "--fix", "--quiet", *rewritten], cwd=root, check=False)
    return f"{len(rewritten)} files"


OWN_FILE = re.compile(r"Path\(__file__\)(?P<resolve>\.resolve\(\))?(?P<parents>(?:\.parent)+)(?![\w.])"
                      r"|Path\(__file__\)(?P<resolve2>\.resolve\(\))?\.parents\[(?P<n>\d+)\]")


def deepen_own_paths(text: str) -> tuple[str, int]:
    """A module moved one folder down: ``Path(__file__).resolve().parent`` -> ``.parents[1]``,
    ``.parent.parent`` -> ``.parents[2]``, ``.parents[n]`` -> ``.parents[n + 1]``. Applied only in the
    run that moves the module (the rewrite is relative to its old depth)."""
    def one(m: re.Match[str]) -> str:
        if m["n"] is not None:
            return f"Path(__file__){m['resolve2'] or ''}.parents[{int(m['n']) + 1}]"
        return f"Path(__file__){m['resolve'] or ''}.parents[{m['parents'].count('.parent')}]"
    return OWN_FILE.subn(one, text)


# ---- pyproject's contracts -------------------------------------------------------------------

BLOCK = re.compile(r"^\[\[tool\.importlinter\.contracts\]\]\n", re.MULTILINE)
NAME = re.compile(r'^name\s*=\s*"([^"]*)"', re.MULTILINE)


def replace_contracts(text: str) -> tuple[str, list[str], list[str]]:
    """(pyproject.toml's text with the REPLACED contracts swapped for CONTRACTS, the names removed,
    the names kept). CONTRACTS go where the first replaced one was, or after the last contract
    when none of REPLACED is there (renamed since): never twice."""
    starts = [m.start() for m in BLOCK.finditer(text)]
    if not starts:
        return text, [], []
    # Each block runs to the next block, the next table header or the end.
    ends = []
    for i, s in enumerate(starts):
        nxt = starts[i + 1] if i + 1 < len(starts) else len(text)
        header = re.compile(r"^\[(?!\[tool\.importlinter\.contracts\]\])", re.MULTILINE).search(text, s + 1, nxt)
        ends.append(header.start() if header else nxt)
    removed: list[str] = []
    kept: list[str] = []
    pieces: list[str] = []
    last = 0
    inserted = f'name = "{LAYERS_CONTRACT}"' in text
    for s, e in zip(starts, ends, strict=True):
        block = text[s:e]
        name = NAME.search(block)
        pieces.append(text[last:s])
        if name and name.group(1) in REPLACED:
            removed.append(name.group(1))
            if not inserted:
                pieces.append(CONTRACTS + "\n")
                inserted = True
        else:
            kept.append(name.group(1) if name else "(unnamed)")
            pieces.append(block)
        last = e
    if not inserted:
        pieces.append(CONTRACTS + "\n")
    pieces.append(text[last:])
    return "".join(pieces), removed, kept


# ---- main ------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="report what would move and be rewritten; write nothing")
    args = ap.parse_args(argv)
    root = repo_root()

    pending, rewrite, conflicts = plan_moves(root)
    if conflicts:
        for c in conflicts:
            print(f"layers_move: {c}", file=sys.stderr)
        return 1
    if pending and not args.dry_run and git(root, "status", "--porcelain", "--untracked-files=no").strip():
        print("layers_move: the tree has uncommitted changes; commit or stash them, then run again "
              "(the moves are reviewed with git diff)", file=sys.stderr)
        return 1

    made = ensure_folders(root, args.dry_run)
    for init in made:
        print(f"created  {init}")
    for m in pending:
        print(f"moved    {m.old_path} -> {m.new_path}")
        if not args.dry_run:
            git(root, "mv", m.old_path, m.new_path)

    rules = build_rules(rewrite)
    total, files = 0, 0
    rewritten_py: list[str] = []
    long_lines: list[str] = []
    own_file: list[str] = []
    # A dry run reads the modules at their old paths.
    moved_now = {m.old_path if args.dry_run else m.new_path for m in pending}
    width = line_length(root)
    for path in text_files(root):
        rel = str(path.relative_to(root))
        if rel in SELF:
            continue
        before = path.read_text(encoding="utf-8")
        after, n = rewrite_text(before, rules)
        if rel in moved_now:
            after, deepened = deepen_own_paths(after)
            n += deepened
            if "__file__" in OWN_FILE.sub("", after):
                own_file.append(rel)
        removed: list[str] = []
        if rel == "pyproject.toml":
            after, removed, kept = replace_contracts(after)
            if after != before:
                for name in kept:
                    print(f"kept     import-linter contract {name!r} (check it against the layers contract)")
        if after == before:
            continue
        files += 1
        total += n
        extra = f", contracts replaced: {len(removed)}" if removed else ""
        print(f"rewrote  {rel}: {n} reference{'s' if n != 1 else ''}{extra}")
        if not args.dry_run:
            path.write_text(after, encoding="utf-8")
            if rel.endswith(".py"):
                rewritten_py.append(rel)
        if rel.endswith(".py"):
            old_long = {ln for ln in before.splitlines() if len(ln) > width}
            for number, line in enumerate(after.splitlines(), 1):
                if len(line) > width and line not in old_long:
                    long_lines.append(f"{rel}:{number}")
    sorted_imports = sort_imports(root, rewritten_py)

    bare = re.compile(r"(?<![\w/.])(" + "|".join(sorted(map(re.escape, MOVES), key=len, reverse=True)) + r")\.py\b")
    # Bare names left after this run's moves (a moved tree names its modules bare on purpose).
    for path in text_files(root) if pending and not args.dry_run else []:
        rel = str(path.relative_to(root))
        found = sorted({m.group(0) for m in bare.finditer(path.read_text(encoding="utf-8"))}) if rel not in SELF else []
        if found:
            print(f"by hand? {rel}: bare file names without their folder: {', '.join(found)}")
    for where in own_file:
        print(f"by hand? {where}: uses __file__ other than Path(__file__)[.resolve()].parent...: check the depth")
    for where in long_lines:
        print(f"by hand? {where}: longer than {width} columns after the rewrite (ruff E501): wrap it")
    for name in unknown_flat_modules(root):
        print(f"not in the map: lab/{name} stays (place it by hand: a folder in scripts/layers_move.py MOVES)")
    if sorted_imports:
        print(f"sorted   imports in {sorted_imports} (ruff --select I --fix: the project's isort rule)")
    verb = "would be " if args.dry_run else ""
    print(f"layers_move: {len(pending)} module{'s' if len(pending) != 1 else ''} {verb}moved, "
          f"{len(made)} folder{'s' if len(made) != 1 else ''} {verb}created, "
          f"{total} reference{'s' if total != 1 else ''} {verb}rewritten in {files} file{'s' if files != 1 else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
