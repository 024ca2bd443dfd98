#!/usr/bin/env python3
"""Write docs/reference/campaign-file.md and docs/reference/cli.md from the code itself.

The campaign file's keys come from the typed sections of ``lab.orchestration.config`` (one
frozen dataclass per TOML table, their type hints and defaults) and the variant fields of
``lab.inputs.variants.Variant`` (the keys of ``[defaults]`` and ``[[series]]``); the allowed
values from the constants those classes check against; each key's words from the comment
beside its field in the source, else beside the key in the demo campaign
(lab/defaults/demo.toml, demo/campaign-*.toml); the refusals each key gets from the cases of
docs/refusals.md (scripts/refusals_table.py, real `protocol lock` runs) whose line names it. The
CLI's verbs and options come from ``lab.cli.parser()``.

Nothing in either page is typed by hand: run `python scripts/gen_reference.py` after changing a
section, a variant field, the parser or docs/refusals.md; `python scripts/gen_reference.py --check` exits 1 naming
each page that is stale (tests/unit/test_generated_reference.py does the same). Standard library
and the lab only; a second or less.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sys
import typing
from dataclasses import MISSING, fields
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lab.cost.forfaits import PACKAGE_HOURS, load_catalog  # noqa: E402  (the repository's own lab)
from lab.facts.typecheck import type_name  # noqa: E402
from lab.inputs import variants  # noqa: E402
from lab.kinds import KINDS  # noqa: E402
from lab.orchestration import config  # noqa: E402
from lab.passes.tasks.generation_core import GenerationRule  # noqa: E402
from lab.passes.tasks.text_metrics import NORMALISATIONS  # noqa: E402

OUT = REPO / "docs" / "reference"
CAMPAIGN_PAGE = OUT / "campaign-file.md"
CLI_PAGE = OUT / "cli.md"
REFUSALS = REPO / "docs" / "refusals.md"
DEMOS = (REPO / "lab" / "defaults" / "demo.toml", REPO / "demo" / "campaign-embedding.toml",
         REPO / "demo" / "campaign-generation.toml")
COMMAND = "python scripts/gen_reference.py"
HEADER = f"<!-- Written by `{COMMAND}` from {{source}}; do not edit by hand: run it again. -->\n\n"


def listed(values) -> str:
    return ", ".join(f"`{v}`" for v in values)


def allowed() -> dict[tuple[str, str], str]:
    """(section, key) -> the values the section's checks accept, from the constants they check."""
    kinds = "; ".join(f"{kind.name}: {listed(kind.metric_names)}" + (', or your own `"file.py:function"`'
                                                                   if kind.user_metric else "")
                      for kind in KINDS.values())
    catalog = load_catalog(None)
    gpus = sorted({row.gpu for row in catalog.rows})
    return {
        ("task", "kind"): listed(KINDS),
        ("task", "pooling"): listed(config.POOLINGS),
        ("task", "decoding"): listed(typing.get_args(typing.get_type_hints(GenerationRule)["decoding"])),
        ("task", "normalisation"): listed(NORMALISATIONS),
        ("quality", "metric"): f"by task kind: {kinds}",
        ("quality", "direction"): listed(config.DIRECTIONS) + ' (your own metric only)',
        ("quality", "subgroups"): listed(config.SUBGROUPS),
        ("timing", "rotation"): listed(config.ROTATIONS),
        ("timing", "process"): listed(config.PROCESS_POLICIES),
        ("timing", "repetitions"): f"1 to {config.MAX_REPETITIONS:,}",
        ("timing", "threads"): f"0 (torch's default) to {config.MAX_THREADS:,}",
        ("timing", "warmup_items"): f"0 to {config.MAX_WARMUP_ITEMS:,}",
        ("timing", "warmup_passes"): f"0 to {config.MAX_WARMUP_PASSES:,}",
        ("cost", "gpu"): f"a GPU of the price catalog (the bundle's, version {catalog.version}: {listed(gpus)})",
        ("cost", "days"): f"{listed(PACKAGE_HOURS)}, as the catalog lists them",
        ("variant", "precision"): listed(variants.PRECISIONS),
        ("variant", "padding"): listed(variants.PADDINGS),
        ("variant", "engine"): listed(variants.ENGINES),
        ("variant", "batch_size"): f"1 to {variants.MAX_BATCH_SIZE:,}",
        **{("variant", k): 'only with `engine = "vllm"`' for k in variants.VLLM_ONLY},
    }


def field_comments(cls) -> dict[str, str]:
    """field name -> the comment beside it in ``cls``'s source (``name: type = x  # comment``)."""
    out = {}
    for line in inspect.getsource(cls).splitlines():
        m = re.match(r"\s+(\w+): [^#]+#\s*(.+)$", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def demo_comments() -> dict[tuple[str, str], str]:
    """(section, key) -> the first comment beside the key in the demo campaigns (DEMOS; commented-out
    keys included), skipping a comment that only names another value ("or ..."). The task kinds'
    own demos (every one but the first, the general classification demo) give [task] comments
    only: theirs on [quality] metric or max_length describe that kind's value, not the key."""
    out: dict[tuple[str, str], str] = {}
    for demo in DEMOS:
        section = ""
        for line in demo.read_text(encoding="utf-8").splitlines():
            head = re.match(r"\[\[?(\w+)\]\]?", line)
            if head:
                section = head.group(1)
                continue
            if demo != DEMOS[0] and section != "task":
                continue
            m = re.match(r"#?\s*(\w+) = .*?\s#\s*(.+)$", line)
            if m and (section, m.group(1)) not in out and not m.group(2).startswith("or "):
                out[(section, m.group(1))] = m.group(2).strip()
    return out


def task_defaults() -> dict[str, str]:
    """[task] key -> the value a kind that reads it takes when the key is left out (the section's
    own __post_init__, built with only the keys that kind requires)."""
    built = [config.TaskSection(kind="embedding"), config.TaskSection(kind="generation", prompt="{text}",
                                                                     max_new_tokens=1)]
    out = {}
    for key in ("pooling", "normalize", "max_text_tokens", "decoding", "normalisation"):
        value = next(getattr(t, key) for t in built if getattr(t, key) is not None)
        shown = str(value).lower() if isinstance(value, bool) else (f'"{value}"' if isinstance(value, str) else value)
        out[key] = f"`{shown}` (for a kind that reads it)"
    return out


def refusal_cases() -> list[tuple[str, str, str]]:
    """(case, the input's last edit, the line printed) of each row of docs/refusals.md (written by
    scripts/refusals_table.py from real `protocol lock` runs)."""
    rows = []
    for line in REFUSALS.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        if len(cells) == 4 and cells[3].isdigit():
            rows.append((cells[0], cells[1].strip("`").split(" ⏎ ")[-1], cells[2]))
    return rows


def refusals_of(section: str, key: str) -> str:
    """The docs/refusals.md cases whose printed line names ``[section] key`` (variant fields:
    ``[defaults] key``), or whose last edit sets ``key`` and whose line names no other key."""
    where = "defaults" if section == "variant" else section
    named = re.compile(rf"\[{where}\] {key}\b")
    cases = [case for case, edit, printed in refusal_cases()
             if named.search(printed) or (edit.startswith(f"{key} =") and not re.search(r"\[\w+\] \w", printed)
                                          and section == "variant")]
    return "; ".join(dict.fromkeys(cases))


def default_of(f) -> str:
    if f.default is MISSING and f.default_factory is MISSING:
        return "required"
    value = f.default if f.default is not MISSING else f.default_factory()
    if value is None:
        return "not set"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, tuple):
        return f"`{list(value)}`"
    return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def key_table(section: str, cls, keys: list[str] | None = None, where: str | None = None) -> list[str]:
    """The rows of one section's table: key, type, default, allowed values, what it is."""
    values, demo, own = allowed(), demo_comments(), field_comments(cls)
    effective = task_defaults() if cls is config.TaskSection else {}
    hints = typing.get_type_hints(cls)
    rows = ["| key | type | default | allowed values | note | refused at lock when ([refusals](../refusals.md)) |",
            "|---|---|---|---|---|---|"]
    for f in fields(cls):
        if keys is not None and f.name not in keys:
            continue
        what = own.get(f.name) or demo.get((where or section, f.name)) or ""
        rows.append(f"| `{f.name}` | {type_name(hints[f.name])} | {effective.get(f.name) or default_of(f)} | "
                    f"{cell(values.get((section, f.name), ''))} | {cell(what)} | "
                    f"{cell(refusals_of(section, f.name))} |")
    return rows


def doc_line(cls) -> str:
    """The first paragraph of ``cls``'s docstring, on one line."""
    return " ".join((inspect.getdoc(cls) or "").split("\n\n")[0].split())


def campaign_page() -> str:
    """docs/reference/campaign-file.md, whole."""
    out = [HEADER.format(source="lab/orchestration/config.py and lab/inputs/variants.Variant").rstrip("\n"), "",
           "# Campaign file: every key", "",
           "The keys `iteralab protocol lock` accepts, section by section, from the typed sections of "
           "`lab/orchestration/config.py` and the variant fields of `lab/inputs/variants.py`. A key not listed "
           "is refused (naming the nearest valid one), and so is a value of the wrong type (`true` is never "
           "an integer) or outside the allowed values; each refusal, as printed: [../refusals.md](../refusals.md). "
           "How to write the file: [../campaign-file.md](../campaign-file.md). A note is the comment beside the "
           "field in the source, else the one beside the key in a demo campaign (`lab/defaults/demo.toml`, "
           "`demo/campaign-*.toml`), where it may speak of the demo's own value.", "",
           f"Top-level tables: {listed(config.TOP_KEYS)}. Required: "
           + listed(k for k in ("campaign", "corpus", "model", "quality", "timing"))
           + ", and at least one `[[series]]`; without `[cost]` nothing is priced; without `[task]` the kind is "
             "`classification`.", ""]
    for name, cls in config.SECTIONS.items():
        out += [f"## [{name}]", "", doc_line(cls), ""]
        if cls is config.TaskSection:
            out += ["Keys each kind reads besides `kind` (another kind's key is refused): "
                    + "; ".join(f"{kind.name}: {listed(kind.accepted_keys) if kind.accepted_keys else 'none'}"
                                for kind in KINDS.values()) + ". `entry` and `files` beside `embedding` or "
                    "`generation`: the user's own code returns that kind's result (docs/task-custom.md).", ""]
        out += key_table(name, cls) + [""]
    out += ["## [defaults] and [[series]]: variant fields", "",
            doc_line(variants.Variant), "",
            "`[defaults]` sets any of these for every variant; each `[[series]]` varies one of them "
            "(`factor`) over `values` and may fix others (every other key of the table). A series also "
            "takes `name` (a string, required), `factor` (a variant field, required) and `values` (a list "
            "of that field's values, required).", ""]
    out += key_table("variant", variants.Variant, list(config.VARIANT_KEYS), where="defaults") + [""]
    return "\n".join(out).rstrip("\n") + "\n"


def options(p: argparse.ArgumentParser) -> list[str]:
    """The table of one parser's arguments: argument, default, what it does."""
    rows = ["| argument | default | what it does |", "|---|---|---|"]
    for a in p._actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        name = ", ".join(f"`{s}`" for s in a.option_strings) or f"`{a.metavar or a.dest}`"
        if a.option_strings and a.nargs != 0:
            name += f" {a.metavar or a.dest.upper()}"
        if a.option_strings and a.required:
            name += " (required)"
        if not a.option_strings and a.nargs in ("?", "*"):
            name += " (optional)"
        if a.nargs == "+":
            name += " ..."
        default = "" if a.default is None or a.default is False or a.default is argparse.SUPPRESS else f"`{a.default}`"
        if a.default is not None and isinstance(a.default, str) and str(REPO) in a.default:
            default = f"`{Path(a.default).relative_to(REPO)}`"
        what = a.help or ""
        if a.choices:
            what = (what + "; " if what else "") + "one of " + listed(a.choices)
        rows.append(f"| {name} | {default} | {cell(what)} |")
    return rows


def verbs(p: argparse.ArgumentParser, prefix: str) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(command line, help, parser) of every leaf verb under ``p``, in the parser's order."""
    out = []
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            helps = {c.dest: c.help for c in a._choices_actions}
            for name, sub in a.choices.items():
                inner = verbs(sub, f"{prefix} {name}")
                out += inner or [(f"{prefix} {name}", helps.get(name) or "", sub)]
    return out


def cli_page() -> str:
    """docs/reference/cli.md, whole."""
    from lab import cli

    saved = os.environ.get("XDG_CONFIG_HOME")
    os.environ["XDG_CONFIG_HOME"] = "~/.config"  # help that names the default folder as on any machine
    try:
        top = cli.parser()
    finally:
        if saved is None:
            os.environ.pop("XDG_CONFIG_HOME")
        else:
            os.environ["XDG_CONFIG_HOME"] = saved
    out = [HEADER.format(source="the parser of lab/cli.py").rstrip("\n"), "", "# Command line: every verb and option",
           "", "`iteralab` (`.venv/bin/iteralab` in the bundle, or `python -m lab.cli`), from `lab.cli.parser()`. "
           "`iteralab VERB --help` prints the same.", ""]
    doc = (cli.__doc__ or "").split("\n\n")
    out += [" ".join(doc[-1].split()), ""]
    for line, what, sub in verbs(top, "iteralab"):
        out += [f"## `{line}`", "", cell(what) + ("" if what.endswith(".") else "."), ""]
        if sub.description and sub.description != what:
            out += [" ".join(sub.description.split()), ""]
        out += options(sub) + [""]
    return "\n".join(out).rstrip("\n") + "\n"


PAGES = {CAMPAIGN_PAGE: campaign_page, CLI_PAGE: cli_page}


def stale() -> list[Path]:
    """The pages whose text differs from what the code generates now."""
    return [page for page, make in PAGES.items()
            if not page.exists() or page.read_text(encoding="utf-8") != make()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each stale page")
    args = ap.parse_args(argv)
    if args.check:
        old = stale()
        for page in old:
            print(f"{page.relative_to(REPO)} is stale; run `{COMMAND}`", file=sys.stderr)
        return 1 if old else 0
    OUT.mkdir(parents=True, exist_ok=True)
    for page, make in PAGES.items():
        text = make()
        page.write_text(text, encoding="utf-8")
        print(f"{len(text.splitlines())} lines -> {page.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
