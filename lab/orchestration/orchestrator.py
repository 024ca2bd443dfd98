"""Runs a locked campaign's rotated schedule through a launcher, one pass at a time; resumes.

The orchestrator is independent of any UI: state lives in the campaign folder's SQLite
journal. A pass left 'running' by a killed orchestrator becomes an 'interrupted' row that
stays, and its slot is run again as a new attempt; every attempt is a row (SPEC 2: pass).
Nothing is retried with a smaller batch (seed: "Non sostituire silenziosamente").
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import shutil
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from lab.facts.constants import SYSTEMATIC_FAILURES, USER_METRIC_TIMEOUT_S
from lab.facts.diskfull import DiskFull, atomic_write_text, is_disk_full
from lab.facts.errors import FailureKind, LabError, ProtocolError, clip
from lab.facts.files import tail_text
from lab.facts.host import iteralab_command
from lab.facts.host_cards import check_cards_fit_host
from lab.inputs.corpus import read_corpus
from lab.inputs.manifest import record_host_facts
from lab.inputs.variants import Variant
from lab.kinds.kind import TEXT, VECTOR
from lab.launchers.base import LaunchOutcome
from lab.orchestration.identity import InputsChanged, InputWatch
from lab.orchestration.journal import Journal
from lab.orchestration.protocol import Protocol, load_protocol, lock_path, locked_version
from lab.orchestration.schedule import pass_id_for
from lab.orchestration.search import planned_passes, skip_reason
from lab.orchestration.status import CampaignState, etas, format_duration, process_create_time, typical_pass_s
from lab.orchestration.validate import (
    Validation,
    corpus_outputs,
    corpus_vectors,
    judged_by_agreement,
    no_reference_left,
    validate_embedding_pass,
    validate_generation_pass,
    validate_pass,
)
from lab.passes.distributed import ProgressTally
from lab.passes.events import FILLS_SLOT, EventKind, PassStatus, parse_event
from lab.passes.failures import native_oom_line
from lab.passes.records import PassResult, decode_result
from lab.passes.spec import PassSpec

ENTRY_TEXTS = "entry_texts.jsonl"
"""The corpus without labels a pass of the user's code reads, in the campaign folder
(Orchestrator.entry_corpus_path); never archived (derived from the locked corpus)."""


class Reference(NamedTuple):
    """The reference variant's pass validations compare with: ``predictions`` {id: pred} (None
    while no valid reference pass exists), its ``metric``, its ``pass_id`` ("" when none)."""

    predictions: Any  # {id: pred}; an embedding campaign's vectors in corpus order (numpy (n, width)); None: none yet
    metric: float | None
    pass_id: str


PROGRESS_EVERY_S = 30.0
LOG_TAIL_BYTES = 8192  # the end of a crashed pass's log read for its last words (native_oom_line)
"""With ``echo`` (a headless run), one progress line per pass at least this often: items done,
items/s, ETA of the pass and of the campaign (``progress_line``)."""


def _progress_period(value: str | None) -> float:
    """$ITERALAB_PROGRESS_EVERY_S as seconds (a positive number), else PROGRESS_EVERY_S."""
    try:
        period = float(value) if value else PROGRESS_EVERY_S
    except ValueError:
        return PROGRESS_EVERY_S
    return period if 0 < period < float("inf") else PROGRESS_EVERY_S


def progress_line(head: str, done: int, total: int, rate: float | None, elapsed_s: float, phase: str,
                  later_passes: int, typical_pass_s: float | None) -> str:
    """One headless progress line: '<head>: <phase>, 120/1000 items, 41.2 items/s, pass ETA 21 s,
    campaign ETA 4 min 10 s (3 passes after this one)'. The campaign ETA is the pass's ETA plus
    ``later_passes`` x ``typical_pass_s`` (the median wall time of this campaign's finished passes;
    None: this pass's own projected time); unknown until items flow (lab.orchestration.status.etas)."""
    pass_eta, campaign_eta = etas(done, total, rate, elapsed_s, later_passes, typical_pass_s)
    speed = f"{rate:.1f} items/s" if rate else "no items/s yet"
    return (f"{head}: {phase or 'starting'}, {done}/{total} items, {speed}, elapsed {format_duration(elapsed_s)}, "
            f"pass ETA {format_duration(pass_eta)}, campaign ETA {format_duration(campaign_eta)} "
            f"({later_passes} pass(es) after this one)")


class CampaignBusy(LabError, RuntimeError):
    """Another orchestrator already runs this campaign version (one writer per journal)."""


class CampaignFolderLost(LabError, RuntimeError):
    """The campaign folder or its journal was deleted or replaced while the campaign ran."""


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class SystematicFailures:
    """Consecutive passes ending in the same error before any item (the rule and its reason:
    lab.facts.constants.SYSTEMATIC_FAILURES). ``add`` takes each run_slot row in order and
    returns the one-line reason to block the campaign, or ''; ``pass_ids`` are the streak's
    passes (the orchestrator makes them interrupted rows: their slots run again on resume)."""

    def __init__(self, limit: int = SYSTEMATIC_FAILURES):
        self.limit = limit
        self.rows: list[tuple[str, str, str]] = []  # (error, variant id, pass id) of the current streak

    @property
    def pass_ids(self) -> list[str]:
        return [p for _, _, p in self.rows]

    def add(self, row: dict, variant_id: str) -> str:
        if row["status"] != PassStatus.ERROR or row.get("items") or not row.get("error"):
            self.rows = []
            return ""
        if self.rows and self.rows[-1][0] != row["error"]:
            self.rows = []
        self.rows.append((row["error"], variant_id, row.get("pass_id", "")))
        variants = {v for _, v, _ in self.rows}
        if len(self.rows) < self.limit or len(variants) < 2:
            return ""
        return (f"{len(self.rows)} passes in a row, of {len(variants)} variants, failed the same way before "
                f"any item ({clip(row['error'], 160)}): a fault of the host, image or inputs, not of a variant; "
                "fix it, then run the campaign again to resume")


def campaign_dir_for(proto: Protocol, version: dict, runs_root: Path) -> Path:
    """runs/<campaign name>/v<version>-<first 8 hex of the protocol hash>/."""
    return Path(runs_root) / proto.name / f"v{version['version']}-{version['sha256'][:8]}"


def model_extra(m) -> dict:
    """PassSpec.extra from a [model] section (lab.orchestration.config.ModelSection): the declared
    ``pad_token`` and hub ``revision``, each only when given; every load in the pass applies them."""
    return {k: getattr(m, k) for k in ("pad_token", "revision") if getattr(m, k)}


def model_labels(model_ref: str, revision: str | None = None) -> set[str] | None:
    """Label names (config.json id2label) of a local checkpoint, or of the hub snapshot
    ``model_ref`` at ``revision`` resolves to in the local cache; None when neither is there."""
    from lab.inputs.models import ModelFolderError, model_folder

    try:
        cfg = model_folder(model_ref, revision) / "config.json"
    except ModelFolderError:
        return None
    if cfg.is_file():
        return set(json.loads(cfg.read_text()).get("id2label", {}).values()) or None
    return None


def pass_line(head: str, status: str, items: int | None, measured_s: float | None, v: Validation,
              notes: list[str], serving: dict | None = None) -> str:
    """The one live line of a finished pass (CLI progress, headless ``make up``, the UI's log):
    "pass 1/3 p001: ok, 40 items, measured window 3.91 s, rejected: nn_accuracy 0.3500 < threshold
    0.5". A pass that ran ok may still be rejected on quality, so an ok line carries the verdict in
    the one wording the status lines read (lab.passes.records Validation.verdict); another status
    carries its notes (at most 160 characters). A server pass's line says whether it held the
    latency objective (``serving``: its result's record; lab.passes.tasks.server_job.ServingRecord)."""
    took = f", measured window {measured_s:.2f} s" if measured_s else ""
    tail = f", {v.verdict()}" if status == PassStatus.OK else (f" ({clip('; '.join(notes), 160)})" if notes else "")
    return f"{head}: {status}, {items} items{took}{objective_text(serving)}{tail}"


def objective_text(serving: dict | None) -> str:
    """', latency objective held' or ', latency objective not held (TTFT p99 ...)' of a server pass's
    serving record; '' for an offline pass or a record this lab cannot read."""
    from lab.passes.tasks.server_job import serving_record

    rec = serving_record(serving)
    if rec is None:
        return ""
    return (", latency objective held" if rec.verdict.holds else
            f", latency objective not held ({clip('; '.join(rec.verdict.failed), 120)})")


class Orchestrator:
    """Runs the schedule of one protocol version in ``campaign_dir`` through ``launcher``."""

    def __init__(self, campaign_dir: Path, proto: Protocol, launcher, version: dict):
        self.dir = Path(campaign_dir)
        self.proto = proto
        self.launcher = launcher
        self.version = version
        self.journal = Journal(self.dir / "journal.sqlite")
        st = os.stat(self.dir / "journal.sqlite")
        self._journal_inode = (st.st_dev, st.st_ino)
        self._corpus: list[dict] | None = None
        self._labels: set[str] | None = None
        self._labels_read = False
        self._reference: Reference | None = None  # found once, reused (reference())
        self.variants: dict[str, Variant] = {v.variant_id: v for v in proto.variants}
        self.echo: Callable[[str], None] | None = None  # one line per pass start/end (CLI)
        # with echo: a progress line this often during a pass ($ITERALAB_PROGRESS_EVERY_S, else 30 s)
        self.progress_every_s = _progress_period(os.environ.get("ITERALAB_PROGRESS_EVERY_S"))
        self.watch: InputWatch | None = None  # the corpus and model files, while run() runs
        self._ran: list[str] = []  # attempts this run() made
        self.metric_timeout_s = USER_METRIC_TIMEOUT_S  # one call of a user's metric, in its own process

    @classmethod
    def prepare(cls, campaign_file: str | Path, runs_root: str | Path, launcher) -> "Orchestrator":
        """Load and check the locked protocol, create its campaign folder and journal plan.

        Raises ProtocolError when the protocol is not locked or was edited after lock, when the
        journal's plan (made earlier) names a variant id this protocol no longer gives
        (:meth:`check_plan`), and CardsBeyondHost (a ProtocolError) when a variant asks for more
        cards than this host has.
        """
        proto = load_protocol(campaign_file)
        version = locked_version(proto)
        check_cards_fit_host(proto.variants, proto.config.timing.threads)
        d = campaign_dir_for(proto, version, Path(runs_root))
        (d / "passes").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(proto.path, d / "campaign.toml")
        shutil.copyfile(lock_path(proto.path), d / "campaign.lock.json")
        if proto.card_path and proto.card_path.is_file():
            shutil.copyfile(proto.card_path, d / "corpus_card.json")
        atomic_write_text(d / "protocol_version.json", json.dumps(
            {k: v for k, v in version.items() if k != "protocol"}, indent=1) + "\n")
        orch = cls(d, proto, launcher, version)
        orch.journal.set_plan(planned_passes(list(proto.variants), proto.timing["repetitions"],
                                             proto.config.scenario.search))
        orch.check_plan()
        orch.journal.set_control("campaign_file", str(proto.path))
        return orch

    def check_entry_mount(self) -> None:
        """Raise ProtocolError (one line) when a [task] files item lies outside the [task] entry's
        folder and passes run in containers: the Docker launcher mounts the entry's folder, read
        only, and nothing else of the user's (lab.launchers.docker.C_TASK)."""
        files = self.proto.task_files()
        if self.launcher.name == "local" or "entry" not in files:
            return
        folder = files["entry"].resolve().parent
        outside = [k.split(":", 1)[1] for k, p in files.items()
                   if k.startswith("file:") and folder not in p.resolve().parents]
        if outside:
            raise ProtocolError(f"[task] files {outside[0]} lies outside the entry's folder {folder}, the only "
                                f"folder of yours the {self.launcher.name} launcher mounts; move it there "
                                "(and list it again) or use --launcher local")

    def check_launcher(self) -> None:
        """Raise ProtocolError (one line, with the fix) when a ``compile = true`` variant cannot
        compile where this launcher runs passes: torch.compile needs a C++ compiler for a CPU
        device and a C compiler for Triton on a GPU (lab.passes.compile.COMPILER_PROBE, run in
        the pass environment: the local Python or the pass image). Every pass of such a
        variant would fail at its compile phase. Nothing is probed without compile variants
        or for a launcher without ``probe_compile_toolchain``. A user's own code: see
        :meth:`check_entry_mount`."""
        self.check_entry_mount()
        probe = getattr(self.launcher, "probe_compile_toolchain", None)
        if probe is None:
            return
        from lab.facts.host import gpu_count
        from lab.passes.compile import compile_kinds

        variants = self.proto.variants
        auto = any(v.compile and v.device in ("auto", "") for v in variants)
        kinds = compile_kinds(variants, gpu_host=auto and gpu_count()[0] > 0)
        for kind, name in kinds.items():
            why = probe(kind)
            if why:
                where = getattr(self.launcher, "image_ref", None) or f"{self.launcher.name} launcher"
                raise ProtocolError(
                    f"variant {name} declares compile = true, but torch.compile cannot build {kind} kernels where "
                    f"passes run ({where}: {why}); declare compile = false, or run the passes where a compiler "
                    "is installed (e.g. --launcher local on a host with g++)")

    def check_plan(self) -> None:
        """Raise ProtocolError unless every plan row's variant id is one of this protocol's.

        The plan is recorded once (Journal.set_plan) and names variants by their
        content-derived id; a lab version that derives ids differently, or an edited journal,
        leaves ids the protocol no longer gives. Nothing is written or run then.
        """
        for slot in self.journal.plan():
            self.variant_for(slot)

    def variant_for(self, slot: dict) -> Variant:
        """The locked protocol's own Variant for a plan row (or an attempt row) by its
        ``variant_id``. Raises ProtocolError (one line, with the fix) for an id it does not give."""
        vid = str(slot.get("variant_id"))
        try:
            return self.variants[vid]
        except KeyError:
            raise ProtocolError(
                f"{self.dir / 'journal.sqlite'}: its plan names variant {vid!r} (slot {slot.get('seq')}), which "
                f"{self.proto.path.name} no longer gives (ids derived by another lab version, or an edited journal); "
                "finish this campaign with the lab version that planned it, or make a new protocol version "
                f"(change the campaign file, e.g. [campaign] name, then `{iteralab_command()} protocol lock "
                f"{self.proto.path}`) planned afresh") from None

    @property
    def corpus(self) -> list[dict]:
        if self._corpus is None:
            self._corpus = read_corpus(self.proto.corpus_path)
        return self._corpus

    def entry_corpus_path(self) -> Path:
        """The corpus file a pass reads: the locked corpus itself, or, for a task that runs the user's
        code (``[task] entry``), ``ENTRY_TEXTS`` in the campaign folder: the same items in the same
        order without their ``label`` (written here, before the first pass of each run), so the entry
        gets the texts it must process and never the gold labels it is judged by."""
        if not self.proto.config.task.entry:
            return Path(self.proto.corpus_path)
        path = self.dir / ENTRY_TEXTS
        text = "".join(json.dumps({k: v for k, v in r.items() if k != "label"}) + "\n" for r in self.corpus)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            atomic_write_text(path, text)
        return path

    # ---- running ---------------------------------------------------------------------
    def pending(self) -> list[dict]:
        """Planned slots without a finished attempt (interrupted ones are run again)."""
        done = {a.seq for a in self.journal.attempts() if a.status in FILLS_SLOT}
        return [p for p in self.journal.plan() if p["seq"] not in done]

    def run(self) -> str:
        """Run every pending pass. Returns the final state: finished, paused, stopped or blocked
        (a pass found no usable GPU for its declared device: never a silent CPU fallback).

        Raises CampaignBusy when another orchestrator holds this campaign folder, and
        InputsChanged (one line naming the file; the campaign is then stopped) when the corpus
        or a model file changes under the campaign (lab.orchestration.identity.InputWatch): checked by stat
        before and after every pass, by a full sha256 after the last one. A pass that may have
        read a changed input becomes an 'interrupted' row (never accepted; its slot runs again).
        """
        lock_file = open(self.dir / "orchestrator.lock", "w")
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            info = self.journal.get_control("orchestrator", {}) or {}
            lock_file.close()
            raise CampaignBusy(f"{self.dir}: another orchestrator (pid {info.get('pid')}) is running this "
                               "campaign; watch it with "
                               f"`{iteralab_command()} campaign status {shlex.quote(str(self.dir))}` or stop it "
                               "first") from None
        try:
            return self._run()
        except Exception as exc:  # a full disk under the journal or a pass folder: one line, resumable
            if is_disk_full(exc):
                raise (exc if isinstance(exc, DiskFull) else DiskFull(self.dir, "running the campaign")) from None
            if not isinstance(exc, LabError):  # the folder went mid-step (a pass's log.txt could
                self.check_folder()  # not be opened, ...): that is the reason, not the symptom
            raise
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)
            lock_file.close()

    def _run(self) -> str:
        j = self.journal
        self.check_plan()  # before anything is written: an unknown id is a one-line ProtocolError
        self.check_launcher()  # a compile variant this launcher can never compile: one line, nothing run
        self.watch = InputWatch(self.proto, self.version)  # inputs changed since lock: one line, nothing run
        self._ran = []
        j.set_control("orchestrator", {"pid": os.getpid(), "process_create_time": process_create_time(),
                                       "started": utc_now(), "launcher": self.launcher.name})
        self.apply_limits()
        j.set_control("state", CampaignState.RUNNING)
        j.set_control("stop", False)
        j.set_control("inputs_changed", "")
        try:
            j.set_control("launcher", self.launcher.describe())
        except Exception as exc:  # the manifest says why the launcher could not be described
            j.set_control("launcher", {"launcher": self.launcher.name, "describe_error": str(exc)[:200]})
        # the manifest's environment is the one the passes ran in, recorded now (each start or resume);
        # the launcher of each start too: a resume with other options must not erase the earlier ones
        host = record_host_facts()
        j.set_control("hosts", [*(j.get_control("hosts", None) or []), host])
        j.set_control("launchers", [*(j.get_control("launchers", None) or []),
                                    {"recorded_at": host["recorded_at"], **j.get_control("launcher", {})}])
        for pid in j.mark_running_interrupted(
                "interrupted: the orchestrator stopped while this pass ran; row kept, slot run again"):
            j.add_event(pid, EventKind.INTERRUPTED, {"pass_id": pid})
        from lab.orchestration.status import stop_pass_processes

        for proc in stop_pass_processes(self.dir):  # a pass process an interrupted run left unwatched
            j.add_event(proc["pass_id"], EventKind.LEFTOVER, {
                "process": proc, "note": "pass process left from an interrupted run; killed before the next pass"})
            if self.echo:
                self.echo(f"leftover pass process {proc['pid']} of pass {proc['pass_id']} killed before the next pass")
        if hasattr(self.launcher, "stop_leftovers"):
            for c in self.launcher.stop_leftovers(self.proto.name):
                j.add_event(c.get("pass", ""), EventKind.LEFTOVER, {
                    "container": c, "note": "left from an interrupted run; stopped and removed before "
                                            "the next pass, never reused"})
                if self.echo:
                    self.echo(f"leftover container {c['name']} of pass {c['pass']} ({c['status_before']}) "
                              "stopped and removed before the next pass")
        state = CampaignState.FINISHED
        streak = SystematicFailures()
        for slot in self.pending():
            self.check_folder()
            if j.get_control("pause", False):
                j.set_control("pause", False)
                state = CampaignState.PAUSED
                break
            if j.get_control("stop", False):
                state = CampaignState.STOPPED
                break
            self.stop_if_changed(self.watch.stat_change())
            if self.skip_by_search(slot):
                continue
            row = self.run_slot(slot)
            self.stop_if_changed(row.get("inputs_changed", ""))
            self.check_folder()
            if j.get_control("stop", False):
                state = CampaignState.STOPPED
                break
            if row.get("disk_full"):
                j.set_control("state", CampaignState.STOPPED)
                j.set_control("orchestrator", {"pid": None, "ended": utc_now()})
                raise DiskFull(self.dir / "passes" / row["pass_id"], "writing the pass's predictions")
            if row["status"] == PassStatus.ERROR and row["failure_kind"] == FailureKind.DEVICE_UNAVAILABLE:
                j.set_control("blocked", row["notes"])
                state = CampaignState.BLOCKED
                break
            why = streak.add(row, slot["variant_id"])
            if why:  # not measurements of the variants: the rows stay (interrupted), their slots run again
                j.interrupt(streak.pass_ids, "interrupted: the campaign blocked on this failure, repeated "
                                             "across variants; slot run again on resume")
                self.revalidate_all()
                j.set_control("blocked", why)
                if self.echo:
                    self.echo(f"campaign blocked: {why}")
                state = CampaignState.BLOCKED
                break
        if state == CampaignState.FINISHED:
            changed = self.watch.stat_change() or self.watch.hash_change()
            if changed:  # which pass read the change is unknown: none of this run's passes stands
                j.interrupt(self._ran, f"interrupted: {changed.split(';')[0]} (found after the last pass); "
                                       "slot run again on resume")
                self.revalidate_all()  # their validations now say: not accepted (status interrupted)
                self.stop_if_changed(changed)
            self.revalidate_all(final=not changed)  # a changed input runs its slots again on resume
        j.set_control("state", state)
        j.set_control("orchestrator", {"pid": None, "ended": utc_now()})
        return state

    def stop_if_changed(self, changed: str) -> None:
        """Nothing when ``changed`` is ''; else record the campaign as stopped and raise
        InputsChanged(``changed``)."""
        if changed:
            self.journal.set_control("inputs_changed", changed)  # why it stopped, for status and the UI
            self.journal.set_control("state", CampaignState.STOPPED)
            self.journal.set_control("orchestrator", {"pid": None, "ended": utc_now()})
            raise InputsChanged(changed)

    def check_folder(self) -> None:
        """Raise CampaignFolderLost when the journal this orchestrator writes is no longer the
        file at ``<campaign folder>/journal.sqlite`` (folder deleted, moved or replaced):
        writing on would record passes nowhere and report a campaign as finished."""
        try:
            st = os.stat(self.dir / "journal.sqlite")
            same = (st.st_dev, st.st_ino) == self._journal_inode
        except OSError:
            same = False
        if not same:
            raise CampaignFolderLost(
                f"{self.dir}: campaign folder or its journal was deleted or replaced while the campaign ran; "
                f"stopped (nothing more is written). Run `{iteralab_command()} campaign run "
                f"{shlex.quote(str(self.proto.path))}` again to start afresh")

    def apply_limits(self) -> None:
        """Give the launcher the campaign's pass timeout and stall rule ([timing]); a stricter
        limit the launcher already has stays. Recorded in the journal."""
        t = self.proto.config.timing
        limits = {}
        for attr, value in (("timeout_s", t.pass_timeout_s), ("stall_s", t.stall_s)):
            if hasattr(self.launcher, attr):
                current = getattr(self.launcher, attr)
                setattr(self.launcher, attr, value if current is None else min(current, value))
                limits[attr] = getattr(self.launcher, attr)
        self.journal.set_control("pass_limits", limits)

    def skip_by_search(self, slot: dict) -> bool:
        """Under [scenario] search, record slot ``slot`` as SKIPPED, not run, when a lower rate of its
        configuration did not hold the objective in its repetition (lab.orchestration.search:
        the rule, its note the reason); False (nothing written) otherwise."""
        if not self.proto.config.scenario.search:
            return False
        j = self.journal
        attempts = j.attempts()
        why = skip_reason(j.planned(), attempts, slot["seq"])
        if not why:
            return False
        variant = self.variant_for(slot)
        attempt = 1 + sum(1 for a in attempts if a.seq == slot["seq"])
        pass_id = pass_id_for(slot["seq"], slot["repetition"], variant.variant_id, attempt)
        now = utc_now()
        j.start_attempt(pass_id, slot["seq"], attempt, slot["repetition"], slot["position"], variant, now,
                        self.launcher.name, len(self.corpus))
        j.finish_attempt(pass_id, PassStatus.SKIPPED, now, None, 0, None, why)
        if self.echo:
            self.echo(f"pass {slot['seq']}/{len(j.plan())} {pass_id} ({variant.label}) {why}")
        return True

    def run_slot(self, slot: dict) -> dict:
        """Run one attempt of a planned slot and record its row, events and validation."""
        j = self.journal
        attempt = 1 + sum(1 for a in j.attempts() if a.seq == slot["seq"])
        # the locked protocol's own Variant (ids are content-derived, so the plan row's id names
        # exactly this configuration): no JSON -> dict -> Variant round trip per pass
        variant = self.variant_for(slot)
        pass_id = pass_id_for(slot["seq"], slot["repetition"], variant.variant_id, attempt)
        pass_dir = self.dir / "passes" / pass_id
        pass_dir.mkdir(parents=True, exist_ok=True)
        t = self.proto.timing
        spec = PassSpec(campaign=self.proto.name, pass_id=pass_id, variant=variant,
                        corpus_path=str(self.entry_corpus_path()), model_ref=self.proto.model_ref,
                        out_dir=str(pass_dir), warmup_items=t["warmup_items"],
                        warmup_passes=t["warmup_passes"], seed=t["seed"],
                        threads=t["threads"],
                        extra={**model_extra(self.proto.config.model), **self.proto.task_extra(),
                               **(self.proto.config.scenario.extra() if variant.request_rate is not None else {})})
        spec.write(pass_dir / "pass.json")
        j.start_attempt(pass_id, slot["seq"], attempt, slot["repetition"], slot["position"],
                        variant, utc_now(), self.launcher.name, len(self.corpus))
        j.add_event(pass_id, EventKind.START, {"variant": variant.label, "attempt": attempt})
        if self.echo:
            self.echo(f"pass {slot['seq']}/{len(j.plan())} {pass_id} ({variant.label}) started")
        last: dict = {"done": 0, "rate": None, "phase": ""}
        tally = ProgressTally()  # multi-card passes: each card reports its own count

        def on_line(line: str) -> None:
            ev = parse_event(line)
            if ev is None:
                return
            kind = ev.get("event", "")
            done = tally.update(ev)
            if kind == EventKind.PHASE and "duration_s" not in ev:  # a phase starts (its end carries duration_s)
                last["phase"] = str(ev.get("phase", ""))
            if kind == EventKind.PROGRESS and "rank" not in ev:
                last["rate"] = ev.get("items_per_s")
            if done is not None:
                last["done"] = done
                j.update_progress(pass_id, done, ev.get("items_per_s")
                                  if kind == EventKind.PROGRESS and "rank" not in ev else None)
            if kind in (EventKind.OOM, EventKind.ERROR):
                last["disk_full"] = ev.get("kind") == FailureKind.DISK_FULL
            if kind == EventKind.RESULT:  # the pass has written its files (result.json when it could)
                last["result"] = True
            j.add_event(pass_id, kind, ev)

        ticker = self._progress_ticker(slot, pass_id, last) if self.echo else None
        try:
            outcome = self.launcher.launch(spec, pass_dir, on_line,
                                           should_stop=lambda: bool(j.get_control("stop", False)))
        except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP (lab.service.campaigns.interrupt_on_signals)
            if last.get("result") and (pass_dir / "result.json").is_file():  # the pass had ended: its row stands
                why = getattr(exc, "reason", "") or "SIGINT (Ctrl-C)"
                self._record_outcome(slot, pass_id, pass_dir, LaunchOutcome(
                    None, note=f"the orchestrator got {why} after the pass wrote its result; its processes ended"),
                    last)
                self.journal.set_control("orchestrator", {"pid": None, "ended": utc_now(), "interrupted": why})
            else:
                self._record_interrupted(pass_id, last["done"], exc)
            raise
        finally:
            if ticker is not None:
                ticker.set()
        return self._record_outcome(slot, pass_id, pass_dir, outcome, last)

    def _record_outcome(self, slot: dict, pass_id: str, pass_dir: Path, outcome: LaunchOutcome, last: dict) -> dict:
        """Record how attempt ``pass_id`` ended: its row (status from the launch ``outcome`` and
        its result.json), its end event, a leftover event per process it left running (killed by
        the launcher), and its validation; returns run_slot's row."""
        j = self.journal
        self.check_folder()  # the folder may have gone while the pass ran: read nothing from it
        changed = self.watch.stat_change() if self.watch is not None else ""
        self._ran.append(pass_id)
        typed: PassResult | None = None  # result.json decoded strictly, once: read here, kept in the journal
        notes = []
        links = sorted(p.name for p in pass_dir.iterdir() if p.is_symlink())
        if links:  # a pass (or container) wrote links: never followed, never read
            notes.append(f"symbolic link(s) in the pass folder not followed: {', '.join(links)}")
        if (pass_dir / "result.json").is_file() and not (pass_dir / "result.json").is_symlink():
            try:
                typed = decode_result((pass_dir / "result.json").read_bytes())
                PassStatus(typed.status)
            except (msgspec.DecodeError, ValueError) as exc:  # DecodeError: not JSON, or not the record
                typed = None
                notes.append(f"result.json not a pass result ({clip(str(exc), 120)}): not read")
        if changed:  # the pass may have read the changed file: never accepted, slot run again
            status = PassStatus.INTERRUPTED
            notes.append(f"interrupted: {changed.split(';')[0]} during this pass; slot run again on resume")
        elif outcome.note == "stopped by the user":
            status = PassStatus.INTERRUPTED
            notes.append("interrupted: stopped by the user; slot run again on resume")
        elif last.get("disk_full"):  # not the variant's failure: the slot runs again once space is free
            status = PassStatus.INTERRUPTED
            notes.append(f"interrupted: no space left on device in {pass_dir}; slot run again on resume")
        elif outcome.killed_host_memory:
            status = PassStatus.KILLED
            notes.append(outcome.note or "killed, host memory")
        elif typed is not None:
            status = PassStatus(typed.status)
            if typed.error:
                notes.append(typed.error)
        else:
            code = outcome.exit_code
            oom_line = native_oom_line(code, tail_text(pass_dir / "log.txt", LOG_TAIL_BYTES))
            status = PassStatus.OOM if oom_line else PassStatus.ERROR
            notes.append(f"out of memory in native code: killed by signal {-(code or 0)} after {oom_line!r}"
                         if oom_line else f"crashed: killed by signal {-code}" if code is not None and code < 0
                         else f"crashed: exit code {code}, no result written")
            if outcome.note:
                notes.append(outcome.note)
        items = typed.items_completed if typed is not None and status != PassStatus.KILLED else last["done"]
        leftovers = outcome.extra.get("leftover_processes") or []
        if leftovers:  # the pass's own processes, still running when it ended: killed by the launcher
            notes.append(f"{len(leftovers)} process(es) the pass left running killed: "
                         + ", ".join(f"{p['pid']} {p['name']}" for p in leftovers[:3]))
            for p in leftovers:
                j.add_event(pass_id, EventKind.LEFTOVER, {
                    "process": p, "note": "left running by the pass when it ended; killed with the pass"})
        if outcome.container_id:
            notes.append(f"container {outcome.container_id[:12]}")
        j.finish_attempt(pass_id, status, utc_now(), outcome.exit_code, items,
                         {**(typed.to_json() if typed is not None else {}), "launch": outcome.__dict__},
                         "; ".join(notes))
        j.add_event(pass_id, EventKind.END, {"status": status, "items_completed": items, "notes": notes})
        v = self.validate_attempt(pass_id)
        if self.echo:
            measured = typed.phases_s.measured if typed is not None else None
            self.echo(pass_line(f"pass {slot['seq']}/{len(j.plan())} {pass_id}", status, items, measured, v,
                                notes, typed.serving if typed is not None else None))
        if v.reference_pass == pass_id:
            self.judge_waiting(pass_id)
        return {"pass_id": pass_id, "status": status, "notes": "; ".join(notes), "items": items,
                "error": (typed.error if typed is not None and typed.error else
                          "; ".join(n for n in notes if not n.startswith("container "))),
                "failure_kind": typed.failure_kind if typed is not None else None,
                "disk_full": bool(last.get("disk_full")), "inputs_changed": changed}

    def _progress_ticker(self, slot: dict, pass_id: str, last: dict):
        """Start a thread that echoes ``progress_line`` every ``progress_every_s`` while the pass
        runs; returns the Event that stops it. Reads only ``last`` (written by the line reader)."""
        import threading
        import time

        typical = typical_pass_s(self.journal.attempts())
        later = max(0, len(self.pending()) - 1)
        total, planned, started = len(self.corpus), len(self.journal.plan()), time.monotonic()
        stop = threading.Event()
        echo = self.echo

        def tick() -> None:
            while not stop.wait(self.progress_every_s):
                try:
                    assert echo is not None
                    echo(progress_line(f"pass {slot['seq']}/{planned} {pass_id}", last["done"], total, last["rate"],
                                       time.monotonic() - started, last["phase"], later, typical))
                except Exception:  # a closed terminal: the campaign goes on
                    pass

        threading.Thread(target=tick, daemon=True, name=f"progress-{pass_id}").start()
        return stop

    def _record_interrupted(self, pass_id: str, items: int, exc: BaseException) -> None:
        """The launch was interrupted (the launcher has killed the pass): its row becomes
        'interrupted' (kept, its slot runs again on resume) and no orchestrator is recorded as
        running. Containers of this campaign are stopped (Docker launcher)."""
        why = getattr(exc, "reason", "") or "SIGINT (Ctrl-C)"
        j = self.journal
        try:
            if hasattr(self.launcher, "stop_leftovers"):
                self.launcher.stop_leftovers(self.proto.name)
            j.finish_attempt(pass_id, PassStatus.INTERRUPTED, utc_now(), None, items,
                             {"launch": {"note": f"interrupted: {why}"}},
                             f"interrupted: the orchestrator got {why} while this pass ran; pass process killed, "
                             "row kept, slot run again on resume")
            j.add_event(pass_id, EventKind.INTERRUPTED, {"pass_id": pass_id, "reason": why})
            j.set_control("orchestrator", {"pid": None, "ended": utc_now(), "interrupted": why})
        except Exception:  # the journal itself is what failed (a full disk): the next run marks the row
            pass

    # ---- validation ------------------------------------------------------------------
    def labels(self) -> set[str] | None:
        """The model's label names (model_labels of [model] path, or id at revision), read once:
        the locked model's files do not change during the campaign. None for a custom entry: its
        code, not the [model] checkpoint's id2label, says what its labels are (any string is a
        label, one the references do not hold counts as wrong); None for any kind whose labels are
        not the checkpoint's (``model_labels``: only validate_pass reads them)."""
        if not self.proto.kind.model_labels:
            return None
        if not self._labels_read:
            self._labels = model_labels(self.proto.model_ref, self.proto.config.model.revision)
            self._labels_read = True
        return self._labels

    def metric_fn(self):
        """The user's [quality] metric function, None for a built-in metric: a
        lab.passes.tasks.custom.IsolatedMetric, each call in a process of its own (never in this
        one) bounded by ``metric_timeout_s`` and killed when the campaign is stopped (the metric is
        then empty with the reason; its file's sha256 is in the lock identity)."""
        if not self.proto.config.quality.user_metric:
            return None
        if getattr(self, "_metric_fn", None) is None:
            from lab.passes.tasks.custom import IsolatedMetric

            path = self.proto.task_files()["metric"]
            self._metric_fn = IsolatedMetric(f"{path}:{self.proto.config.quality.metric.rsplit(':', 1)[1]}",
                                             self.metric_timeout_s,
                                             should_stop=lambda: bool(self.journal.get_control("stop", False)))
        return self._metric_fn

    def reference(self) -> Reference:
        """The reference variant's first valid pass (ok, ids and format matching the corpus, a
        metric): its predictions by id (for an embedding campaign its vectors in corpus order,
        numpy (n, width); for a generation campaign its outputs by id), metric and pass id; (None, None, "") while none.

        Found once and reused for every later validation of the campaign (its predictions are
        read from disk once), as long as that attempt stays ok; an attempt's stored
        validation stands for its checks, so only an attempt not yet validated is validated here.
        """
        ref_id = self.proto.reference.variant_id
        attempts = {a.pass_id: a for a in self.journal.attempts()}
        if self._reference is not None:
            kept = attempts.get(self._reference.pass_id)
            if kept is not None and kept.status == PassStatus.OK:
                return self._reference
        self._reference = None
        # judged by agreement: a pass with ids and format right is the reference (its metric, its agreement
        # with itself, is only known once it is the reference); else it also needs its metric
        by_agreement = judged_by_agreement(self.proto.quality)
        for a in attempts.values():
            if a.variant_id != ref_id or a.status != PassStatus.OK:
                continue
            path = self.dir / "passes" / a.pass_id / "predictions.jsonl"
            v = a.validation if a.validation is not None else self.validate_file(path)
            if self.proto.kind.record == VECTOR:  # its vectors in corpus order
                vectors = corpus_vectors(self.corpus, path) if v.metric is not None or by_agreement else None
                if vectors is not None:
                    self._reference = Reference(vectors, v.metric, a.pass_id)
                    return self._reference
                continue
            if self.proto.kind.record == TEXT:  # its outputs by id
                outputs = corpus_outputs(self.corpus, path) if v.metric is not None or by_agreement else None
                if outputs is not None:
                    self._reference = Reference(outputs, v.metric, a.pass_id)
                    return self._reference
                continue
            if v.ids_match and v.format_ok and (v.metric is not None or by_agreement):
                preds = {}
                for line in path.read_text(encoding="utf-8").splitlines():
                    rec = json.loads(line)
                    preds[rec["id"]] = rec["pred"]
                self._reference = Reference(preds, v.metric, a.pass_id)
                return self._reference
        return Reference(None, None, "")

    def validate_file(self, path: Path, reference=None, reference_metric: float | None = None) -> Validation:
        """One pass's predictions file validated by the validation of the kind's prediction record
        (labels: validate_pass; vectors: validate_embedding_pass; texts: validate_generation_pass)
        against ``reference`` (the reference pass's predictions, as ``reference()`` holds them;
        None: not yet known) and its metric."""
        kind, quality = self.proto.kind, self.proto.quality
        if kind.record == VECTOR:
            return validate_embedding_pass(self.corpus, path, quality, reference, reference_metric)
        if kind.record == TEXT:
            return validate_generation_pass(self.corpus, path, quality, self.proto.config.task.normalisation or "",
                                            reference, reference_metric)
        return validate_pass(self.corpus, path, quality, self.labels(), reference, reference_metric,
                             prob_required=kind.model_labels,  # a custom entry returns labels only
                             metric_fn=self.metric_fn(), kind=kind.name)

    def validate_attempt(self, pass_id: str, ref: Reference | None = None, final: bool = False) -> Validation:
        """Validate attempt ``pass_id``'s predictions against the reference; store and return it.
        An attempt whose status is not ok is never accepted (its status is the first reason).
        ``final``: the campaign has ended, so a reference still missing will not come
        (validate.no_reference_left words it so, with the fix)."""
        ref = ref or self.reference()
        path = self.dir / "passes" / pass_id / "predictions.jsonl"
        a = next(x for x in self.journal.attempts() if x.pass_id == pass_id)
        v = self.validate_file(path, ref.predictions, ref.metric)
        v = v.replace(reference_pass=ref.pass_id)
        if final and not ref.pass_id:
            v = v.replace(reasons=no_reference_left(v.reasons))
        if a.status != PassStatus.OK:
            v = v.replace(corpus_accepted=False, reasons=[f"pass status {a.status}", *v.reasons])
        self.journal.set_validation(pass_id, v.to_json())
        return v

    def judge_waiting(self, reference_pass: str) -> None:
        """Pass ``reference_pass`` has just become the reference: the passes validated before it
        existed (their gap or agreement "not computed yet") are judged against it now, not only
        at the campaign's end, so status and the Runs screen show their verdict while it runs;
        a changed verdict is echoed (headless)."""
        ref = self.reference()
        for a in self.journal.attempts():
            if a.pass_id == reference_pass or a.validation is None or a.validation.reference_pass:
                continue
            v = self.validate_attempt(a.pass_id, ref)
            if self.echo and v.corpus_accepted != a.validation.corpus_accepted:
                self.echo(f"pass {a.pass_id} judged against reference pass {reference_pass}: {v.verdict()}")

    def revalidate_all(self, final: bool = False) -> None:
        """Validate every attempt against the same reference pass (run at campaign end: ``final``
        when it finished, see validate_attempt)."""
        ref = self.reference()
        for a in self.journal.attempts():
            if a.status != PassStatus.SKIPPED:  # never run: nothing to validate (lab.orchestration.search)
                self.validate_attempt(a.pass_id, ref, final)
