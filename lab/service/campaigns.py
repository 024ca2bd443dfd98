"""The service layer the CLI (``lab/cli.py``) and the UI (``tui/``) both call.

Where campaign folders live, which campaign file is the default, starting a detached
orchestrator, running the demo headless, writing control flags, assembling and verifying
the evidence archive. Read-only views that screens show (protocol, plan, cost, environment)
are in ``lab/service/views.py``. Nothing here prints: functions return values or raise
``CampaignError`` (one line: what is wrong and what to do).
"""

from __future__ import annotations

import difflib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from lab.evidence.format import CampaignUnfinished as CampaignUnfinished  # for the UI: a refusal with a way on
from lab.facts.errors import LabError, UserError
from lab.facts.files import REPO_ROOT, sha256_file
from lab.facts.host import iteralab_command
from lab.orchestration.protocol import DEMO_CAMPAIGN, ProtocolError, load_protocol, lock, locked_version, read_lock
from lab.orchestration.status import CampaignState
from lab.orchestration.status_record import CampaignStatus
from lab.service.campaign_records import ArchiveMade, HeadlessRun, LockedVersion, ReplayedCampaign

LAUNCHERS = ("auto", "local", "docker")


class CampaignError(UserError):
    """A campaign action that cannot be done now; one line with what to do."""


ONE_LINE_ERRORS: tuple[type[Exception], ...] = (LabError,)  # DiskFull included (a PassFailure)
"""What the CLI (exit status 2) and the screens show as one line, never a traceback: every error the
lab raises on purpose (``lab.facts.errors.LabError``: user errors, a busy journal or campaign, a lost
folder, pass failures). ``DiskFull`` among them (a ``PassFailure``)."""


def runs_root() -> Path:
    """Where campaign folders live: $ITERALAB_RUNS, else <repository>/runs (read at call time)."""
    return Path(os.environ.get("ITERALAB_RUNS") or REPO_ROOT / "runs")


def campaign_dir_of(campaign_file: str | Path) -> Path | None:
    """The folder of the file's current locked version when it holds a journal, else None."""
    from lab.orchestration.orchestrator import campaign_dir_for

    try:
        proto = load_protocol(campaign_file)
        d = campaign_dir_for(proto, locked_version(proto), runs_root())
    except ProtocolError:
        return None
    return d if (d / "journal.sqlite").exists() else None


def campaign_name_of(campaign_file: str | Path) -> str:
    """[campaign] name of the file, or the file name when it cannot be read."""
    try:
        return load_protocol(campaign_file).name
    except ProtocolError:
        return Path(campaign_file).name


def campaign_folders(limit: int = 5) -> list[Path]:
    """Up to ``limit`` campaign folders (holding journal.sqlite) under ``runs_root()``, newest
    first (runs/<name>/v<N>-<hash>/, lab.orchestration.orchestrator.campaign_dir_for)."""
    found = sorted(runs_root().glob("*/*/journal.sqlite"), key=lambda j: j.stat().st_mtime, reverse=True)
    return [j.parent for j in found[:limit]]


def no_target_hint(verb: str) -> str:
    """The one line of a TARGET command given no target: what to pass, and the campaign folders
    found under runs/ (``campaign_folders``), e.g. "give a campaign file or folder: `iteralab
    campaign status runs/demo/v1-0a1b2c3d` (campaigns under runs/: ...)"."""
    folders = campaign_folders()
    seen = (f"; campaigns under {runs_root()}: {', '.join(str(f) for f in folders)}" if folders
            else f"; no campaign folder under {runs_root()} yet")
    example = folders[0] if folders else "CAMPAIGN.toml"
    return f"{verb}: give a campaign file or campaign folder, e.g. `{iteralab_command()} {verb} {example}`{seen}"


def demo_copy() -> Path:
    """Where ``make up`` and ``iteralab demo`` put the demo campaign they lock and run: a copy of
    lab/defaults/demo.toml in <runs>/demo/ (so its lock lives beside it), not created here."""
    return runs_root() / "demo" / "demo.toml"


def _demo_target(p: Path) -> Path:
    """``p``, or the demo's copy (``demo_copy``) when ``p`` is lab/defaults/demo.toml and only the
    copy was run (the file docs/campaign-file.md starts from; ``make up`` locks the copy). Raises CampaignError
    (one line saying where the demo campaign lives) when neither was run."""
    if p.resolve() != DEMO_CAMPAIGN.resolve() or campaign_dir_of(p) is not None:
        return p
    if campaign_dir_of(demo_copy()) is not None:
        return demo_copy()
    raise CampaignError(f"{p}: the demo campaign is locked and run from its copy {demo_copy()} (by `make up` or "
                        f"`{iteralab_command()} demo`), which has not run yet; run the demo first")


def resolve_campaign_dir(target: str | Path | None, verb: str = "campaign status") -> Path:
    """A campaign folder (one holding journal.sqlite), or the folder of a campaign file's
    current locked version; lab/defaults/demo.toml stands for the copy the demo ran
    (``_demo_target``). Raises CampaignError (or ProtocolError for a bad file); no ``target``:
    CampaignError with ``no_target_hint(verb)`` (``verb``: the command, for its example)."""
    from lab.orchestration.orchestrator import campaign_dir_for

    if target is None:
        raise CampaignError(no_target_hint(verb))
    p = Path(target)
    if p.is_file():
        p = _demo_target(p)
    if p.is_dir() and (p / "journal.sqlite").exists():
        return p.resolve()  # '.', '..': the folder's own name (the archive is named after it)
    if p.is_file():
        proto = load_protocol(p)
        try:
            version = locked_version(proto)
        except ProtocolError as exc:  # an input changed since lock: the runs already made stay readable
            runs = [d for v in read_lock(proto.path) if (d := campaign_dir_for(proto, v, runs_root())).is_dir()
                    and (d / "journal.sqlite").exists()]
            if not runs:
                raise
            raise ProtocolError(f"{exc}; to read the run already made, give its campaign folder: "
                                f"`{iteralab_command()} {verb} {runs[-1]}`") from None
        d = campaign_dir_for(proto, version, runs_root())
        if not (d / "journal.sqlite").exists():
            raise CampaignError(f"{p}: no campaign run yet for this protocol version; "
                                f"`{iteralab_command()} campaign run {p}`")
        return d.resolve()
    if not p.exists():
        near = difflib.get_close_matches(p.name, [c.name for c in (p.parent if str(p.parent) else Path()).glob("*")
                                                  if c.suffix == ".toml" or c.is_dir()], n=1)
        raise CampaignError(f"{target}: no such file or folder; give a campaign file or its campaign folder"
                            + (f" (did you mean {p.with_name(near[0])}?)" if near else ""))
    raise CampaignError(f"{target}: neither a campaign file nor a campaign folder (one holding journal.sqlite)")


def demo_campaign_file() -> Path:
    """The demo campaign copied into <runs>/demo/ (so its lock lives beside it)."""
    copy = demo_copy()
    copy.parent.mkdir(parents=True, exist_ok=True)
    if not copy.exists():
        shutil.copyfile(DEMO_CAMPAIGN, copy)
    return copy


def default_campaign_file() -> Path:
    """$ITERALAB_CAMPAIGN or ./campaign.toml when the user wrote one, else the demo campaign."""
    user = Path(os.environ.get("ITERALAB_CAMPAIGN", REPO_ROOT / "campaign.toml"))
    return user if user.is_file() else demo_campaign_file()


# ---- launchers ---------------------------------------------------------------------

def memory_limit_bytes(value) -> int | None:
    """A per-pass host-memory limit (``--memory-limit``, ITERALAB_MEMORY_LIMIT): a positive
    integer of bytes, or None for the launcher's default. Raises CampaignError (one line) for
    anything else: 0 meant "no limit" to the Docker engine and "the default" once detached."""
    if value is None or value == "":
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = 0
    if isinstance(value, bool) or n < 1 or str(n) != str(value).strip():
        raise CampaignError(f"memory limit {value!r}: give a positive whole number of bytes per pass "
                            "(e.g. 8000000000), or none for the launcher's default")
    return n


def make_launcher(kind: str, memory_limit: int | None = None):
    """'local', 'docker' or 'auto' (docker when an engine and the image answer, else local).

    ``memory_limit``: bytes per pass (host memory). Raises CampaignError when 'docker' is
    asked and unavailable, when 'auto' would silently measure CPU passes on a GPU host, and
    when the image was built from another version of the lab (either launcher kind: its passes
    would run other code; lab.launchers.docker.check_image_sources).
    """
    from lab.launchers.local import LocalLauncher

    memory_limit = memory_limit_bytes(memory_limit)
    if kind in ("docker", "auto"):
        try:
            from lab.launchers.docker import DockerLauncher, ImageOutdated
        except ImportError as exc:
            if kind == "docker":
                raise CampaignError(f"docker launcher unavailable ({exc}); use --launcher local") from None
        else:
            try:
                return DockerLauncher.from_environment(mem_limit_bytes=memory_limit)
            except ImageOutdated as exc:  # built for containers, but from other code: never a silent switch
                raise CampaignError(f"{exc}, or run the passes without containers: `ITERALAB_LAUNCHER=local make up` "
                                    "(`--launcher local` for iteralab)") from None
            except Exception as exc:  # engine unreachable or image missing
                if kind == "docker":
                    raise CampaignError(f"docker launcher unavailable: {exc}") from None
                _refuse_silent_cpu(exc)
    return LocalLauncher(address_space_limit_bytes=memory_limit)


def _refuse_silent_cpu(docker_problem: Exception) -> None:
    """A GPU host whose containers cannot run and whose own torch sees no GPU must not
    quietly measure CPU passes: stop with the reason (never a silent CPU fallback)."""
    from lab.facts.host import detect_vendor

    vendor = detect_vendor()
    if vendor == "cpu":
        return
    try:
        import torch

        if torch.cuda.is_available():
            return
    except ImportError:
        pass
    raise CampaignError(f"{vendor} GPU found but containers cannot run ({docker_problem}) and this host's "
                        "torch sees no GPU; fix the engine or the image (`make doctor`), or pass "
                        "--launcher local to run on CPU on purpose")


# ---- starting and controlling --------------------------------------------------------

def spawn_detached(campaign: str | Path, launcher: str, memory_limit: int | None) -> tuple[Path, int]:
    """Start the orchestrator (`iteralab campaign run`) in its own session: closing the UI or
    SSH does not stop it. Returns (campaign folder, pid). Raises CampaignError when an
    orchestrator already runs this campaign version or the launcher is unavailable, ProtocolError
    when it is not locked or a compile = true variant cannot compile where passes run
    (``Orchestrator.check_launcher``)."""
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.status import campaign_status

    campaign = Path(campaign).resolve()
    orch = Orchestrator.prepare(campaign, runs_root(), make_launcher(launcher, memory_limit))
    if CampaignStatus.of(campaign_status(orch.dir)).alive:
        raise CampaignError(f"{orch.dir}: an orchestrator is already running this campaign; "
                            f"`{iteralab_command()} campaign status {shlex.quote(str(orch.dir))}` shows it")
    orch.check_launcher()  # here, so that the UI shows it: the detached process would only log it
    cmd = [sys.executable, "-m", "lab.cli", "campaign", "run", str(campaign), "--launcher", launcher]
    if memory_limit:
        cmd += ["--memory-limit", str(memory_limit)]
    env = {**os.environ, "ITERALAB_RUNS": str(runs_root())}
    with open(orch.dir / "orchestrator.log", "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=str(REPO_ROOT), env=env)
    return orch.dir, proc.pid


def start_campaign(campaign_file: str | Path, launcher: str = "auto",
                   memory_limit: int | None = None) -> tuple[Path, str]:
    """Lock the protocol when it never was, then start (or resume) its detached orchestrator.

    Returns (campaign folder, one-line note). Raises CampaignError when already running or
    finished, ProtocolError for an unusable or edited campaign file.
    """
    from lab.orchestration.orchestrator import campaign_dir_for
    from lab.orchestration.status import campaign_status

    proto = load_protocol(campaign_file)
    note = ""
    if not read_lock(proto.path):
        v = lock(proto)
        entry = LockedVersion.of(v)
        note = f"protocol locked as version {entry.version} (sha256 {entry.sha256[:12]}); "
    d = campaign_dir_for(proto, locked_version(proto), runs_root())
    if (d / "journal.sqlite").exists():
        st = CampaignStatus.of(campaign_status(d))
        if st.alive:
            raise CampaignError(f"already running (orchestrator pid {st.orchestrator.pid})")
        if st.state == CampaignState.FINISHED:
            raise CampaignError("this protocol version is finished; see 5 Results")
    d, pid = spawn_detached(proto.path, launcher, memory_limit)
    return d, note + f"campaign started in the background (pid {pid}): {d}"


def request_control(campaign_dir: str | Path, flag: str) -> None:
    """Write the 'pause' (after the current pass) or 'stop' (now) flag the orchestrator reads."""
    from lab.orchestration.journal import Journal

    if flag not in ("pause", "stop"):
        raise CampaignError(f"control flag {flag!r} unknown; use pause or stop")
    j = Journal(Path(campaign_dir) / "journal.sqlite")
    try:
        j.set_control(flag, True)
    finally:
        j.close()


class CampaignInterrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP (``interrupt_on_signals``): handled like Ctrl-C, so the launcher kills
    the running pass and the orchestrator records it interrupted (lab.orchestration.orchestrator)."""

    def __init__(self, signum: int):
        import signal

        self.signum = signum
        self.reason = signal.Signals(signum).name
        super().__init__(self.reason)


class interrupt_on_signals:
    """Context manager for a process that runs passes in the foreground (a headless run,
    ``campaign run``): SIGTERM and SIGHUP (``timeout``, ``kill``, make forwarding a SIGTERM, an
    SSH drop without tmux) raise CampaignInterrupted once, Ctrl-C stays KeyboardInterrupt; a
    second signal while the pass is being killed and recorded is ignored. Main thread only."""

    SIGNALS = ("SIGTERM", "SIGHUP")

    def __enter__(self):
        import signal
        import threading

        self.saved: dict = {}
        self.fired = False
        if threading.current_thread() is not threading.main_thread():
            return self
        for name in self.SIGNALS:
            sig = getattr(signal, name)
            self.saved[sig] = signal.signal(sig, self._handler)
        self.saved[signal.SIGINT] = signal.signal(signal.SIGINT, self._handler)
        return self

    def _handler(self, signum, frame):
        import signal

        if self.fired:  # already cleaning up: never abandon the pass half-killed
            return
        self.fired = True
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise CampaignInterrupted(signum)

    def __exit__(self, *exc):
        import signal

        for sig, old in self.saved.items():
            signal.signal(sig, old)
        return False


HEADLESS_EXIT: dict[str, int] = {CampaignState.PAUSED: 3, CampaignState.STOPPED: 4, CampaignState.BLOCKED: 5}
"""Exit status of a headless run that did not finish (finished: 0, or NOTHING_ACCEPTED_EXIT; bad
input: 2; a signal: 128 + its number)."""
NOTHING_ACCEPTED_EXIT = 6
"""Exit status of a campaign that finished with no accepted pass (every pass failed or was
rejected): nothing it measured can enter a decision, and a script must be able to tell."""
NO_DECISION_EXIT = 6
"""Exit status of ``compare`` when no configuration is eligible (``decision: none``)."""


def accepted_passes(attempts) -> int:
    """How many of ``attempts`` (lab.passes.records.Attempt) were validated and accepted."""
    return sum(1 for a in attempts if a.validation is not None and a.validation.corpus_accepted)


def run_exit_status(state: str, accepted: int) -> int:
    """The exit status of a campaign run that ended in ``state`` with ``accepted`` accepted
    passes: 0 finished with at least one, NOTHING_ACCEPTED_EXIT finished with none, else
    HEADLESS_EXIT's (1 for a state it does not name). The one rule of ``iteralab campaign run``,
    ``iteralab demo`` and the headless ``make up``."""
    if state == CampaignState.FINISHED:
        return 0 if accepted else NOTHING_ACCEPTED_EXIT
    return HEADLESS_EXIT.get(str(state), 1)


def run_headless(campaign_file: str | Path, launcher: str = "auto", echo=None,
                 memory_limit: int | None = None) -> HeadlessRun:
    """Run a campaign in this process (no UI): lock it when it never was (as the UI's start
    does), run (or resume) its rotated schedule, and pack the archive when it finished.

    Returns a HeadlessRun (``exit`` is ``run_exit_status``'s; ``line`` is the archive's path when
    finished, after a line saying so when no pass was accepted, else "paused: N of M passes ..."
    or stopped, blocked).
    ``echo``: called with each progress line (None: silent). Raises CampaignBusy (a LabError) when
    another orchestrator runs it, CampaignFolderLost when its folder goes, ProtocolError for an
    unusable or edited campaign file, KeyboardInterrupt / CampaignInterrupted when interrupted (the
    running pass killed, its row interrupted: ``interrupt_on_signals``)."""
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.status import campaign_status

    proto = load_protocol(campaign_file)
    if not read_lock(proto.path):
        v = lock(proto)
        if echo is not None and v:
            entry = LockedVersion.of(v)
            echo(f"protocol locked as version {entry.version} (sha256 {entry.sha256[:12]})")
    orch = Orchestrator.prepare(proto.path, runs_root(), make_launcher(launcher, memory_limit))
    if echo is not None:
        orch.echo = echo
        echo(f"campaign {proto.name}: {orch.dir}")
    state = orch.run()
    st = CampaignStatus.of(campaign_status(orch.dir))
    accepted = accepted_passes(list(st.attempts))
    archive = None
    if state == CampaignState.FINISHED:
        archive = packed = make_archive(orch.dir)
        if echo is not None:  # what `iteralab archive` prints, so the headless run needs no second archive
            from lab.inputs.corpus import sha256_file

            echo(f"report: {orch.dir / 'report'}; archive sha256 {sha256_file(packed)} (record it "
                 f"elsewhere); check it: `{iteralab_command()} archive verify {shlex.quote(str(packed))}`")
        line = str(packed)  # the last line: scripts read the archive's path there
        if not accepted:
            line = (f"no pass of {st.finished} was accepted: nothing here can enter a decision (each "
                    f"pass's reasons: `{iteralab_command()} campaign status {proto.path}`)\n" + line)
    else:
        why = f" ({str(orch.journal.get_control('blocked', ''))[:200]})" if state == CampaignState.BLOCKED else ""
        line = (f"{state}: {st.finished} of {st.planned} passes finished{why}; run the same command "
                f"again to resume (no archive packed: `{iteralab_command()} archive --partial "
                f"{shlex.quote(str(orch.dir))}` packs one labelled partial)")
    return HeadlessRun(state=state, dir=orch.dir, archive=archive, finished=st.finished, planned=st.planned,
                       accepted=accepted, exit=run_exit_status(state, accepted), line=line)


def run_demo(launcher: str = "local", echo=None, memory_limit: int | None = None) -> HeadlessRun:
    """Lock (if needed) and run the demo campaign headless (``run_headless``)."""
    f = demo_campaign_file()
    lock(load_protocol(f))
    return run_headless(f, launcher, echo, memory_limit)


# ---- archive -----------------------------------------------------------------------

def make_archive(campaign_dir: str | Path, partial: bool = False, with_corpus: bool = False,
                 sign_key: str | Path | None = None) -> Path:
    """Rebuild the report, then pack the evidence archive beside the campaign folder:
    <campaign>-<version folder>-<UTC stamp>.tar.gz (lab.evidence.assemble.archive_campaign: an unfinished
    campaign is refused unless ``partial``; ``with_corpus`` packs the corpus file too; ``sign_key``, an
    OpenSSH private key, signs it into <archive>.sig beside it). Returns the archive's path."""
    from lab.evidence.assemble import archive_campaign

    return archive_campaign(Path(campaign_dir), partial, with_corpus, None if sign_key is None else Path(sign_key))


def assemble_archive(campaign_dir: str | Path, partial: bool = False) -> ArchiveMade:
    """Pack (``partial``: a campaign not finished, labelled partial) and verify: an ArchiveMade
    (its path, size, sha256 and lab.evidence.format.Verification).

    A [quality] metric = "file.py:function" is re-derived with the campaign's own metric file
    (the one this machine's passes were validated with): verify still checks its sha256 against
    the lock's before running it in a fresh process (lab.evidence.user_metric.user_metric_ref)."""
    from lab.evidence.archive import verify
    from lab.evidence.assemble import metric_file

    path = make_archive(campaign_dir, partial)
    own = metric_file(Path(campaign_dir))  # moved away since: verify says how to opt in
    v = verify(path, own if own is not None and own.is_file() else None)
    return ArchiveMade(path=str(path), size_bytes=path.stat().st_size, sha256=sha256_file(path), verification=v,
                       partial=partial)


def replay_here(archive: str | Path, folder: str | Path | None = None) -> ReplayedCampaign:
    """The UI's replay (Archive screen): ``lab.evidence.replay.replay_archive`` of ``archive`` into
    ``folder``/campaign.toml (the bundle's campaign file that `make up` opens; default: the
    working directory), the archive's [cost] kept. Returns a ReplayedCampaign. Raises ReplayError
    (a ProtocolError, one line) when campaign.toml exists already, the archive does not verify,
    or corpus or model differ."""
    from lab.evidence.replay import replay_archive

    out = Path(folder or Path.cwd()) / "campaign.toml"
    r = replay_archive(archive, out)
    entry = LockedVersion.of(r.lock_entry)
    return ReplayedCampaign(campaign_file=str(r.campaign_file), version=entry.version,
                            question_version=r.question_version, corpus=str(r.corpus), model=r.model)
