"""Assemble a campaign's evidence archive: refuse an unfinished campaign unless a partial
archive is asked for, rebuild the report, pack (lab.evidence.archive.pack).

A campaign is final when no orchestrator runs it, its journal says "finished" and every
planned slot has a finished attempt (ok, oom, error or killed); anything else is partial.
"""

from __future__ import annotations

import json
import shlex
from datetime import UTC, datetime
from pathlib import Path

from lab.evidence.archive import pack
from lab.evidence.format import ArchiveError, CampaignUnfinished
from lab.evidence.members import LockedFacts, as_record
from lab.facts.host import iteralab_command

INCLUDE = ["campaign.toml", "campaign.lock.json", "corpus_card.json", "protocol_version.json",
           "journal.sqlite", "orchestrator.log", "passes/", "report/"]


def unfinished_reason(campaign_dir: Path) -> str:
    """'' when the campaign is final, else one line saying why it is not."""
    from lab.orchestration.status import CampaignState, campaign_status
    from lab.passes.events import PassStatus

    st = campaign_status(Path(campaign_dir))
    running = [a.pass_id for a in st["attempts"] if a.status == PassStatus.RUNNING]
    if st["alive"]:
        why = f"still running (orchestrator pid {st['orchestrator'].get('pid')})"
    elif st["state"] != CampaignState.FINISHED or st["finished"] < st["planned"] or running:
        why = f"not finished (state {st['state']})"
    else:
        return ""
    return f"campaign {why}: {st['finished']} of {st['planned']} planned passes finished"


def corpus_file(campaign_dir: Path) -> Path:
    """The corpus file the campaign's passes read (its [corpus] path, resolved as at lock)."""
    return campaign_protocol(campaign_dir).corpus_path


def metric_file(campaign_dir: Path) -> Path | None:
    """The file of the campaign's [quality] metric = "file.py:function" (resolved as at lock),
    None for a built-in metric."""
    return campaign_protocol(campaign_dir).task_files().get("metric")


def campaign_protocol(campaign_dir: Path):
    """The campaign folder's Protocol (its campaign.toml, paths resolved against the original
    campaign file when it is still there, as at lock)."""
    from lab.orchestration.journal import Journal
    from lab.orchestration.protocol import load_protocol

    j = Journal.open_read_only(campaign_dir / "journal.sqlite")
    try:
        original = j.get_control("campaign_file")
    finally:
        j.close()
    return load_protocol(campaign_dir / "campaign.toml",
                         relative_to=original if original and Path(original).is_file() else None)


def archive_campaign(campaign_dir: Path, partial: bool = False, with_corpus: bool = False,
                     sign_key: Path | None = None) -> Path:
    """Rebuild the report and pack ``<runs>/<campaign>/<campaign>-<version>-<UTC time>.tar.gz``.

    An unfinished campaign raises CampaignUnfinished (an ArchiveError: one line with the reason) unless ``partial``;
    a partial archive says so in ARCHIVE.json and the decision note. ``with_corpus``: the corpus
    file goes in as ``corpus/<file name>`` (for a user who has the right to copy it), listed in
    SHA256SUMS and checked by verify against the locked corpus sha256, so a replay
    (lab.evidence.replay) needs only the archive and the model. ``sign_key``: an OpenSSH private
    key that signs the archive's bytes into ``<archive>.sig`` beside it
    (lab.evidence.signature.sign_archive); ssh-keygen and the key are checked before anything is
    packed, and an archive whose signing failed is removed (SignatureError, one line): an archive
    asked signed is signed or not written. Returns the archive path.
    """
    from lab.evidence.signature import SignatureError, sign_archive, signing_ready
    from lab.facts.signing import signature_path
    from lab.report.build import build_report

    if sign_key is not None:
        signing_ready(sign_key)  # before the report is rebuilt or anything packed
    campaign_dir = Path(campaign_dir).resolve()  # '.' or '..' has no name to give the archive
    reason = unfinished_reason(campaign_dir)
    if reason and not partial:
        raise CampaignUnfinished(f"{campaign_dir}: {reason}; wait for it to finish (`{iteralab_command()} "
                                 f"campaign status {shlex.quote(str(campaign_dir))}`), "
                                 "or pass --partial for an archive labelled partial")
    before = _attempts_state(campaign_dir)
    running = _running_pass(before)
    if running:
        raise ArchiveError(f"{campaign_dir}: pass {running} is running: its row would differ between the "
                           f"report and the journal packed after it; wait for it to end, or `{iteralab_command()} "
                           "campaign pause` and archive once it has ended")
    build_report(campaign_dir, partial_reason=reason)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    stem = f"{campaign_dir.parent.name}-{campaign_dir.name}-{stamp}"
    out, n = campaign_dir.parent / f"{stem}.tar.gz", 1
    while out.exists() or signature_path(out).exists():  # two archives in one second: never overwrite the first
        n += 1
        out = campaign_dir.parent / f"{stem}-{n}.tar.gz"
    extra = {}
    if with_corpus:
        from lab.orchestration.identity import content_sha256

        src = corpus_file(campaign_dir)
        if not src.is_file():
            raise ArchiveError(f"{campaign_dir}: --with-corpus: corpus {src} not found; restore it, or archive "
                               "without --with-corpus")
        version = as_record(json.loads((campaign_dir / "protocol_version.json").read_text()), LockedFacts)
        locked = version.corpus_sha256 if version is not None else None
        if content_sha256(src) != locked:
            raise ArchiveError(f"{campaign_dir}: --with-corpus: corpus {src} has sha256 {content_sha256(src)}, the "
                               f"campaign locked {locked}; restore the locked corpus, or archive without --with-corpus")
        extra[f"corpus/{src.name}"] = src
    path = pack(campaign_dir, out, INCLUDE, partial=reason, extra=extra,
                check=lambda packed: refuse_unverified(campaign_dir, packed))
    if _attempts_state(campaign_dir) != before:  # a pass started or ended between the report and the journal copy
        path.unlink(missing_ok=True)
        raise ArchiveError(f"{campaign_dir}: a pass started or ended while the archive was packed, so its "
                           f"report and journal would disagree; run the same command again (or `{iteralab_command()} "
                           "campaign pause` first)")
    if sign_key is not None:
        try:
            sign_archive(path, sign_key)
        except SignatureError as exc:
            path.unlink(missing_ok=True)  # asked signed: never left unsigned
            raise SignatureError(f"{exc}; no archive was kept (run the same command again)") from None
        except BaseException:
            path.unlink(missing_ok=True)
            raise
    return path


def refuse_unverified(campaign_dir: Path, packed: Path) -> None:
    """Verify the archive just packed from ``campaign_dir`` (lab.evidence.verify, a user metric with
    the campaign's own file); ArchiveError (one line, its first problem) when a problem is found, so
    an archive whose members disagree is never written. A user metric whose file is gone since is
    not a problem here: verify names it as not re-derived."""
    from lab.evidence.archive import verify

    own = metric_file(campaign_dir)
    v = verify(packed, own if own is not None and own.is_file() else None)
    if v.problems:
        raise ArchiveError(f"{campaign_dir}: the archive would not verify ({len(v.problems)} problem(s), first: "
                           f"{v.problems[0]}); nothing was written: the campaign folder's files were changed after "
                           "its passes ran; restore them, or run the campaign again")


def _attempts_state(campaign_dir: Path) -> tuple[tuple, bool]:
    """((pass id, status, items completed) of every attempt), whether an orchestrator is alive."""
    from lab.orchestration.status import campaign_status

    st = campaign_status(campaign_dir)
    return tuple((a.pass_id, str(a.status), a.items_completed) for a in st["attempts"]), st["alive"]


def _running_pass(state: tuple[tuple, bool]) -> str:
    """The pass id a live orchestrator is running, '' when none (a 'running' row left by a dead
    orchestrator is packed as it stands: the report and the journal agree on it)."""
    from lab.passes.events import PassStatus

    attempts, alive = state
    return next((pid for pid, status, _ in attempts if status == PassStatus.RUNNING), "") if alive else ""

