"""Write a campaign's report folder: raw table, summary, manifest, decision note.

Everything is derived from the journal and the pass folders, so a report can be rebuilt at
any time (after a resume too) and always agrees with the predictions on disk.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path

from lab.cost.hardware import Measured
from lab.facts.diskfull import DiskFull, is_disk_full, swap_folder
from lab.inputs.corpus import fingerprint
from lab.inputs.manifest import build_manifest
from lab.inputs.models import model_revision
from lab.orchestration.journal import Journal
from lab.orchestration.protocol import load_protocol
from lab.passes.events import FINISHED
from lab.passes.records import Attempt
from lab.report.raw_table import pass_cards, raw_rows, write_raw_table
from lab.report.summary import campaign_summary, write_summary


def write_gold_labels(corpus_path: Path, out: Path) -> Path:
    """report/gold_labels.jsonl: {id, label, bucket} per corpus item (no text), so that
    ``archive verify`` can recompute every row's metric from the predictions."""
    from lab.inputs.corpus import read_corpus

    with open(out, "w", encoding="utf-8", newline="\n") as fh:
        for r in read_corpus(corpus_path):
            fh.write(json.dumps({"id": r["id"], "label": r.get("label"), "bucket": r.get("bucket")},
                                ensure_ascii=False) + "\n")
    return out


def build_report(campaign_dir: Path, launcher_info: dict | None = None, partial_reason: str = "") -> dict:
    """Write report/{raw_table.csv, summary.csv, summary.json, manifest.json, decision_note.md,
    gold_labels.jsonl, report.html}. ``partial_reason``: non-empty when the campaign is not
    finished; the decision note then opens with it.

    Returns {"rows": n, "summary": [VariantSummary, ...], "report_dir": Path, "orchestrator": dict}.
    Builds in report.partial/ and swaps it in whole. Raises DiskFull (one line, the partial
    folder removed, the previous report kept) when the disk is full.
    """
    campaign_dir = Path(campaign_dir)
    version = json.loads((campaign_dir / "protocol_version.json").read_text())
    journal = Journal.open_read_only(campaign_dir / "journal.sqlite")
    original = journal.get_control("campaign_file")
    # relative corpus/model/catalog paths belong to the original file's folder (same content, same hash)
    proto = load_protocol(campaign_dir / "campaign.toml",
                          relative_to=original if original and Path(original).is_file() else None)
    attempts = journal.attempts()
    orch_info = journal.get_control("orchestrator", {}) or {}
    described = journal.get_control("launcher", None)
    hosts = journal.get_control("hosts", None)
    launchers = journal.get_control("launchers", None) or []
    journal.close()
    final = campaign_dir / "report"
    out = campaign_dir / "report.partial"  # built aside, swapped in whole: the last report stays until then
    try:
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        result = _write_report(out, proto, version, attempts, described, launcher_info, campaign_dir,
                               partial_reason, hosts, launchers)
        swap_folder(out, final)
    except BaseException as exc:
        shutil.rmtree(out, ignore_errors=True)
        if is_disk_full(exc):
            raise DiskFull(campaign_dir, "writing the report") from None
        raise
    return {**result, "report_dir": final, "orchestrator": orch_info}


def _differ(starts: list[dict]) -> bool:
    """Whether the launchers recorded at the campaign's starts differ (their time aside)."""
    return len({json.dumps({k: v for k, v in x.items() if k != "recorded_at"}, sort_keys=True, default=str)
                for x in starts}) > 1


def copy_catalog(proto, dest: Path) -> dict:
    """Copy the price catalog the decision note prices with (the campaign's [cost] catalog,
    resolved as at lock, or the shipped one) to ``dest`` in the report, so that the archive
    carries the prices it states; returns the manifest's record {path, sha256, copy} (or
    {path, missing} when the file is gone)."""
    from lab.cost.forfaits import DEFAULT_CATALOG
    from lab.facts.files import sha256_file

    src = Path(proto.catalog_path or DEFAULT_CATALOG)
    if not src.is_file():
        return {"path": str(src), "missing": "not found when the report was built"}
    shutil.copyfile(src, dest)
    return {"path": str(src), "sha256": sha256_file(dest), "copy": f"report/{dest.name}"}


def measured_hardware(attempts: list[Attempt]) -> dict[str, Measured]:
    """{variant_id: the hardware its passes ran on} from the journal's attempts (each pass's cards:
    lab.report.raw_table.pass_cards), for the hardware check of lab.cost.hardware."""
    cards: dict[str, list] = {}
    for a in attempts:
        cards.setdefault(a.variant_id, []).append(pass_cards(a.result) if a.result is not None else ())
    return {vid: Measured.of(passes) for vid, passes in cards.items()}


def campaign_note(proto, summary, pricing: dict, attempts: list[Attempt], partial_reason: str = "",
                  observed: bool = False) -> str:
    """The campaign's decision note (lab.report.decision_note.decision_note over every declared
    variant, so one not run yet is listed as not run, and each priced configuration's hardware checked
    against its package: lab.cost.hardware) with its banners: partial evidence (``partial_reason``), no
    finished pass, and the observed campaign window (``observed``: the span of the passes stands in
    for an undeclared window). The one note for report/decision_note.md and the Cost screen.
    ``attempts``: the journal's attempts (lab.orchestration.journal.Journal.attempts)."""
    from lab.report.decision_note import decision_campaign, decision_note

    planned = [(v.variant_id, v.label) for v in proto.variants]
    note = decision_note(summary, decision_campaign(proto), pricing, planned=planned,
                         measured=measured_hardware(attempts), scenario=proto.config.scenario)
    if observed:
        note += ("\n\n_Campaign window: no window was declared in the campaign file; the window "
                 "above is the span of the passes actually run (first start to last end)._\n")
    if not any(a.status in FINISHED for a in attempts):
        note = ("> **No evidence yet.** no pass has finished in this campaign: the tables are empty "
                "and no configuration can be judged.\n\n" + note)
    if partial_reason:
        note = (f"> **Partial evidence.** {partial_reason}. The figures below cover only the passes "
                "that ran; an archive of this campaign is labelled partial.\n\n" + note)
    return note


def _write_report(out: Path, proto, version: dict, attempts: list[Attempt], described, launcher_info,
                  campaign_dir: Path, partial_reason: str = "", hosts: list[dict] | None = None,
                  launchers: list[dict] | None = None) -> dict:
    from lab.report.decision_note import decision_pricing, hardware_checks

    rows = raw_rows(attempts, proto.name, version["version"], campaign_dir)
    write_raw_table(rows, out / "raw_table.csv")
    write_gold_labels(proto.corpus_path, out / "gold_labels.jsonl")
    summary = campaign_summary(rows, attempts)
    write_summary(summary, out / "summary.csv")

    catalog = copy_catalog(proto, out / "catalog.csv")
    launcher = launcher_info or described or {"launcher": sorted({a.launcher for a in attempts}) or ["none"]}
    if any(a.launcher == "local" for a in attempts):
        launcher.setdefault("isolation", "no container isolation (local process)")
    manifest = build_manifest(
        campaign={"name": proto.name, "protocol_version": version["version"],
                  "protocol_sha256": version["sha256"], "locked_at": version["locked_at"],
                  "identity": {k: version.get(k) for k in ("protocol_sha256", "corpus_sha256", "model_sha256")},
                  "order": [f"{a.seq}:{a.variant_id}" for a in attempts],
                  "repetitions": proto.config.timing.repetitions, "seed": proto.config.timing.seed,
                  "threads_requested": proto.config.timing.threads,
                  "deterministic": {"torch.manual_seed": proto.config.timing.seed,
                                    "cudnn.benchmark": False, "use_deterministic_algorithms": False},
                  "variants": [v.to_json() for v in proto.variants]},
        launcher=launcher,
        model=model_revision(proto.model_ref, proto.config.model.revision),
        corpus=fingerprint(proto.corpus_path),
        extra={"pass_backends": sorted({a.result.backend or "" for a in attempts if a.result is not None} - {""}),
               "pass_torch": sorted({a.result.torch_version or "" for a in attempts if a.result is not None} - {""}),
               "pass_threads": sorted({a.result.threads for a in attempts if a.result is not None} - {None}),
               "catalog": catalog,
               # every start's launcher when they differ (the "launcher" field is the last one's)
               "launchers_by_start": launchers if _differ(launchers or []) else []},
        recorded_hosts=hosts)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, default=str) + "\n")

    cost = asdict(proto.cost) if proto.cost is not None else {}  # no [cost]: no package declared
    if proto.catalog_path is not None:
        cost["catalog"] = str(proto.catalog_path)  # as resolved at lock, not from the working directory
    starts = [a.start_time for a in attempts if a.start_time]
    ends = [a.end_time for a in attempts if a.end_time]
    observed = bool(starts and ends) and not (proto.cost is not None and proto.cost.window_start)
    pricing = decision_pricing(cost, (min(starts), max(ends)) if observed else None)
    note = campaign_note(proto, summary, pricing, attempts, partial_reason, observed)
    (out / "decision_note.md").write_text(note)
    from lab.report.html import campaign_report

    checks = hardware_checks(summary, pricing, measured_hardware(attempts))
    (out / "report.html").write_text(campaign_report(proto.name, summary, rows, note, checks), encoding="utf-8")
    return {"rows": len(rows), "summary": summary}
